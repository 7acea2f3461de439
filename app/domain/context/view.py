"""View assembly: the context an agent reads for its next call, within a token budget.

Mutation-tested (docs/benchmarks/mutation-testing-context.md, ops/mutate_context_view.sh):
this file holds assemble_view and its helpers only, so the mutants are exactly theirs.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from .limits import validate_budget
from .state import (
    COLD,
    FACT_KIND_PRIORITY,
    HOT,
    WARM,
    AgentContext,
    ColdChunk,
    ContextMessage,
    ContextStateError,
    KeyFact,
    WarmSegment,
    canonical_json,
)

# Mirrors app.context.tokens.REPLY_PRIMING_TOKENS; repeated so the domain imports no
# tokenizer. A view of n messages costs 3 + sum(count_message) tokens.
REPLY_PRIMING_TOKENS = 3


@dataclass(frozen=True)
class ViewSettings:
    """How a budget is shared. Shares are caps, not reservations: what one tier leaves
    unused flows to the tiers after it.

    facts_share 0.30: live facts are the point of the warm tier; at 4k that is ~60 facts.
    warm_reserve 0.10 / cold_reserve 0.10: held back from the hot tier so that a long
    recent window cannot crowd out every summary and every recalled chunk.
    Cold ranking: (1 - w) * cosine + w * recency, recency halving every hour of age.
    """

    facts_share: float = 0.30
    warm_reserve: float = 0.10
    cold_reserve: float = 0.10
    recency_weight: float = 0.2
    recency_half_life_seconds: float = 3_600.0
    # With a query (``ranking`` given) the view is relevance-first: pinned, then the key
    # facts whose source message ranks (<= query_facts_share), then the newest messages
    # (<= query_recent_share), then messages in ranking order while they fit. Both shares
    # are caps chosen by measurement (agentrm bench context and its ablations:
    # docs/benchmarks/context.md).
    query_facts_share: float = 0.0
    query_recent_share: float = 0.0
    # Messages pending extraction that a query-less view leaves out are shown themselves
    # (their facts are not known yet), within this share. They are few and short-lived: the
    # fact worker records a message's facts well within a second of its append.
    pending_share: float = 0.20


@dataclass(frozen=True)
class ViewItem:
    tier: str        # hot | warm | cold
    kind: str        # pinned | facts | summary | message | chunk
    role: str
    content: str
    tokens: int      # count_message(role, content)
    ref: str         # seq, segment id, chunk id, or the fact ids of the facts block

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ContextView:
    agent_id: str
    budget_tokens: int
    tokens: int                               # REPLY_PRIMING_TOKENS + sum(item.tokens); 0 if empty
    items: tuple[ViewItem, ...]
    omitted_pinned: tuple[int, ...] = ()      # pinned seqs that did not fit the budget

    @property
    def pinned(self) -> tuple[str, ...]:
        return tuple(i.content for i in self.items if i.kind == "pinned")

    def to_dict(self) -> dict[str, Any]:
        return {"agent_id": self.agent_id, "budget_tokens": self.budget_tokens, "tokens": self.tokens,
                "items": [i.to_dict() for i in self.items], "omitted_pinned": list(self.omitted_pinned)}

    def canonical_bytes(self) -> bytes:
        return canonical_json(self.to_dict()).encode("utf-8")

    def text(self) -> str:
        """Everything the agent would read, for answer-string checks."""
        return "\n".join(i.content for i in self.items)


NEAR_DUPLICATE_JACCARD = 0.6
FACTS_HEADER = "Key facts from earlier in this session (newer facts replace older ones):"
_ROLE_RANK = {"system": 0, "user": 0, "assistant": 1, "tool": 2}


def fact_priority(fact: KeyFact) -> tuple[int, int, int, int, str]:
    """Ranking under a tight budget, in three tiers. What the user (or system) stated comes
    first, of any kind: those are the instructions and ids that "amnesia" loses. Then what
    the assistant concluded (a root cause, a measured time, a pinned version) and the
    errors tools printed. Last, the rest of tool output: listings, logs and git history
    are bulk whose lines all look like facts, and the cold tier keeps them searchable
    (ranked above the assistant, thirty commit lines took the block). Within a tier: by
    kind, then assistant before tool, then newest first."""
    role_rank = _ROLE_RANK.get(fact.role, 1)
    tier = 0 if role_rank == 0 else 2 if role_rank == 2 and fact.kind != "error" else 1
    return (tier, FACT_KIND_PRIORITY.get(fact.kind, 99), role_rank, -fact.source_seq, fact.fact_id)


def _facts_block(facts: Sequence[KeyFact]) -> str:
    ordered = sorted(facts, key=lambda f: (f.source_seq, f.fact_id))  # read in session order
    return FACTS_HEADER + "\n" + "\n".join(f"- {f.text}" for f in ordered)


def _select_facts(facts: Sequence[KeyFact], cap: int, count_message: Callable[[str, str], int]
                  ) -> tuple[list[KeyFact], int]:
    """Most important live facts whose block fits ``cap`` tokens, measured exactly.

    Lines are added with an additive estimate (cheap), then the real block is counted and,
    in the rare case BPE merges made the estimate low, the least important lines are dropped
    until the exact count fits. The cap is therefore never exceeded."""
    if not facts or cap <= 0:
        return [], 0
    base = count_message("system", FACTS_HEADER + "\n")
    if base > cap:
        return [], 0
    empty = count_message("system", "")
    ranked = sorted(facts, key=fact_priority)
    # Two passes, for diversity (the same idea as MMR): first the most important fact of
    # each sort, then the repeats if budget is left. A repeat has a shape already seen
    # (ten AssertionErrors) or is a near-duplicate of a fact already taken (the same
    # sentence template with other values: >= 60 % of its words shared, Jaccard).
    first_of_shape: list[KeyFact] = []
    repeats: list[KeyFact] = []
    seen_shapes: set[str] = set()
    taken_words: dict[str, dict[int, list[frozenset[str]]]] = {}   # kind -> word count -> word sets
    for fact in ranked:
        shape = fact.shape or f"{fact.kind}:{fact.text}"
        if shape in seen_shapes:
            repeats.append(fact)
            continue
        words = frozenset(fact.text.lower().split())
        by_size = taken_words.setdefault(fact.kind, {})
        if _near_duplicate(words, by_size):
            repeats.append(fact)
        else:
            first_of_shape.append(fact)
            by_size.setdefault(len(words), []).append(words)
        seen_shapes.add(shape)
    chosen: list[KeyFact] = []
    estimate = base
    for fact in first_of_shape + repeats:
        line = count_message("system", f"- {fact.text}\n") - empty
        if estimate + line <= cap:
            chosen.append(fact)
            estimate += line
    while chosen:
        exact = count_message("system", _facts_block(chosen))
        if exact <= cap:
            return chosen, exact
        chosen.pop()  # chosen is in priority order: drop the least important
    return [], 0


def _near_duplicate(words: frozenset[str], by_size: Mapping[int, Sequence[frozenset[str]]]) -> bool:
    """Whether ``words`` shares >= NEAR_DUPLICATE_JACCARD of its union with a set of
    ``by_size`` (word sets by their size). The Jaccard index of two sets is at most the
    smaller size over the larger, so sizes too far apart are skipped without a set
    operation: a view ranks hundreds of facts, and comparing each with every one taken
    before it cost tens of milliseconds."""
    n = len(words)
    for m, others in by_size.items():
        if min(n, m) < NEAR_DUPLICATE_JACCARD * max(n, m):
            continue
        for other in others:
            shared = len(words & other)
            if shared >= NEAR_DUPLICATE_JACCARD * (n + m - shared):   # the union has n + m - shared
                return True
    return False


def _recency(age_seconds: float, half_life: float) -> float:
    return math.pow(0.5, max(age_seconds, 0.0) / half_life) if half_life > 0 else 0.0


def assemble_view(state: AgentContext, budget_tokens: int, chunk_scores: Mapping[str, float] | None,
                  count_message: Callable[[str, str], int], now: float,
                  settings: ViewSettings = ViewSettings(), ranking: Sequence[int] | None = None) -> ContextView:
    """The context an agent gets for its next call, never over ``budget_tokens`` as counted
    by ``count_message`` (plus the 3 reply-priming tokens).

    Output order: pinned messages (chronological), the key-facts block, the messages
    pending extraction that the view leaves out (newest first), warm summaries newest
    first, hot messages (chronological, the most recent ones that fit), then cold chunks
    ranked by cosine score (``chunk_scores``, chunk_id -> cosine, from the query) blended
    with recency; with no scores, cold chunks rank by recency alone.

    Budget is spent in this order of priority: pinned, facts (<= facts_share), hot
    (leaving warm_reserve and, if there are chunks to recall, cold_reserve), pending
    messages left out (<= pending_share), warm, cold, then any leftover extends the hot
    window further back.

    Key facts are those of every message the view may leave out, hot or cold: the facts of
    the newest messages, which the window shows verbatim whatever the block costs, are left
    out of the block (they would be said twice). A message whose facts are not extracted
    yet is not forgotten meanwhile: left out of the window, it is shown itself, or its head
    when it is long.

    Pinned messages alone over budget: the budget still wins (it is a hard limit of the
    model call). Pinned messages are taken oldest first while they fit, the rest are
    skipped and listed in ``omitted_pinned`` so the API can warn; the system prompt, being
    the oldest, is the last to go.
    """
    validate_budget(budget_tokens)
    if state.hibernated:
        raise ContextStateError(f"agent {state.agent_id} is hibernated; wake it before reading its context")
    if ranking is not None:
        return _relevant_view(state, budget_tokens, ranking, count_message, settings)
    return _tiered_view(state, budget_tokens, chunk_scores, count_message, now, settings)


def _tiered_view(state: AgentContext, budget_tokens: int, chunk_scores: Mapping[str, float] | None,
                 count_message: Callable[[str, str], int], now: float, settings: ViewSettings) -> ContextView:
    """The query-less view when the whole history does not fit (see assemble_view)."""
    remaining = budget_tokens - REPLY_PRIMING_TOKENS
    pinned_items, omitted, remaining = _pinned(state, remaining, count_message)

    segment_costs = [(s, count_message("system", _summary_content(s))) for s in reversed(state.warm_segments)]
    has_cold = bool(state.cold.chunks)
    reserve = 0
    if segment_costs:
        reserve += min(int(settings.warm_reserve * budget_tokens), segment_costs[0][1])
    if has_cold:
        reserve += int(settings.cold_reserve * budget_tokens)
    if state.unextracted:
        # Held back from the window for messages pending extraction it may leave out; when
        # it leaves none out (they are the newest, the usual case), the leftover extends
        # the window back, as any unused share does.
        by_seq = {m.seq: m for m in state.hot + state.cold.messages}
        pending_cost = sum(count_message(by_seq[s].role, by_seq[s].content) for s in state.unextracted
                           if s in by_seq)
        reserve += min(int(settings.pending_share * budget_tokens), pending_cost)

    recent = [m for m in state.hot if not m.pinned]
    facts_cap = min(remaining, int(settings.facts_share * budget_tokens))
    # The facts block costs at most its cap, so the window will show at least the newest
    # messages that fit what the cap and the reserves leave: their facts would be said
    # twice. (The window usually reaches further back; the facts of those messages are
    # shown all the same, which costs a little budget and forgets nothing.)
    shown_anyway: set[int] = set()
    floor = max(0, remaining - facts_cap - reserve)
    for m in reversed(recent):
        cost = count_message(m.role, m.content)
        if cost > floor:
            break
        shown_anyway.add(m.seq)
        floor -= cost

    fact_items: list[ViewItem] = []
    candidates = [f for f in state.live_facts if f.source_seq not in shown_anyway]
    chosen_facts, facts_cost = _select_facts(candidates, facts_cap, count_message)
    if chosen_facts:
        ordered_ids = ",".join(f.fact_id for f in sorted(chosen_facts, key=lambda f: (f.source_seq, f.fact_id)))
        fact_items.append(ViewItem(WARM, "facts", "system", _facts_block(chosen_facts), facts_cost, ordered_ids))
        remaining -= facts_cost

    hot_picked: list[ViewItem] = []
    index = len(recent) - 1
    shown_pending: set[int] = set()

    def take_hot(limit: int) -> None:
        nonlocal index, remaining
        while index >= 0:
            m = recent[index]
            if m.seq in shown_pending:
                return  # shown already, as a message pending extraction
            cost = count_message(m.role, m.content)
            if cost > remaining or cost > limit:
                return  # contiguous: the window stops at the first message that does not fit
            hot_picked.append(ViewItem(HOT, "message", m.role, m.content, cost, str(m.seq)))
            remaining -= cost
            limit -= cost
            index -= 1

    take_hot(max(0, remaining - reserve))

    pending_items: list[ViewItem] = []
    if state.unextracted:
        in_window = {recent[i].seq for i in range(index + 1, len(recent))}
        left_out = [seq for seq in reversed(state.unextracted) if seq not in in_window]
        if left_out:
            pending_items = _pending(state, left_out, min(remaining, int(settings.pending_share * budget_tokens)),
                                     count_message)
            shown_pending.update(int(i.ref) for i in pending_items)
            remaining -= sum(i.tokens for i in pending_items)

    warm_items: list[ViewItem] = []
    cold_floor = int(settings.cold_reserve * budget_tokens) if has_cold else 0
    for segment, cost in segment_costs:  # newest first
        if cost <= remaining - cold_floor:
            warm_items.append(ViewItem(WARM, "summary", "system", _summary_content(segment), cost,
                                       segment.segment_id))
            remaining -= cost

    cold_items: list[ViewItem] = []
    if has_cold:
        at_of = {m.seq: m.at for m in state.cold.messages}
        w = settings.recency_weight if chunk_scores is not None else 1.0
        ranked = []
        for position, chunk in enumerate(state.cold.chunks):
            similarity = (chunk_scores or {}).get(chunk.chunk_id, 0.0)
            recency = _recency(now - at_of.get(chunk.to_seq, now), settings.recency_half_life_seconds)
            ranked.append(((1.0 - w) * similarity + w * recency, position, chunk))
        ranked.sort(key=lambda r: (-r[0], -r[1]))  # ties: the newer chunk first
        for _, _, chunk in ranked:
            content = _chunk_content(chunk)
            cost = count_message("system", content)
            if cost <= remaining:
                cold_items.append(ViewItem(COLD, "chunk", "system", content, cost, chunk.chunk_id))
                remaining -= cost

    take_hot(remaining)  # leftover budget: extend the recent window further back
    hot_picked.reverse()  # chronological

    items = tuple(pinned_items + fact_items + pending_items + warm_items + hot_picked + cold_items)
    total = REPLY_PRIMING_TOKENS + sum(i.tokens for i in items) if items else 0
    return ContextView(agent_id=state.agent_id, budget_tokens=budget_tokens, tokens=total,
                       items=items, omitted_pinned=tuple(omitted))


PENDING_ELLIPSIS = " [...]"


def _pending(state: AgentContext, seqs: Sequence[int], cap: int, count_message: Callable[[str, str], int]
             ) -> list[ViewItem]:
    """Messages pending extraction, ``seqs`` newest first, within ``cap`` tokens: each whole
    if it fits, else its head (where a message usually states what it is about), cut on a
    word boundary, while a head of a few words still fits."""
    by_seq = {m.seq: m for m in state.hot + state.cold.messages}
    hot_seqs = {m.seq for m in state.hot}
    items: list[ViewItem] = []
    for seq in seqs:
        m = by_seq.get(seq)
        if m is None or m.pinned:
            continue
        content = m.content
        cost = count_message(m.role, content)
        if cost > cap:
            content = _head(m.role, m.content, cap, count_message)
            cost = count_message(m.role, content) if content else 0
        if not content or cost > cap:
            break  # newest first: an older message is not worth more than this one
        items.append(ViewItem(HOT if seq in hot_seqs else COLD, "pending", m.role, content, cost, str(seq)))
        cap -= cost
    return items


MIN_HEAD_WORDS = 8


def _head(role: str, content: str, cap: int, count_message: Callable[[str, str], int]) -> str:
    """The longest head of ``content`` (whole words, marked as cut) that fits ``cap``, or ""
    if fewer than MIN_HEAD_WORDS words fit. A binary search on the word count: the count
    of a prefix grows with its length."""
    words = content.split(" ")
    lo, hi = 0, len(words) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_message(role, " ".join(words[:mid]) + PENDING_ELLIPSIS) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + PENDING_ELLIPSIS if lo >= MIN_HEAD_WORDS else ""


def _pinned(state: AgentContext, remaining: int, count_message: Callable[[str, str], int]
            ) -> tuple[list[ViewItem], list[int], int]:
    """Pinned messages oldest first while they fit; the seqs of those that do not."""
    items: list[ViewItem] = []
    omitted: list[int] = []
    for m in state.hot:
        if not m.pinned:
            continue
        cost = count_message(m.role, m.content)
        if cost <= remaining:
            items.append(ViewItem(HOT, "pinned", m.role, m.content, cost, str(m.seq)))
            remaining -= cost
        else:
            omitted.append(m.seq)
    return items, omitted, remaining


def _stamped(content: str, at: float, dated: bool) -> str:
    """A message as a query view shows it: ``HH:MM`` before it, and, ``dated`` (the line
    above is of another day, or there is none), its day before that:
    ``Mon 08 May 2023 13:56 UTC``.

    Every message carries its time (questions ask "when") and each line can be dated
    without reading further than the line above. The day costs ~8 tokens once per run of
    same-day lines, inside the message; a separate header message per day would cost ~14
    (the chat framing), most of what the stamps cost (docs/benchmarks/context.md, the
    LoCoMo ablations).
    "13:56 " is 2 tokens in cl100k, "[13:56] " 4."""
    when = datetime.fromtimestamp(at, tz=UTC)
    return f"{when.strftime('%a %d %b %Y %H:%M')} UTC {content}" if dated else f"{when.strftime('%H:%M')} {content}"


def _relevant_view(state: AgentContext, budget_tokens: int, ranking: Sequence[int],
                   count_message: Callable[[str, str], int], settings: ViewSettings) -> ContextView:
    """The view for a query: relevance first, across hot and cold alike.

    ``ranking`` is message seqs, most relevant first (app.domain.context.ranking fuses the
    dense and lexical rankings). Budget goes to pinned messages, then key facts whose
    source message is in the ranking, in its order (<= query_facts_share), then the newest
    messages (<= query_recent_share), then ranked messages while they fit, skipping one
    that does not (a shorter one further down may). The unit is the single message: on
    conversations it recalls more evidence per token than 200-token chunks
    (docs/benchmarks/context.md).

    Output: pinned, the facts block, then the chosen messages in chronological order, each
    stamped with its time (questions ask "when") and, when the line above is of another
    day, with its day (``_stamped``). A message taken in between two others can change how
    the next one is stamped; that change is charged with it, so the total is exact."""
    remaining = budget_tokens - REPLY_PRIMING_TOKENS
    pinned_items, omitted, remaining = _pinned(state, remaining, count_message)
    messages = sorted((m for m in state.cold.messages + state.hot if not m.pinned), key=lambda m: m.seq)
    by_seq = {m.seq: m for m in messages}
    rank_of = {seq: position for position, seq in enumerate(ranking) if seq in by_seq}

    fact_items: list[ViewItem] = []
    matching = sorted((f for f in state.live_facts if f.source_seq in rank_of),
                      key=lambda f: (rank_of[f.source_seq], f.fact_id))
    cap = min(remaining, int(settings.query_facts_share * budget_tokens))
    chosen_facts: list[KeyFact] = []
    for fact in matching:
        if count_message("system", _facts_block(chosen_facts + [fact])) > cap:
            break
        chosen_facts.append(fact)
    if chosen_facts:
        cost = count_message("system", _facts_block(chosen_facts))
        ordered_ids = ",".join(f.fact_id for f in sorted(chosen_facts, key=lambda f: (f.source_seq, f.fact_id)))
        fact_items.append(ViewItem(WARM, "facts", "system", _facts_block(chosen_facts), cost, ordered_ids))
        remaining -= cost

    hot_seqs = {m.seq for m in state.hot}
    chosen: list[int] = []            # chosen seqs, ascending (= the output order)
    cost_of: dict[int, int] = {}      # seq -> cost as currently stamped
    stamped_costs: dict[tuple[int, bool], int] = {}

    def dated(seq: int, previous: int | None) -> bool:
        # another UTC day: compared by day number (POSIX days are 86,400 s), not by formatting
        return previous is None or by_seq[previous].at // 86_400 != by_seq[seq].at // 86_400

    def stamped_cost(seq: int, with_day: bool) -> int:
        key = (seq, with_day)
        if key not in stamped_costs:
            m = by_seq[seq]
            stamped_costs[key] = count_message(m.role, _stamped(m.content, m.at, with_day))
        return stamped_costs[key]

    def take(m: ContextMessage, limit: int) -> int | None:
        """Adds ``m`` if it fits ``limit`` with the restamping of the line after it;
        returns what it cost, or None if it did not fit."""
        at = bisect.bisect_left(chosen, m.seq)
        before = chosen[at - 1] if at > 0 else None
        after = chosen[at] if at < len(chosen) else None
        own = stamped_cost(m.seq, dated(m.seq, before))
        after_cost = stamped_cost(after, dated(after, m.seq)) if after is not None else 0
        delta = own + (after_cost - cost_of[after] if after is not None else 0)
        if delta > limit:
            return None
        chosen.insert(at, m.seq)
        cost_of[m.seq] = own
        if after is not None:
            cost_of[after] = after_cost
        return delta

    recent_cap = min(remaining, int(settings.query_recent_share * budget_tokens))
    for m in reversed(messages):
        spent = take(m, recent_cap)
        if spent is None:
            break  # contiguous: the recent window stops at the first message that does not fit
        recent_cap -= spent
        remaining -= spent
    for seq in ranking:
        if seq in by_seq and seq not in cost_of:
            spent = take(by_seq[seq], remaining)
            remaining -= spent or 0

    body: list[ViewItem] = []
    for position, seq in enumerate(chosen):
        m = by_seq[seq]
        content = _stamped(m.content, m.at, dated(seq, chosen[position - 1] if position else None))
        body.append(ViewItem(HOT if seq in hot_seqs else COLD, "message", m.role, content,
                             count_message(m.role, content), str(seq)))
    items = tuple(pinned_items + fact_items + body)
    total = REPLY_PRIMING_TOKENS + sum(i.tokens for i in items) if items else 0
    return ContextView(agent_id=state.agent_id, budget_tokens=budget_tokens, tokens=total,
                       items=items, omitted_pinned=tuple(omitted))


def _summary_content(segment: WarmSegment) -> str:
    return f"Summary of messages {segment.from_seq}-{segment.to_seq}: {segment.summary}"


def _chunk_content(chunk: ColdChunk) -> str:
    return f"Archived messages {chunk.from_seq}-{chunk.to_seq}:\n{chunk.text}"

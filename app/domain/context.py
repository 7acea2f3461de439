"""Per-agent tiered context: state, events, and the pure policy around them.

Tiers
-----
- hot:  recent messages, verbatim (``AgentContext.hot``). Pinned messages (system prompts,
        standing instructions) live here forever: they are never compacted.
- warm: compacted segments (a summary of a span) and the key facts extracted from it
        (``warm_segments``, ``facts``). A superseded fact stays, marked ``superseded_by``.
- cold: the original messages of every compacted span, and those messages cut into
        ~200-token chunks for semantic search (``cold``). Nothing is ever deleted:
        compaction only moves a span from hot to warm (its summary) and cold (its originals).

Hibernation releases all three tiers from memory. The agent's context stream in the log
is their durable copy (the fold of its ContextAppended and ContextCompacted events is the
context, whatever hibernated and woke in between), so a hibernated agent keeps only a
``ResumePoint``: where its stream ended, a digest of its working set, and the totals its
stats report. Waking folds the stream again (the shell reads it) and ``restore`` checks
the result against the resume point before it replaces the parked state.

Purity: no I/O, no clock, no model. Time enters as values (``at`` in events, ``now`` as an
argument) and token counts enter as numbers recorded in events or through a counter passed
in, so a projection rebuilt from the log is byte-identical to the live one
(``state_hash``), and the policy can be property-tested.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from app.domain.events import AGENT_HIBERNATED, AGENT_WOKEN

# -- event types ------------------------------------------------------------------------
CONTEXT_APPENDED = "ContextAppended"
CONTEXT_COMPACTED = "ContextCompacted"
CONTEXT_EVENTS = frozenset({CONTEXT_APPENDED, CONTEXT_COMPACTED, AGENT_HIBERNATED, AGENT_WOKEN})

HOT, WARM, COLD = "hot", "warm", "cold"

# Key-fact kinds, most important first. The order decides which facts survive a tight
# budget: rules and decisions are what "amnesia" after compaction loses most painfully;
# named entities are the weakest heuristic, so they go first. (app.context.facts uses it.)
FACT_KIND_PRIORITY = {"instruction": 0, "decision": 1, "error": 2, "todo": 3, "identifier": 4,
                      "path": 5, "url": 6, "quantity": 7, "entity": 8}
ROLES = ("system", "user", "assistant", "tool")

# Mirrors app.context.tokens.REPLY_PRIMING_TOKENS; repeated so the domain imports no
# tokenizer. A view of n messages costs 3 + sum(count_message) tokens.
REPLY_PRIMING_TOKENS = 3

# -- limits -----------------------------------------------------------------------------
# 100k characters is ~25k tokens: bigger than any single turn an agent should keep in
# context (that is a file dump, which belongs in a tool's store), and it bounds the CPU a
# single request can spend in the tokenizer.
MAX_MESSAGE_CHARS = 100_000
# An append is one agent step (a turn's messages plus tool results); 100 is far above real
# steps and keeps one request's event batch small.
MAX_MESSAGES_PER_APPEND = 100
# Below 256 tokens even a system prompt and one message do not fit; above 2^20 no model
# accepts the view (the largest windows today are ~1M tokens).
MIN_BUDGET_TOKENS = 256
MAX_BUDGET_TOKENS = 1_048_576


class ContextLimitError(ValueError):
    """A request broke a documented limit; ``limit`` names it for API error codes."""

    def __init__(self, limit: str, value: Any, bound: Any, message: str) -> None:
        super().__init__(message)
        self.limit, self.value, self.bound = limit, value, bound


class ContextStateError(ValueError):
    """An operation that the agent's current state does not allow (e.g. view while hibernated)."""


def validate_message(role: str, content: str) -> None:
    if "\x00" in content:
        raise ContextLimitError("content", 0, (0, 0), "content may not contain NUL characters")
    if role not in ROLES:
        raise ContextLimitError("role", role, ROLES,
                                f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not isinstance(content, str):
        raise ContextLimitError("content", type(content).__name__, "str", "content must be a string")
    if len(content) > MAX_MESSAGE_CHARS:
        raise ContextLimitError(
            "message_chars", len(content), MAX_MESSAGE_CHARS,
            f"message has {len(content)} characters; the limit is {MAX_MESSAGE_CHARS} "
            "(store large tool outputs elsewhere and append a reference)")


def validate_append(messages: Sequence[tuple[str, str]]) -> None:
    """Checks one append request: 1..MAX_MESSAGES_PER_APPEND messages, each valid."""
    if len(messages) == 0:
        raise ContextLimitError("messages_per_append", 0, 1, "an append needs at least one message")
    if len(messages) > MAX_MESSAGES_PER_APPEND:
        raise ContextLimitError(
            "messages_per_append", len(messages), MAX_MESSAGES_PER_APPEND,
            f"{len(messages)} messages in one append; the limit is {MAX_MESSAGES_PER_APPEND}")
    for role, content in messages:
        validate_message(role, content)


def validate_budget(budget_tokens: int) -> None:
    if not isinstance(budget_tokens, int) or isinstance(budget_tokens, bool):
        raise ContextLimitError("budget_tokens", budget_tokens, "int", "budgetTokens must be an integer")
    if not MIN_BUDGET_TOKENS <= budget_tokens <= MAX_BUDGET_TOKENS:
        raise ContextLimitError(
            "budget_tokens", budget_tokens, (MIN_BUDGET_TOKENS, MAX_BUDGET_TOKENS),
            f"budgetTokens must be between {MIN_BUDGET_TOKENS} and {MAX_BUDGET_TOKENS}, "
            f"got {budget_tokens}")


# -- state ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ContextMessage:
    seq: int
    role: str
    content: str
    pinned: bool
    tokens: int          # count_message(role, content): includes the 3-token framing
    at: float


@dataclass(frozen=True)
class WarmSegment:
    segment_id: str
    from_seq: int
    to_seq: int
    summary: str
    summary_tokens: int
    at: float


@dataclass(frozen=True)
class KeyFact:
    fact_id: str
    kind: str
    text: str
    key: str
    source_seq: int
    superseded_by: str | None = None
    tokens: int = 0      # count_text(text); 0 when the event did not record it
    role: str = "user"   # role of the source message: used to rank facts under a tight budget
    value: str = ""      # normalised value; same key + different value = contradiction
    shape: str = ""      # "sort of line" (e.g. error class); the view shows one per shape first


@dataclass(frozen=True)
class ColdChunk:
    chunk_id: str
    from_seq: int
    to_seq: int
    text: str
    tokens: int


@dataclass(frozen=True)
class ColdArchive:
    """Originals of compacted spans and their chunks."""

    messages: tuple[ContextMessage, ...] = ()
    chunks: tuple[ColdChunk, ...] = ()


GROWTH_WINDOW = 32  # appends remembered for the growth rate; bounded so state stays small


@dataclass(frozen=True)
class GrowthStats:
    """Recent appends as (at, tokens), oldest first, at most GROWTH_WINDOW of them."""

    window: tuple[tuple[float, int], ...] = ()

    def record(self, at: float, tokens: int) -> "GrowthStats":
        return GrowthStats(window=(self.window + ((at, tokens),))[-GROWTH_WINDOW:])

    def tokens_per_minute(self, now: float) -> float:
        """Tokens appended per minute over the window, measured up to ``now`` so that an
        agent that went quiet stops counting as a fast grower."""
        if len(self.window) < 2:
            return 0.0
        first_at = self.window[0][0]
        span = max(now - first_at, 1.0)  # a same-instant burst is fast, not infinite
        grown = sum(t for _, t in self.window[1:])  # tokens that arrived after the first point
        return grown * 60.0 / span


@dataclass(frozen=True)
class ResumePoint:
    """All that a hibernated agent keeps in memory of its context: the end of its context
    stream (last seq and compaction count, which fix the stream version), the digest of its
    hot and warm tiers that the restored state must match, and the message and token
    totals that ContextStats reports while it sleeps."""

    last_seq: int
    compactions: int
    digest: str
    messages: int
    tokens: int


@dataclass(frozen=True)
class AgentContext:
    agent_id: str
    hot: tuple[ContextMessage, ...] = ()
    warm_segments: tuple[WarmSegment, ...] = ()
    facts: tuple[KeyFact, ...] = ()
    cold: ColdArchive = field(default_factory=ColdArchive)
    growth: GrowthStats = field(default_factory=GrowthStats)
    last_seq: int = 0
    compactions: int = 0
    last_activity_at: float = 0.0
    hibernated: bool = False
    resume_point: ResumePoint | None = None

    def tier_of(self, seq: int) -> str | None:
        """hot or cold for a message seq (warm holds summaries, not messages)."""
        if any(m.seq == seq for m in self.hot):
            return HOT
        if any(m.seq == seq for m in self.cold.messages):
            return COLD
        return None

    @property
    def hot_tokens(self) -> int:
        return sum(m.tokens for m in self.hot)

    @property
    def live_facts(self) -> tuple[KeyFact, ...]:
        return tuple(f for f in self.facts if f.superseded_by is None)


def new_context(agent_id: str) -> AgentContext:
    return AgentContext(agent_id=agent_id)


# -- serialisation ----------------------------------------------------------------------
def state_to_dict(state: AgentContext) -> dict:
    """Plain JSON-able dict (tuples become lists). Field order is fixed by the dataclasses
    and keys are sorted on dump, so equal states have equal bytes."""
    return asdict(state)


def _msg(d: Mapping) -> ContextMessage:
    return ContextMessage(seq=int(d["seq"]), role=d["role"], content=d["content"],
                          pinned=bool(d["pinned"]), tokens=int(d["tokens"]), at=float(d["at"]))


def _seg(d: Mapping) -> WarmSegment:
    return WarmSegment(segment_id=d["segment_id"], from_seq=int(d["from_seq"]), to_seq=int(d["to_seq"]),
                       summary=d["summary"], summary_tokens=int(d["summary_tokens"]), at=float(d["at"]))


def _fact(d: Mapping) -> KeyFact:
    return KeyFact(fact_id=d["fact_id"], kind=d["kind"], text=d["text"], key=d["key"],
                   source_seq=int(d["source_seq"]), superseded_by=d.get("superseded_by"),
                   tokens=int(d.get("tokens", 0)), role=d.get("role", "user"),
                   value=d.get("value", ""), shape=d.get("shape", ""))


def _chunk(d: Mapping) -> ColdChunk:
    return ColdChunk(chunk_id=d["chunk_id"], from_seq=int(d["from_seq"]), to_seq=int(d["to_seq"]),
                     text=d["text"], tokens=int(d["tokens"]))


def state_from_dict(d: Mapping) -> AgentContext:
    cold = d.get("cold") or {}
    rp = d.get("resume_point")
    return AgentContext(
        agent_id=d["agent_id"],
        hot=tuple(_msg(m) for m in d.get("hot", ())),
        warm_segments=tuple(_seg(s) for s in d.get("warm_segments", ())),
        facts=tuple(_fact(f) for f in d.get("facts", ())),
        cold=ColdArchive(
            messages=tuple(_msg(m) for m in cold.get("messages", ())),
            chunks=tuple(_chunk(c) for c in cold.get("chunks", ()))),
        growth=GrowthStats(window=tuple((float(a), int(t)) for a, t in (d.get("growth") or {}).get("window", ()))),
        last_seq=int(d.get("last_seq", 0)),
        compactions=int(d.get("compactions", 0)),
        last_activity_at=float(d.get("last_activity_at", 0.0)),
        hibernated=bool(d.get("hibernated", False)),
        resume_point=None if rp is None else ResumePoint(
            last_seq=int(rp["last_seq"]), compactions=int(rp["compactions"]), digest=rp["digest"],
            messages=int(rp["messages"]), tokens=int(rp["tokens"])),
    )


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def state_hash(state: AgentContext) -> str:
    """SHA-256 of the canonical serialisation: what replayCheck compares."""
    return hashlib.sha256(canonical_json(state_to_dict(state)).encode("utf-8")).hexdigest()


def _working_set_digest(hot: Iterable[ContextMessage], segments: Iterable[WarmSegment],
                        facts: Iterable[KeyFact]) -> str:
    payload = {"hot": [asdict(m) for m in hot], "segments": [asdict(s) for s in segments],
               "facts": [asdict(f) for f in facts]}
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def resume_point_for(state: AgentContext) -> dict:
    """The ``resume_point`` an AgentHibernated event should carry for this state. Its
    digest ties the event to the exact context it parks; the seq lists are for readers of
    the log (what was hot, what was warm), the fold does not need them."""
    return {
        "last_seq": state.last_seq,
        "hot_seqs": [m.seq for m in state.hot],
        "segment_ids": [s.segment_id for s in state.warm_segments],
        "fact_ids": [f.fact_id for f in state.facts],
        "digest": _working_set_digest(state.hot, state.warm_segments, state.facts),
    }


# -- apply ------------------------------------------------------------------------------
def apply(state: AgentContext, event_type: str, data: Mapping[str, Any]) -> AgentContext:
    """Fold one event into the state. Unknown event types leave the state unchanged, so a
    projection can feed every event of an agent's stream through here."""
    if event_type == CONTEXT_APPENDED:
        return _apply_appended(state, data)
    if event_type == CONTEXT_COMPACTED:
        return _apply_compacted(state, data)
    if event_type == AGENT_HIBERNATED:
        return _apply_hibernated(state, data)
    if event_type == AGENT_WOKEN:
        return _apply_woken(state, data)
    return state


def _refuse_parked(state: AgentContext, event_type: str) -> None:
    if state.hibernated:
        # Only the shell can bring a parked context back (it reads the stream); folding
        # anything into the stub would build a context with the history missing.
        raise ContextStateError(
            f"{event_type} for hibernated agent {state.agent_id}: restore its context from its "
            "stream first (app.domain.context.restore)")


def _apply_appended(state: AgentContext, data: Mapping[str, Any]) -> AgentContext:
    _refuse_parked(state, CONTEXT_APPENDED)
    seq = int(data["seq"])
    if seq <= state.last_seq:
        raise ValueError(f"ContextAppended seq {seq} is not after {state.last_seq}")
    message = ContextMessage(seq=seq, role=data["role"], content=data["content"],
                             pinned=bool(data.get("pinned", False)), tokens=int(data["tokens"]),
                             at=float(data["at"]))
    return replace(state, hot=state.hot + (message,), last_seq=seq,
                   growth=state.growth.record(message.at, message.tokens),
                   last_activity_at=message.at)


def _apply_compacted(state: AgentContext, data: Mapping[str, Any]) -> AgentContext:
    _refuse_parked(state, CONTEXT_COMPACTED)
    lo, hi = int(data["from_seq"]), int(data["to_seq"])
    moving = tuple(m for m in state.hot if lo <= m.seq <= hi and not m.pinned)
    staying = tuple(m for m in state.hot if not (lo <= m.seq <= hi and not m.pinned))
    roles = {m.seq: m.role for m in moving}
    segment = WarmSegment(segment_id=data["segment_id"], from_seq=lo, to_seq=hi,
                          summary=data["summary"], summary_tokens=int(data["summary_tokens"]),
                          at=float(data["at"]))
    new_facts = tuple(
        _fact({**f, "role": f.get("role") or roles.get(int(f["source_seq"]), "user")})
        for f in data.get("facts", ()))
    superseded = {s["fact_id"]: s["by"] for s in data.get("superseded", ())}
    # Superseding never deletes: the old fact stays, pointing at the one that replaced it.
    facts = tuple(replace(f, superseded_by=superseded[f.fact_id]) if f.fact_id in superseded else f
                  for f in state.facts + new_facts)
    chunks = tuple(_chunk(c) for c in data.get("chunks", ()))
    cold = replace(state.cold,
                   messages=tuple(sorted(state.cold.messages + moving, key=lambda m: m.seq)),
                   chunks=state.cold.chunks + chunks)
    return replace(state, hot=staying, warm_segments=state.warm_segments + (segment,), facts=facts,
                   cold=cold, compactions=state.compactions + 1,
                   last_activity_at=max(state.last_activity_at, float(data["at"])))


def _apply_hibernated(state: AgentContext, data: Mapping[str, Any]) -> AgentContext:
    if state.hibernated:
        return state
    rp = data["resume_point"]
    if rp["digest"] != resume_point_for(state)["digest"]:
        # The context moved on between the decision and its commit (an append won the
        # race): this hibernation describes a state that no longer exists, so it does
        # nothing. Deterministic, hence identical in every replay.
        return state
    # Every tier leaves memory; the log keeps them. The stub is a fresh object that shares
    # nothing with the state it replaces, so once the caller drops that state, its
    # messages, summaries, facts and chunks can be freed.
    resume = ResumePoint(
        last_seq=state.last_seq, compactions=state.compactions, digest=rp["digest"],
        messages=len(state.hot) + len(state.cold.messages),
        tokens=state.hot_tokens + sum(m.tokens for m in state.cold.messages))
    return AgentContext(agent_id=state.agent_id, last_seq=state.last_seq, compactions=state.compactions,
                        last_activity_at=state.last_activity_at, hibernated=True, resume_point=resume)


def _apply_woken(state: AgentContext, data: Mapping[str, Any]) -> AgentContext:
    _refuse_parked(state, AGENT_WOKEN)
    return state  # awake already (restored by the shell, or never hibernated)


def restore(parked: AgentContext, archived: AgentContext) -> AgentContext:
    """The context a wake brings back. ``archived`` is the fold of the agent's context
    stream up to the wake (ContextAppended and ContextCompacted events only: hibernating
    and waking never change the content). It must end where the resume point says and
    have the working set the hibernation recorded; then it is, exactly, the state that was
    parked. A context that is not parked is returned unchanged."""
    if not parked.hibernated:
        return parked
    rp = parked.resume_point
    if rp is None or archived.agent_id != parked.agent_id or archived.hibernated:
        raise ValueError(f"cannot restore the context of {parked.agent_id} from {archived.agent_id}'s")
    if (archived.last_seq, archived.compactions) != (rp.last_seq, rp.compactions) or \
            _working_set_digest(archived.hot, archived.warm_segments, archived.facts) != rp.digest:
        raise ValueError(
            f"the context stream of {parked.agent_id} does not match its resume point (stream ends at "
            f"seq {archived.last_seq} after {archived.compactions} compactions, the hibernation "
            f"recorded seq {rp.last_seq} after {rp.compactions}, or the working set differs)")
    return archived


# -- hibernation policy -----------------------------------------------------------------
DEFAULT_IDLE_SECONDS = 30 * 60  # an agent quiet for half an hour is parked; waking is cheap


def should_hibernate(state: AgentContext, now: float, idle_seconds: float = DEFAULT_IDLE_SECONDS) -> bool:
    return (not state.hibernated and state.last_seq > 0
            and now - state.last_activity_at >= idle_seconds)


# -- compaction policy ------------------------------------------------------------------
ADAPTIVE, FIXED, NEVER = "adaptive", "fixed", "never"


@dataclass(frozen=True)
class CompactionSettings:
    """When hot tokens pass ``high_watermark`` x budget, compact the oldest unpinned hot
    messages until hot tokens are at most ``low_watermark`` x budget.

    Why 0.55 / 0.30: the view gives key facts up to 30 % of the budget and keeps ~15 % for
    warm summaries and cold recall, so the hot tier must stay under ~55 % or its oldest
    messages would fall out of the view before being compacted (no facts, no chunks: lost).
    Going down to 30 % moves a quarter of the budget per compaction, so the summarizer
    runs once every few turns, not every turn, and the recent verbatim window stays useful.

    Adaptive: a fast grower (many tokens per minute) lowers both marks, by up to
    ``max_high_shift``/``max_low_shift`` at saturation, following g = r / (r + r_ref).
    It compacts earlier because the next few appends (which arrive before a compaction
    done off the request path lands) would otherwise overflow, and deeper so it does not
    immediately re-trigger. ``mode="never"`` disables compaction; ``"fixed"`` ignores growth.
    """

    mode: str = ADAPTIVE
    high_watermark: float = 0.55
    low_watermark: float = 0.30
    reference_tokens_per_minute: float = 2_000.0
    max_high_shift: float = 0.15
    max_low_shift: float = 0.10
    min_hot_messages: int = 2          # the latest exchange always stays verbatim
    summary_ratio: float = 0.15        # summary target = 15 % of the span's tokens ...
    summary_min_tokens: int = 48       # ... but at least this ...
    summary_max_budget_fraction: float = 0.08  # ... and at most 8 % of the budget

    def __post_init__(self) -> None:
        if self.mode not in (ADAPTIVE, FIXED, NEVER):
            raise ValueError(f"compaction mode must be adaptive, fixed or never, got {self.mode!r}")
        if not 0.0 < self.low_watermark < self.high_watermark <= 1.0:
            raise ValueError("watermarks need 0 < low < high <= 1")
        if self.low_watermark - self.max_low_shift <= 0 or \
                self.high_watermark - self.max_high_shift <= self.low_watermark - self.max_low_shift:
            raise ValueError("adaptive shifts must keep 0 < low < high")


def effective_watermarks(settings: CompactionSettings, tokens_per_minute: float) -> tuple[float, float]:
    """(high, low) fractions of the budget after adapting to the growth rate."""
    if settings.mode != ADAPTIVE or tokens_per_minute <= 0:
        return settings.high_watermark, settings.low_watermark
    g = tokens_per_minute / (tokens_per_minute + settings.reference_tokens_per_minute)
    return (settings.high_watermark - settings.max_high_shift * g,
            settings.low_watermark - settings.max_low_shift * g)


@dataclass(frozen=True)
class CompactionPlan:
    agent_id: str
    segment_id: str
    seqs: tuple[int, ...]            # hot, unpinned, oldest first, contiguous among those
    from_seq: int
    to_seq: int
    tokens_before: int               # hot tokens now
    span_tokens: int
    target_tokens: int               # the low watermark in tokens
    high_watermark: float
    low_watermark: float
    tokens_per_minute: float
    summary_target_tokens: int


def plan_compaction(state: AgentContext, budget_tokens: int, settings: CompactionSettings,
                    now: float) -> CompactionPlan | None:
    """Which hot messages to compact now, or None. Hot tokens include pinned messages,
    because they occupy the view too; pinned ones are just never chosen."""
    if settings.mode == NEVER or state.hibernated:
        return None
    rate = state.growth.tokens_per_minute(now)
    high, low = effective_watermarks(settings, rate)
    hot_tokens = state.hot_tokens
    if hot_tokens <= high * budget_tokens:
        return None
    target = int(low * budget_tokens)
    unpinned = [m for m in state.hot if not m.pinned]
    candidates = unpinned[:max(0, len(unpinned) - settings.min_hot_messages)]
    chosen: list[ContextMessage] = []
    remaining = hot_tokens
    for message in candidates:
        if remaining <= target:
            break
        chosen.append(message)
        remaining -= message.tokens
    if not chosen:
        return None
    span_tokens = sum(m.tokens for m in chosen)
    summary_target = int(min(max(settings.summary_min_tokens, settings.summary_ratio * span_tokens),
                             settings.summary_max_budget_fraction * budget_tokens))
    return CompactionPlan(
        agent_id=state.agent_id, segment_id=f"seg-{state.compactions + 1}",
        seqs=tuple(m.seq for m in chosen), from_seq=chosen[0].seq, to_seq=chosen[-1].seq,
        tokens_before=hot_tokens, span_tokens=span_tokens, target_tokens=target,
        high_watermark=high, low_watermark=low, tokens_per_minute=rate,
        summary_target_tokens=max(16, summary_target))


# -- view assembly ----------------------------------------------------------------------
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


@dataclass(frozen=True)
class ViewItem:
    tier: str        # hot | warm | cold
    kind: str        # pinned | facts | summary | message | chunk
    role: str
    content: str
    tokens: int      # count_message(role, content)
    ref: str         # seq, segment id, chunk id, or the fact ids of the facts block

    def to_dict(self) -> dict:
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

    def to_dict(self) -> dict:
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


def fact_priority(fact: KeyFact) -> tuple:
    """Ranking under a tight budget. What the user (or system) stated comes first, of any
    kind: those are the instructions and ids that "amnesia" loses. Then the rest by kind,
    then assistant before tool, then newest first. Kind before role for the rest because
    error messages come almost only from tool output and would otherwise always lose to
    the assistant's narration."""
    role_rank = _ROLE_RANK.get(fact.role, 1)
    return (0 if role_rank == 0 else 1, FACT_KIND_PRIORITY.get(fact.kind, 99), role_rank,
            -fact.source_seq, fact.fact_id)


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
    taken_words: dict[str, list[frozenset[str]]] = {}
    for fact in ranked:
        shape = fact.shape or f"{fact.kind}:{fact.text}"
        words = frozenset(fact.text.lower().split())
        similar = any(len(words & other) >= NEAR_DUPLICATE_JACCARD * len(words | other)
                      for other in taken_words.get(fact.kind, ()))
        if shape in seen_shapes or similar:
            repeats.append(fact)
        else:
            first_of_shape.append(fact)
            taken_words.setdefault(fact.kind, []).append(words)
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


def _recency(age_seconds: float, half_life: float) -> float:
    return math.pow(0.5, max(age_seconds, 0.0) / half_life) if half_life > 0 else 0.0


def assemble_view(state: AgentContext, budget_tokens: int, chunk_scores: Mapping[str, float] | None,
                  count_message: Callable[[str, str], int], now: float,
                  settings: ViewSettings = ViewSettings()) -> ContextView:
    """The context an agent gets for its next call, never over ``budget_tokens`` as counted
    by ``count_message`` (plus the 3 reply-priming tokens).

    Output order: pinned messages (chronological), the key-facts block, warm summaries
    newest first, hot messages (chronological, the most recent ones that fit), then cold
    chunks ranked by cosine score (``chunk_scores``, chunk_id -> cosine, from the query)
    blended with recency; with no scores, cold chunks rank by recency alone.

    Budget is spent in this order of priority: pinned, facts (<= facts_share), hot
    (leaving warm_reserve and, if there are chunks to recall, cold_reserve), warm, cold,
    then any leftover extends the hot window further back.

    Pinned messages alone over budget: the budget still wins (it is a hard limit of the
    model call). Pinned messages are taken oldest first while they fit, the rest are
    skipped and listed in ``omitted_pinned`` so the API can warn; the system prompt, being
    the oldest, is the last to go.
    """
    validate_budget(budget_tokens)
    if state.hibernated:
        raise ContextStateError(f"agent {state.agent_id} is hibernated; wake it before reading its context")
    remaining = budget_tokens - REPLY_PRIMING_TOKENS

    pinned_items: list[ViewItem] = []
    omitted: list[int] = []
    for m in state.hot:
        if not m.pinned:
            continue
        cost = count_message(m.role, m.content)
        if cost <= remaining:
            pinned_items.append(ViewItem(HOT, "pinned", m.role, m.content, cost, str(m.seq)))
            remaining -= cost
        else:
            omitted.append(m.seq)

    fact_items: list[ViewItem] = []
    chosen_facts, facts_cost = _select_facts(
        state.live_facts, min(remaining, int(settings.facts_share * budget_tokens)), count_message)
    if chosen_facts:
        ordered_ids = ",".join(f.fact_id for f in sorted(chosen_facts, key=lambda f: (f.source_seq, f.fact_id)))
        fact_items.append(ViewItem(WARM, "facts", "system", _facts_block(chosen_facts), facts_cost, ordered_ids))
        remaining -= facts_cost

    segment_costs = [(s, count_message("system", _summary_content(s))) for s in reversed(state.warm_segments)]
    has_cold = bool(state.cold.chunks)
    reserve = 0
    if segment_costs:
        reserve += min(int(settings.warm_reserve * budget_tokens), segment_costs[0][1])
    if has_cold:
        reserve += int(settings.cold_reserve * budget_tokens)

    recent = [m for m in state.hot if not m.pinned]
    hot_picked: list[ViewItem] = []
    index = len(recent) - 1

    def take_hot(limit: int) -> None:
        nonlocal index, remaining
        while index >= 0:
            m = recent[index]
            cost = count_message(m.role, m.content)
            if cost > remaining or cost > limit:
                return  # contiguous: the window stops at the first message that does not fit
            hot_picked.append(ViewItem(HOT, "message", m.role, m.content, cost, str(m.seq)))
            remaining -= cost
            limit -= cost
            index -= 1

    take_hot(max(0, remaining - reserve))

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

    items = tuple(pinned_items + fact_items + warm_items + hot_picked + cold_items)
    total = REPLY_PRIMING_TOKENS + sum(i.tokens for i in items) if items else 0
    return ContextView(agent_id=state.agent_id, budget_tokens=budget_tokens, tokens=total,
                       items=items, omitted_pinned=tuple(omitted))


def _summary_content(segment: WarmSegment) -> str:
    return f"Summary of messages {segment.from_seq}-{segment.to_seq}: {segment.summary}"


def _chunk_content(chunk: ColdChunk) -> str:
    return f"Archived messages {chunk.from_seq}-{chunk.to_seq}:\n{chunk.text}"


# -- stats ------------------------------------------------------------------------------
def context_stats(state: AgentContext) -> dict:
    """ContextStats of the public contract. A hibernated agent reports 0 hot and warm
    tokens: nothing of its context is in memory; every message is counted under cold (its
    archive is the log)."""
    rp = state.resume_point if state.hibernated else None
    return {
        "agent_id": state.agent_id,
        "hot_tokens": state.hot_tokens,
        "warm_tokens": sum(s.summary_tokens for s in state.warm_segments)
        + sum(f.tokens for f in state.live_facts),
        "cold_tokens": rp.tokens if rp else sum(m.tokens for m in state.cold.messages),
        "messages": rp.messages if rp else len(state.hot) + len(state.cold.messages),
        "hibernated": state.hibernated,
    }

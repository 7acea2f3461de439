"""The compaction shell: turns a CompactionPlan into ContextCompacted event data.

It runs the impure parts (the summarizer may call a model or an LLM) and returns a plain
dict; recording it as an event and folding it with ``app.domain.context.apply`` is the
caller's job, so replay never calls the summarizer again.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from app.context.facts import extract_facts, fact_shape, normalize
from app.context.summarize import Summarizer
from app.domain.context import AgentContext, CompactionPlan, ContextMessage, KeyFact

TokenCounter = Callable[[str], int]

# The CPU time one compaction may spend on key-fact extraction. A normal span takes a few
# milliseconds to a few tens; a message at the API's 100k-character limit about half a
# second to one. The background process runs every agent's compactions one at a time, so
# one agent's span of such messages must not hold it for minutes: past the budget, the
# rest of the span is moved unscanned (see ``compact``).
FACT_EXTRACTION_BUDGET_S = 2.0

# ~200 tokens: small enough that a recalled chunk spends little budget on text around the
# needle, large enough to keep a question and its answer (usually adjacent messages)
# together and to give MiniLM (trained on short paragraphs; it truncates at 256 word
# pieces) a coherent passage to embed.
CHUNK_TARGET_TOKENS = 200


def render_message(message: ContextMessage) -> str:
    return f"[{message.seq}] {message.role}: {message.content}"


def _split_long(text: str, count: TokenCounter, target: int) -> list[str]:
    """Split an oversized message on line, then word, boundaries into <= target pieces."""
    pieces: list[str] = []
    current: list[str] = []
    current_tokens = 0
    words = [w for line in text.split("\n") for w in (line.split(" ") + ["\n"])]
    for word in words:
        cost = 1 if word == "\n" else count(" " + word)  # as the word is tokenized mid-text
        if current and current_tokens + cost > target:
            pieces.append(" ".join(current).replace(" \n ", "\n").strip())
            current, current_tokens = [], 0
        current.append(word)
        current_tokens += cost
    if current:
        pieces.append(" ".join(current).replace(" \n ", "\n").strip())
    return [p for p in pieces if p]


def chunk_messages(messages: Sequence[ContextMessage], count: TokenCounter, segment_id: str,
                   target: int = CHUNK_TARGET_TOKENS) -> list[dict]:
    """Cold-tier chunks of ~target tokens, cut on message boundaries where possible.
    A message over 1.5 x target is split on its own (its pieces share its seq)."""
    chunks: list[dict] = []
    group: list[ContextMessage] = []

    def emit(text: str, from_seq: int, to_seq: int) -> None:
        chunks.append({"chunk_id": f"{segment_id}-c{len(chunks) + 1}", "from_seq": from_seq,
                       "to_seq": to_seq, "text": text, "tokens": count(text)})

    def flush() -> None:
        nonlocal group
        if group:
            emit("\n".join(render_message(m) for m in group), group[0].seq, group[-1].seq)
        group = []

    for message in messages:
        rendered = render_message(message)
        tokens = count(rendered)
        if tokens > target * 3 // 2:
            flush()
            for piece in _split_long(rendered, count, target):
                emit(piece, message.seq, message.seq)
            continue
        # Exact count of the joined text (BPE is not additive across the separator).
        if group and count("\n".join([render_message(m) for m in group] + [rendered])) > target:
            flush()
        group.append(message)
    flush()
    return chunks


def _use_for_alias(key: str) -> str:
    """"Use 8080 for the admin API" and "the admin API moved to 9090" assign one subject."""
    return key[len("use for "):] if key.startswith("use for ") else "use for " + key


def _corrected(live_by_key: dict[str, KeyFact], fact) -> KeyFact | None:
    """The live fact a correction such as "make it 60 seconds instead of 30" replaces: the
    newest one whose value holds the old value ("30") as a word. The correction names no
    subject, so it takes that fact's key."""
    if not fact.replaces:
        return None
    old = re.compile(r"(?<![\w.])" + re.escape(fact.replaces.split()[0]) + r"(?![\w.])")
    found = [f for f in live_by_key.values() if old.search(f.value or normalize(f.text))]
    return max(found, key=lambda f: (f.source_seq, f.fact_id)) if found else None


def facts_of_span(live_facts: Sequence[KeyFact], span: Sequence[ContextMessage], count: TokenCounter
                  ) -> tuple[list[dict], list[dict]]:
    """The key-fact records of a span and the supersessions they cause, as event data.

    A fact whose key is already live with the same value is a restatement and adds
    nothing; with another value it supersedes the live fact (both are kept)."""
    facts, superseded, _not_scanned = scan_span(live_facts, span, count)
    return facts, superseded


def scan_span(live_facts: Sequence[KeyFact], span: Sequence[ContextMessage], count: TokenCounter,
              out_of_time: Callable[[], bool] | None = None) -> tuple[list[dict], list[dict], int]:
    """``facts_of_span``, and how many of the span's messages were not scanned: once
    ``out_of_time()`` says so (asked before each message but the first), the rest of the
    span is left unscanned."""
    live_by_key = {f.key: f for f in live_facts}
    facts: list[dict] = []
    superseded: list[dict] = []
    for position, message in enumerate(span):
        if position and out_of_time is not None and out_of_time():
            return facts, superseded, len(span) - position
        for index, fact in enumerate(extract_facts(message.content, message.seq, message.role)):
            previous = (live_by_key.get(fact.key) or live_by_key.get(_use_for_alias(fact.key))
                        or _corrected(live_by_key, fact))
            if previous is not None and (previous.value or normalize(previous.text)) == fact.value:
                continue  # restating a live fact is not news
            record: dict[str, Any] = {"fact_id": f"f{message.seq}.{index}", "kind": fact.kind, "text": fact.text,
                      "key": previous.key if previous is not None else fact.key, "value": fact.value,
                      "source_seq": fact.source_seq,
                      "role": message.role, "tokens": count(fact.text),
                      "shape": fact_shape(fact.kind, fact.text)}
            if previous is not None:
                superseded.append({"fact_id": previous.fact_id, "by": record["fact_id"]})
            facts.append(record)
            live_by_key[record["key"]] = KeyFact(**{k: record[k] for k in (
                "fact_id", "kind", "text", "key", "source_seq", "tokens", "role", "value")})
    return facts, superseded, 0


def extraction_deadline(budget_seconds: float) -> Callable[[], bool]:
    """Whether ``budget_seconds`` of this thread's CPU time have passed since the call.
    CPU time, not wall time: it counts the extraction's own work, so a normal span is never
    cut short because the (low-priority) background process waited for a core."""
    started = time.thread_time()
    return lambda: time.thread_time() - started >= budget_seconds


def compact(state: AgentContext, plan: CompactionPlan, summarizer: Summarizer,
            count: TokenCounter, now: float, *, extraction_budget_s: float | None = None) -> dict:
    """ContextCompacted data for ``plan``. ``count`` is a text token counter (count_text).

    tokens_before / tokens_after measure the agent's resident context, hot messages plus
    warm summaries plus live facts, so the event shows what the compaction saved net of
    what it added.

    With ``extraction_budget_s``, key facts are extracted from the span's messages until
    that much CPU time is spent; the rest are moved all the same (verbatim to the cold
    tier, chunked and searchable like the others) and the event counts them in
    ``messages_not_scanned``. The event records the facts, so replay never extracts again
    and stays exact whatever the budget cut."""
    chosen = set(plan.seqs)
    span = [m for m in state.hot if m.seq in chosen]
    if not span:
        raise ValueError("compaction plan names no hot message")

    out_of_time = extraction_deadline(extraction_budget_s) if extraction_budget_s is not None else None
    # Messages whose facts were recorded at append time are not scanned again: their facts
    # are live already, and a second scan would supersede them with copies of themselves.
    unrecorded = state.facts_unrecorded()
    to_scan = [m for m in span if unrecorded(m.seq)]
    facts, superseded, not_scanned = scan_span(state.live_facts, to_scan, count, out_of_time)

    summary = summarizer.summarize([(m.role, m.content) for m in span], plan.summary_target_tokens, count)
    summary_tokens = count(summary.text)
    chunks = chunk_messages(span, count, plan.segment_id)

    superseded_ids = {s["fact_id"] for s in superseded}
    warm_before = sum(s.summary_tokens for s in state.warm_segments) + sum(f.tokens for f in state.live_facts)
    warm_after = (warm_before + summary_tokens
                  + sum(f["tokens"] for f in facts if f["fact_id"] not in superseded_ids)
                  - sum(f.tokens for f in state.live_facts if f.fact_id in superseded_ids))
    hot_after = state.hot_tokens - sum(m.tokens for m in span)
    return {
        "agent_id": state.agent_id,
        "segment_id": plan.segment_id,
        "from_seq": plan.from_seq,
        "to_seq": plan.to_seq,
        "summary": summary.text,
        "summary_tokens": summary_tokens,
        "facts": facts,
        "superseded": superseded,
        "chunks": chunks,
        "tokens_before": state.hot_tokens + warm_before,
        "tokens_after": hot_after + warm_after,
        "hot_tokens_before": state.hot_tokens,
        "hot_tokens_after": hot_after,
        "facts_kept": len(facts) - len(superseded_ids & {f["fact_id"] for f in facts}),
        "summarizer": summary.summarizer,
        "cost": dict(summary.cost),
        "at": now,
        # only when some were left: an event of a whole scan stays as it always was
        **({"messages_not_scanned": not_scanned} if not_scanned else {}),
        "scanned_seqs": [m.seq for m in to_scan[:len(to_scan) - not_scanned]],
    }

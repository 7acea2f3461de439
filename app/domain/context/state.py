"""The state of one agent's context (its three tiers) and its canonical serialisation.

Equal states serialise to equal bytes (``canonical_json``), so ``state_hash`` can compare
a projection rebuilt from the log with the live one, and a snapshot reloads exactly.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

HOT, WARM, COLD = "hot", "warm", "cold"

# Key-fact kinds, most important first. The order decides which facts survive a tight
# budget: rules and decisions are what "amnesia" after compaction loses most painfully;
# named entities are the weakest heuristic, so they go first. (app.context.facts uses it.)
FACT_KIND_PRIORITY = {"instruction": 0, "decision": 1, "error": 2, "todo": 3, "identifier": 4,
                      "path": 5, "url": 6, "quantity": 7, "entity": 8}


class ContextStateError(ValueError):
    """An operation that the agent's current state does not allow (e.g. view while hibernated)."""


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

    def record(self, at: float, tokens: int) -> GrowthStats:
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
    # Unpinned messages appended for extraction at append time whose key facts are not
    # recorded yet (by a ContextFactsExtracted, or a ContextCompacted that scanned them),
    # ascending: "pending extraction". A view that leaves one of them out shows the message
    # itself instead of its facts.
    unextracted: tuple[int, ...] = ()
    fact_events: int = 0   # ContextFactsExtracted events folded: part of the stream's version
    # The first seq appended for extraction at append time (0: none yet). Older messages
    # (a log from before append-time extraction) get their facts from compactions only.
    facts_from: int = 0

    def tier_of(self, seq: int) -> str | None:
        """hot or cold for a message seq (warm holds summaries, not messages)."""
        if any(m.seq == seq for m in self.hot):
            return HOT
        if any(m.seq == seq for m in self.cold.messages):
            return COLD
        return None

    def facts_unrecorded(self) -> Callable[[int], bool]:
        """Whether the key facts of message ``seq`` are still to be recorded: it is pending
        extraction, or it was appended before append-time extraction (below ``facts_from``:
        its compaction finds them)."""
        pending, start = frozenset(self.unextracted), self.facts_from
        return lambda seq: seq in pending or not start or seq < start

    @property
    def hot_tokens(self) -> int:
        return sum(m.tokens for m in self.hot)

    @property
    def live_facts(self) -> tuple[KeyFact, ...]:
        return tuple(f for f in self.facts if f.superseded_by is None)


def new_context(agent_id: str) -> AgentContext:
    return AgentContext(agent_id=agent_id)


# -- serialisation ---------------------------------------------------------------------
def state_to_dict(state: AgentContext) -> dict[str, Any]:
    """Plain JSON-able dict (tuples become lists). Field order is fixed by the dataclasses
    and keys are sorted on dump, so equal states have equal bytes. The read model's save
    encodes the dataclasses themselves to the same text (app/projections/doc_text.py), from
    each instance's attributes: these classes hold their fields and nothing else (no
    cached_property, no attribute set beside the fields)."""
    return asdict(state)


def message_from_dict(d: Mapping[str, Any]) -> ContextMessage:
    return ContextMessage(seq=int(d["seq"]), role=d["role"], content=d["content"],
                          pinned=bool(d["pinned"]), tokens=int(d["tokens"]), at=float(d["at"]))


def segment_from_dict(d: Mapping[str, Any]) -> WarmSegment:
    return WarmSegment(segment_id=d["segment_id"], from_seq=int(d["from_seq"]), to_seq=int(d["to_seq"]),
                       summary=d["summary"], summary_tokens=int(d["summary_tokens"]), at=float(d["at"]))


def fact_from_dict(d: Mapping[str, Any]) -> KeyFact:
    return KeyFact(fact_id=d["fact_id"], kind=d["kind"], text=d["text"], key=d["key"],
                   source_seq=int(d["source_seq"]), superseded_by=d.get("superseded_by"),
                   tokens=int(d.get("tokens", 0)), role=d.get("role", "user"),
                   value=d.get("value", ""), shape=d.get("shape", ""))


def chunk_from_dict(d: Mapping[str, Any]) -> ColdChunk:
    return ColdChunk(chunk_id=d["chunk_id"], from_seq=int(d["from_seq"]), to_seq=int(d["to_seq"]),
                     text=d["text"], tokens=int(d["tokens"]))


def state_from_dict(d: Mapping[str, Any]) -> AgentContext:
    cold = d.get("cold") or {}
    rp = d.get("resume_point")
    return AgentContext(
        agent_id=d["agent_id"],
        hot=tuple(message_from_dict(m) for m in d.get("hot", ())),
        warm_segments=tuple(segment_from_dict(s) for s in d.get("warm_segments", ())),
        facts=tuple(fact_from_dict(f) for f in d.get("facts", ())),
        cold=ColdArchive(
            messages=tuple(message_from_dict(m) for m in cold.get("messages", ())),
            chunks=tuple(chunk_from_dict(c) for c in cold.get("chunks", ()))),
        growth=GrowthStats(window=tuple((float(a), int(t)) for a, t in (d.get("growth") or {}).get("window", ()))),
        last_seq=int(d.get("last_seq", 0)),
        compactions=int(d.get("compactions", 0)),
        last_activity_at=float(d.get("last_activity_at", 0.0)),
        hibernated=bool(d.get("hibernated", False)),
        resume_point=None if rp is None else ResumePoint(
            last_seq=int(rp["last_seq"]), compactions=int(rp["compactions"]), digest=rp["digest"],
            messages=int(rp["messages"]), tokens=int(rp["tokens"])),
        unextracted=tuple(int(s) for s in d.get("unextracted", ())),
        fact_events=int(d.get("fact_events", 0)),
        facts_from=int(d.get("facts_from", 0)),
    )


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def state_hash(state: AgentContext) -> str:
    """SHA-256 of the canonical serialisation: what replayCheck compares."""
    return hashlib.sha256(canonical_json(state_to_dict(state)).encode("utf-8")).hexdigest()


def working_set_digest(hot: Iterable[ContextMessage], segments: Iterable[WarmSegment],
                        facts: Iterable[KeyFact]) -> str:
    payload = {"hot": [asdict(m) for m in hot], "segments": [asdict(s) for s in segments],
               "facts": [asdict(f) for f in facts]}
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def resume_point_for(state: AgentContext) -> dict[str, Any]:
    """The ``resume_point`` an AgentHibernated event should carry for this state. Its
    digest ties the event to the exact context it parks; the seq lists are for readers of
    the log (what was hot, what was warm), the fold does not need them."""
    return {
        "last_seq": state.last_seq,
        "hot_seqs": [m.seq for m in state.hot],
        "segment_ids": [s.segment_id for s in state.warm_segments],
        "fact_ids": [f.fact_id for f in state.facts],
        "digest": working_set_digest(state.hot, state.warm_segments, state.facts),
    }

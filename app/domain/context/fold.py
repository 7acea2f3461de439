"""The fold of an agent's context stream: one event at a time into AgentContext, and the
check that brings a parked context back (``restore``).

ContextAppended adds to the hot tier (its message pending extraction, unless pinned or
appended before append-time extraction), ContextFactsExtracted records the key facts of
appended messages, ContextCompacted moves a span to warm and cold (with the facts of its
messages not recorded yet), AgentHibernated leaves only a resume point in memory; the log
keeps every tier.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.domain.events import (
    AGENT_HIBERNATED,
    AGENT_WOKEN,
    CONTEXT_APPENDED,
    CONTEXT_COMPACTED,
    CONTEXT_FACTS_EXTRACTED,
    AgentHibernated,
    ContextAppended,
    ContextCompacted,
    ContextFactsExtracted,
    parse,
)

from .state import (
    AgentContext,
    ContextMessage,
    ContextStateError,
    KeyFact,
    ResumePoint,
    WarmSegment,
    chunk_from_dict,
    fact_from_dict,
    resume_point_for,
    working_set_digest,
)

_FOLDED = frozenset({CONTEXT_APPENDED, CONTEXT_COMPACTED, CONTEXT_FACTS_EXTRACTED, AGENT_HIBERNATED, AGENT_WOKEN})


def apply(state: AgentContext, event_type: str, data: Mapping[str, Any]) -> AgentContext:
    """Fold one event into the state. Unknown event types leave the state unchanged, so a
    projection can feed every event of an agent's stream through here. The logged data is
    read through its typed event (app.domain.events), so a missing field is an EventError
    naming it, not a KeyError deep in the fold."""
    if event_type not in _FOLDED:
        return state
    event = parse(event_type, dict(data))
    if isinstance(event, ContextAppended):
        return _apply_appended(state, event)
    if isinstance(event, ContextCompacted):
        return _apply_compacted(state, event)
    if isinstance(event, ContextFactsExtracted):
        return _apply_facts_extracted(state, event)
    if isinstance(event, AgentHibernated):
        return _apply_hibernated(state, event)
    return _apply_woken(state)


def _refuse_parked(state: AgentContext, event_type: str) -> None:
    if state.hibernated:
        # Only the shell can bring a parked context back (it reads the stream); folding
        # anything into the stub would build a context with the history missing.
        raise ContextStateError(
            f"{event_type} for hibernated agent {state.agent_id}: restore its context from its "
            "stream first (app.domain.context.restore)")


def _apply_appended(state: AgentContext, e: ContextAppended) -> AgentContext:
    _refuse_parked(state, CONTEXT_APPENDED)
    seq = int(e.seq)
    if seq <= state.last_seq:
        raise ValueError(f"ContextAppended seq {seq} is not after {state.last_seq}")
    message = ContextMessage(seq=seq, role=e.role, content=e.content, pinned=bool(e.pinned),
                             tokens=int(e.tokens), at=float(e.at))
    if not e.facts_at_append:
        return replace(state, hot=state.hot + (message,), last_seq=seq,
                       growth=state.growth.record(message.at, message.tokens), last_activity_at=message.at)
    # A pinned message is in every view whole: it needs no facts, so it is never pending.
    pending = state.unextracted if message.pinned else state.unextracted + (seq,)
    return replace(state, hot=state.hot + (message,), last_seq=seq,
                   growth=state.growth.record(message.at, message.tokens),
                   last_activity_at=message.at, unextracted=pending, facts_from=state.facts_from or seq)


def _with_facts(state: AgentContext, records: Sequence[Mapping[str, Any]], superseded: Sequence[Mapping[str, Any]],
                scanned: Sequence[int], roles: Mapping[int, str], *, by_compaction: bool
                ) -> tuple[tuple[KeyFact, ...], tuple[int, ...]]:
    """The facts after adding ``records`` (the facts of messages ``scanned``) and marking
    ``superseded``, and the messages still pending extraction.

    The first record of a message's facts wins: the facts (and the supersessions they
    cause) of a scanned message whose facts are recorded already are dropped. This is how
    a compaction planned while a message's append-time extraction was in flight, and an
    extraction that lost the race to a compaction, neither duplicate facts nor supersede
    with a second copy. A message appended before append-time extraction (below
    ``facts_from``) has its facts recorded by its compaction alone."""
    pending = frozenset(state.unextracted)
    news_of = state.facts_unrecorded() if by_compaction else pending.__contains__
    news = frozenset(s for s in (int(x) for x in scanned) if news_of(s))
    kept = tuple(
        fact_from_dict({**f, "role": f.get("role") or roles.get(int(f["source_seq"]), "user")})
        for f in records if int(f["source_seq"]) in news)
    kept_ids = {f.fact_id for f in kept}
    replaced = {s["fact_id"]: s["by"] for s in superseded if s["by"] in kept_ids}
    # Superseding never deletes: the old fact stays, pointing at the one that replaced it.
    facts = tuple(replace(f, superseded_by=replaced[f.fact_id]) if f.fact_id in replaced else f
                  for f in state.facts + kept)
    return facts, tuple(s for s in state.unextracted if s not in news)


def _apply_facts_extracted(state: AgentContext, e: ContextFactsExtracted) -> AgentContext:
    _refuse_parked(state, CONTEXT_FACTS_EXTRACTED)
    facts, pending = _with_facts(state, e.facts, e.superseded, e.seqs, {}, by_compaction=False)
    return replace(state, facts=facts, unextracted=pending, fact_events=state.fact_events + 1,
                   last_activity_at=max(state.last_activity_at, float(e.at)))


def _scanned_by(e: ContextCompacted, moving: Sequence[ContextMessage]) -> Sequence[int]:
    """The messages a compaction looked for key facts in (see ContextCompacted.scanned_seqs)."""
    if e.scanned_seqs is not None:
        return e.scanned_seqs
    return [m.seq for m in moving[:len(moving) - int(e.messages_not_scanned or 0)]]


def _apply_compacted(state: AgentContext, e: ContextCompacted) -> AgentContext:
    _refuse_parked(state, CONTEXT_COMPACTED)
    lo, hi = int(e.from_seq), int(e.to_seq)
    moving = tuple(m for m in state.hot if lo <= m.seq <= hi and not m.pinned)
    staying = tuple(m for m in state.hot if not (lo <= m.seq <= hi and not m.pinned))
    roles = {m.seq: m.role for m in moving}
    segment = WarmSegment(segment_id=e.segment_id, from_seq=lo, to_seq=hi, summary=e.summary,
                          summary_tokens=int(e.summary_tokens), at=float(e.at))
    facts, pending = _with_facts(state, e.facts or (), e.superseded or (), _scanned_by(e, moving), roles,
                                 by_compaction=True)
    chunks = tuple(chunk_from_dict(c) for c in e.chunks or ())
    cold = replace(state.cold,
                   messages=tuple(sorted(state.cold.messages + moving, key=lambda m: m.seq)),
                   chunks=state.cold.chunks + chunks)
    return replace(state, hot=staying, warm_segments=state.warm_segments + (segment,), facts=facts,
                   cold=cold, compactions=state.compactions + 1, unextracted=pending,
                   last_activity_at=max(state.last_activity_at, float(e.at)))


def _apply_hibernated(state: AgentContext, e: AgentHibernated) -> AgentContext:
    if state.hibernated:
        return state
    rp = e.resume_point
    if rp is None:
        raise ContextStateError(f"AgentHibernated for {state.agent_id} carries no resume_point")
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
                        last_activity_at=state.last_activity_at, hibernated=True, resume_point=resume,
                        fact_events=state.fact_events, facts_from=state.facts_from)


def _apply_woken(state: AgentContext) -> AgentContext:
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
            working_set_digest(archived.hot, archived.warm_segments, archived.facts) != rp.digest:
        raise ValueError(
            f"the context stream of {parked.agent_id} does not match its resume point (stream ends at "
            f"seq {archived.last_seq} after {archived.compactions} compactions, the hibernation "
            f"recorded seq {rp.last_seq} after {rp.compactions}, or the working set differs)")
    return archived

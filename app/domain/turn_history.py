"""One turn's history: the pure fold of the events about one turn into one record.

A turn's story is spread over two streams: its inputs (turn-<id>: requested, heartbeats,
the completion report) and its pool's decisions (queued, granted, lease extended, and how
it ended). Every reader that needs "when was it granted, on which lane, how did it end"
folds them here: the turns projection, the turn story (explain), the what-if's recorded
workload and the live check's metrics. Each reader picks which of the events it reads
(the projection folds no heartbeats, the live check reads no requests), not what they mean.

A history starts at the turn's first event that a reader has: its TurnRequested, or its
TurnQueued for a reader of the decisions alone (`start`). `fold` then takes the turn's
later events in log order; a scheduler writes each of a turn's transitions once (the
audit's verify checks it), and a later transition overwrites an earlier one.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from . import events as ev

_STATUS: dict[type[ev.Event], str] = {
    ev.TurnQueued: ev.QUEUED, ev.TurnGranted: ev.GRANTED, ev.TurnCompleted: ev.COMPLETED,
    ev.TurnCancelled: ev.CANCELLED, ev.TurnReaped: ev.REAPED}
_ENDS = (ev.TurnCompleted, ev.TurnCancelled, ev.TurnReaped)
# The decisions that change a turn's record (its heartbeats and completion report do not:
# the record shows what the scheduler decided).
RECORD_CHANGES = (ev.TurnQueued, ev.TurnGranted, ev.LeaseExtended, *_ENDS)

# What a reap says in the turn's record, by why its lease ended.
REAPED_NO_FIRST_CHUNK = "no first chunk by the start deadline"
REAPED_LEASE_EXPIRED = "lease expired"


@dataclass
class TurnHistory:
    turn_id: str
    agent_id: str
    pool: str | None = None
    requested_at: float | None = None       # the client's time (TurnRequested.at)
    estimated_tokens: int | None = None
    max_output_tokens: int | None = None
    streams: bool = False
    run_id: str | None = None               # the client's run, when the request named one
    holder: str | None = None               # "gateway" when the gateway holds the call
    model: str | None = None                # the model the call named, when it did
    priority_class: str | None = None       # the agent's class when the turn was queued
    status: str = ev.QUEUED
    level: int | None = None
    lane: int | None = None
    queued_at: float | None = None
    granted_at: float | None = None
    lease_expires_at: float | None = None   # while granted
    reserved_tokens: int | None = None
    last_life_at: float | None = None       # the grant or the last lease extension
    finished_at: float | None = None
    outcome: str | None = None
    reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    version: int | None = None              # position of the last event that changed the record
    # Inputs after the request, with their log positions (None when a reader has none).
    heartbeats: list[tuple[int | None, ev.HeartbeatSent]] = field(default_factory=list)
    report: ev.CompletionReported | None = None      # the first completion report
    report_position: int | None = None

    @property
    def finished(self) -> bool:
        return self.status in ev.FINISHED

    @property
    def end(self) -> str | None:
        """How it ended: the completion's outcome, REAPED or CANCELLED; None while open."""
        if self.status == ev.COMPLETED:
            return self.outcome
        return self.status if self.finished else None


def start(event: ev.Event, position: int | None = None) -> TurnHistory | None:
    """A new history from a turn's first event: its request, or (for a reader of decisions
    alone) its TurnQueued; None for any other event."""
    if isinstance(event, ev.TurnRequested):
        return TurnHistory(event.turn_id, event.agent_id, pool=event.pool, requested_at=event.at,
                           estimated_tokens=event.estimated_tokens,
                           max_output_tokens=event.max_output_tokens, streams=bool(event.streams),
                           run_id=event.run_id, holder=event.holder, model=event.model, version=position)
    if isinstance(event, ev.TurnQueued):
        history = TurnHistory(event.turn_id, event.agent_id, requested_at=event.requested_at,
                              estimated_tokens=event.estimated_tokens,
                              max_output_tokens=event.max_output_tokens, streams=bool(event.streams),
                              run_id=event.run_id, holder=event.holder, model=event.model)
        return fold(history, event, position)
    return None


def fold(h: TurnHistory, event: ev.Event, position: int | None = None) -> TurnHistory:
    """`h` advanced by one of its turn's later events (in place; returned for chaining).
    Events that say nothing about the turn leave it as it was."""
    if isinstance(event, ev.HeartbeatSent):
        h.heartbeats.append((position, event))
        return h
    if isinstance(event, ev.CompletionReported):
        if h.report is None:
            h.report, h.report_position = event, position
        return h
    if isinstance(event, ev.LeaseExtended):
        h.lease_expires_at = event.lease_expires_at
        h.last_life_at = event.at
        h.version = position
        return h
    status = _STATUS.get(type(event))
    if status is None:
        return h
    h.status = status
    h.version = position
    if isinstance(event, ev.TurnQueued):
        h.level, h.queued_at, h.priority_class = event.level, event.at, event.priority_class
    elif isinstance(event, ev.TurnGranted):
        h.lane, h.level, h.granted_at = event.lane, event.level, event.at
        h.lease_expires_at, h.reserved_tokens = event.lease_expires_at, event.reserved_tokens
        h.last_life_at = event.at
    else:
        # the rest of _STATUS's types: the three ends
        event = cast("ev.TurnCompleted | ev.TurnCancelled | ev.TurnReaped", event)
        h.finished_at, h.lease_expires_at = event.at, None
        if isinstance(event, ev.TurnCompleted):
            h.outcome, h.prompt_tokens, h.completion_tokens = (event.outcome, event.prompt_tokens,
                                                                event.completion_tokens)
        elif isinstance(event, ev.TurnCancelled):
            h.reason = event.reason
        else:
            h.reason = REAPED_NO_FIRST_CHUNK if event.no_first_chunk else REAPED_LEASE_EXPIRED
    return h


def histories(events: Iterable[tuple[int, ev.Event]], *,
              start_at: tuple[type[ev.Event], ...] = (ev.TurnRequested,)) -> dict[str, TurnHistory]:
    """Every turn's history from `(position, event)` pairs in log order. A turn's history
    starts at its first event of a type in `start_at`; events of turns not started yet are
    skipped."""
    out: dict[str, TurnHistory] = {}
    for position, event in events:
        turn_id = getattr(event, "turn_id", None)
        if turn_id is None:
            continue
        h = out.get(turn_id)
        if isinstance(event, start_at):
            # start_at names first events (a request, a TurnQueued): start() gives a history
            out[turn_id] = cast(TurnHistory, start(event, position))
        elif h is not None:
            fold(h, event, position)
    return out

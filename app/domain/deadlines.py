"""Failure deadlines of a granted call, beyond the plain lease: the stall deadline of a
stream that has started, and outage detection.

Each hang kind is told apart by what the client has seen, so each is caught by its own
timer and none of them needs the whole lease:
- no first chunk: the start deadline (StartEstimator in state.py, RFC 6298-style over the
  pool's first-chunk times);
- a stream that started and stopped: the stall deadline. A streaming client heartbeats
  with its chunks (at least every stall_timeout/3 s while they flow), so after the first
  chunk each heartbeat extends the lease by stall_timeout only. A live stream sends
  chunks every few tens of milliseconds; one that is silent for stall_timeout has stalled.
- the provider answering nobody: outage detection. When `outage_after_silent_reaps`
  start-deadline reaps follow each other with no first chunk anywhere in the pool in
  between, the provider is taken to be down (ProviderOutageSuspected). Until a first
  chunk shows it is back, the pool grants one probe at a time (a circuit breaker's half-open
  state) instead of one call per free lane, each of which would hang, be reaped and be
  asked for again: an outage then costs one lane, not all of them. A probe's start
  deadline is doubled per probe that failed (Karn again), at most `probe_backoff_cap` times
  (default 2), so a provider that is only slow is still found, and recovery is seen within
  4 deadlines.
  The outage ends (ProviderRecovered) when a turn granted during it shows its first chunk.
  A first chunk of a call sent before the outage proves nothing about new calls, and does
  not end it.
"""
from __future__ import annotations

from . import events as ev
from .settings import PoolSettings
from .state import PoolState, TurnState


def lease_after_heartbeat(settings: PoolSettings, turn: TurnState) -> tuple[float, bool]:
    """(seconds the lease is extended by, whether that is the stall deadline)."""
    stall = settings.stall_timeout_seconds
    if turn.streams and stall is not None and stall < settings.lease_seconds:
        return stall, True
    return settings.lease_seconds, False


def outage_suspected(state: PoolState) -> bool:
    """Whether the pool's recent reaps say the provider has stopped answering."""
    n = state.settings.outage_after_silent_reaps
    return n > 0 and state.outage_since is None and state.silent_reaps >= n


def probe_in_flight(state: PoolState) -> bool:
    """A turn granted during the outage is still waiting for its first chunk."""
    since = state.outage_since
    return since is not None and any(
        t.status == ev.GRANTED and not t.progressed and t.granted_at is not None and t.granted_at >= since
        for t in state.turns.values())


def grants_allowed(state: PoolState) -> int:
    """How many more turns the pool may grant now, by lanes in use and outage."""
    busy = state.busy_lanes()
    room = state.lanes_in_use() - busy
    if state.outage_since is not None:
        room = min(room, 0 if probe_in_flight(state) else 1)
    return max(0, room)


def probe_backoff(state: PoolState) -> int:
    return min(state.failed_probes, state.settings.probe_backoff_cap) if state.outage_since is not None else 0


def ends_outage(state: PoolState, turn: TurnState) -> bool:
    """A first chunk of this turn shows the provider answers new calls again."""
    return (state.outage_since is not None and turn.granted_at is not None
            and turn.granted_at >= state.outage_since)

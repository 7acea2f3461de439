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

Held calls (TurnRequested.holder = "gateway") follow other rules, because their holder is
known to be alive: the gateway renews the lease itself (keepalive heartbeats) while its
upstream request is open and its client connected, so a lease expiry there means the
holder is gone, and nothing else. A slow call is not a dead one:
- the lease is the plain lease from the grant; no start or stall deadline cuts the call.
  The gateway enforces the call's own wall-clock limit and the silence allowed between a
  stream's chunks (PoolSettings.request_timeout_seconds, stream_idle_timeout_seconds), as
  an SDK's own timeouts would.
- a learned deadline is a suspicion, not a verdict: when a held call has shown no first
  chunk (streaming) or no answer (not streaming) by its model's deadline (the same
  RFC 6298-style estimate, learned per model: one pool may serve a fast chat model and a
  slow reasoning model), it becomes a suspect (TurnSuspected). Its lane is freed so the
  pool keeps moving, while the call itself stays open and is billed once when it ends.
  Suspects off their lanes are at most as many as the lanes in use, which bounds the calls
  open at the provider at twice the lanes; past that a suspect keeps its lane.
- a stream that began and then went silent is a suspect too (a stall): each keepalive of a
  begun stream says how long ago its last chunk came (HeartbeatSent.idle_s, the holder's
  view, recorded so replay decides the same), and once that reaches the pool's
  stall_timeout_seconds the call becomes a suspect (TurnSuspected.stalled_s) by the same
  lane rule. The gateway still closes it at its idle timeout. A stall says nothing of the
  model's time to start, nor of the provider answering nobody: it is no sample, no start
  miss and no outage evidence. A chunk after it does not take the lane back: the pool has
  granted the lane to another call by then, and a call that stalled once is likely to again.
- slowness that belongs to one agent (its prompts, its backend: a slow call's retry and its
  next calls are slow again) must not widen the deadline of every other agent of the model.
  So the model's estimator learns only from calls that were in time and whose agent is not
  backed off (teaches_model): a suspect's late first chunk is not taken (its missed deadline
  was, as a censored sample of the mean), nor is any call of an agent with start_misses.
  The agent's own deadline backs off instead (doubled per miss, as Karn's), and the backoff
  ends only with a call that shows its first chunk or answer before its deadline: a late
  call that answers at last, or one the gateway cut (an ERROR completion), leaves it.
  Chosen over a robust per-model estimate (a median or low quantile) because that would
  still drift with the share of slow agents, and it separates the cases by who is slow,
  which is what the per-agent backoff knows already.
- no reap of a held call counts towards quarantine: quarantine is for agents whose own
  turns expire, and a held turn's expiry is the gateway's failure, not the agent's.
"""
from __future__ import annotations

import math

from . import events as ev
from .settings import PoolSettings
from .state import AgentState, PoolState, StartEstimator, TurnState

GATEWAY = "gateway"                 # the one holder there is
MAX_MODEL_ESTIMATORS = 64           # models are named by agents: the state stays bounded
OTHER_MODELS = "*"                  # the estimator shared by models past that bound
WHOLE_ANSWER = " (whole answer)"    # the key suffix of non-streaming calls' estimators


def estimator_key(turn: TurnState) -> str | None:
    """Which per-model estimator times this call, None for the pool's own (unheld calls)."""
    if turn.holder is None or not turn.model:
        return None
    return turn.model if turn.streams else turn.model + WHOLE_ANSWER


def estimator(state: PoolState, turn: TurnState, *, learn: bool = False) -> StartEstimator:
    """The estimator of `turn`'s start (or whole answer). With `learn`, one is created for a
    new model (while there is room; past it the models share one)."""
    key = estimator_key(turn)
    if key is None:
        return state.start
    found = state.model_starts.get(key)
    if found is not None:
        return found
    if len(state.model_starts) >= MAX_MODEL_ESTIMATORS:
        key = OTHER_MODELS
        found = state.model_starts.get(key)
        if found is not None:
            return found
    if not learn:
        return StartEstimator()   # cold: no deadline yet
    created = state.model_starts[key] = StartEstimator()
    return created


def in_time(turn: TurnState) -> bool:
    """The call showed its first chunk (or answer) before it was suspected, if it is held."""
    return turn.holder is None or not turn.suspected


def teaches_model(turn: TurnState, agent: AgentState | None) -> bool:
    """Whether this call's first chunk (or whole answer) is a sample of its model's shared
    deadline. An unheld call's always is (the pool's own estimator). A held call's is not
    when it was a suspect (its missed deadline was its sample already, a censored one), or
    when its agent is backed off (start_misses, or a backed-off grant): slowness that
    belongs to one agent's prompts or backend would otherwise widen the deadline of every
    agent of the model (see the module's docstring)."""
    if turn.holder is None:
        return True
    return not turn.suspected and turn.start_backoff == 0 and (agent is None or agent.start_misses == 0)


def suspicion_after(state: PoolState, turn: TurnState, backoff: int) -> float | None:
    """Seconds after its grant at which a held call becomes a suspect; None while its model's
    estimate is cold, or when the deadline would not come before the call's own timeout."""
    est = estimator(state, turn)
    if est.srtt is None or est.samples < est.WARM_AFTER:
        return None
    request_timeout, _idle = state.settings.timeouts_for(turn.model)
    after = est.timeout(turn.estimated_tokens, state.settings.start_timeout_floor_seconds, request_timeout, backoff)
    return after if after < request_timeout else None


def suspects_off_lane(state: PoolState) -> int:
    return sum(1 for t in state.turns.values()
               if t.suspected and (t.lane is None or state.lanes[t.lane] != t.turn_id))


def frees_lane(state: PoolState) -> bool:
    """Whether a new suspect may leave its lane (bounded: see the module's docstring)."""
    return suspects_off_lane(state) < state.lanes_in_use()


def stalled_for(state: PoolState, turn: TurnState, idle_s: object) -> float | None:
    """The silence a holder's keepalive reports, when it makes the held stream a suspect: it
    began (a first chunk), is not a suspect yet, and its last chunk is stall_timeout_seconds
    old or more. None otherwise (and for a value that is not a finite number of seconds)."""
    stall = state.settings.stall_timeout_seconds
    if (stall is None or turn.holder is None or not turn.streams or not turn.progressed or turn.suspected
            or isinstance(idle_s, bool) or not isinstance(idle_s, (int, float))):
        return None
    idle = float(idle_s)
    return idle if math.isfinite(idle) and idle >= stall else None


def lease_after_heartbeat(settings: PoolSettings, turn: TurnState) -> tuple[float, bool]:
    """(seconds the lease is extended by, whether that is the stall deadline)."""
    stall = settings.stall_timeout_seconds
    if turn.holder is not None:
        return settings.lease_seconds, False   # its holder watches the stream (see above)
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

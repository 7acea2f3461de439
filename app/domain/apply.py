"""apply(state, type, data): the only way a pool's scheduler state changes.

Deterministic and clock-free: time enters as the `at` recorded in each decision. Folding
a pool's events from the start with apply gives exactly the state the live scheduler
had, which is what makes replay, time travel and `replayCheck` exact.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from typing import Any, cast

from . import deadlines, limiter
from . import events as ev
from .admission import aimd_factor
from .rate_scopes import POOL, Hold, ModelLimits
from .settings import PoolSettings
from .state import AgentState, PoolState, RunState, TurnState


def new_pool(data: dict[str, Any] | ev.PoolCreated) -> PoolState:
    created = data if isinstance(data, ev.PoolCreated) else ev.PoolCreated.from_dict(data)
    return PoolState.new(PoolSettings.from_dict(created.settings), created.at)


def fold_pool(state: PoolState | None, event: ev.Event | None, version: int,
              position: int) -> PoolState | None:
    """A pool's state advanced by one event of its own stream, with that event's stream
    version and global position: the one fold of a pool, for its scheduler, its read model
    and its past states. `event` is the typed event, or None for a type that is not the
    scheduler's (it moves only the version). Before the pool's creation there is no state;
    an event at or below the state's position is already in it (a loaded document)."""
    if isinstance(event, ev.PoolCreated):
        # `position` stays 0 until the first decision: read models persisted so far say
        # so, and their hashes must not move.
        state = new_pool(event)
        state.version = version
        return state
    if state is None or position <= state.position:
        return state
    if isinstance(event, ev.Decided):
        apply_event(state, event)
    state.version, state.position = version, position
    return state


def _advance(state: PoolState, at: float) -> None:
    """Move the pool's clock to `at`: refill buckets at the current factor, then let the
    AIMD factor grow additively. Only decisions call this, so live and replay take the
    same steps and reach the same floating-point values."""
    if at <= state.clock:
        return
    s = state.settings
    state.requests.advance(at, state.rate_factor)
    state.tokens.advance(at, state.rate_factor)
    state.rate_factor = aimd_factor(state.rate_factor, state.rate_factor_at, at, s.aimd_increase_per_minute)
    state.rate_factor_at = at
    state.clock = at
    _forget_spent_limits(state, at)


def _forget_spent_limits(state: PoolState, at: float) -> None:
    """Drop what no longer holds anything back at `at` (pauses and holds over, a model's
    factor back at 1, reports older than the cap), so the state stays bounded."""
    if state.agent_pauses:
        for agent_id in [a for a, until in state.agent_pauses.items() if until <= at]:
            del state.agent_pauses[agent_id]
    if state.holds:
        for scope in [k for k, hold in state.holds.items() if hold.until <= at]:
            del state.holds[scope]
    if state.model_limits:
        increase = state.settings.aimd_increase_per_minute
        for model in [m for m, limits in state.model_limits.items() if limits.idle(at, increase)]:
            del state.model_limits[model]
    if state.rate_reports:
        cap = state.settings.agent_retry_after_cap_seconds or 0.0
        state.rate_reports = [r for r in state.rate_reports if r[0] > at - cap]


def _enqueue(state: PoolState, turn: TurnState) -> None:
    queue = state.queues[turn.level]
    if not queue or state.turns[queue[-1]].seq < turn.seq:
        queue.append(turn.turn_id)  # the common case: a new arrival goes last
    else:
        seqs = [state.turns[t].seq for t in queue]
        queue.insert(bisect.bisect_right(seqs, turn.seq), turn.turn_id)
    if (counts := state.queued_by_agent) is not None:
        counts[turn.agent_id] = counts.get(turn.agent_id, 0) + 1


def _dequeue(state: PoolState, turn: TurnState) -> None:
    queue = state.queues[turn.level]
    if turn.turn_id in queue:
        queue.remove(turn.turn_id)
        if (counts := state.queued_by_agent) is not None:
            if counts[turn.agent_id] > 1:
                counts[turn.agent_id] -= 1
            else:
                del counts[turn.agent_id]


def _release_lane(state: PoolState, turn: TurnState) -> None:
    if turn.lane is not None and state.lanes[turn.lane] == turn.turn_id:
        state.lanes[turn.lane] = None


def _run_joined(state: PoolState, turn: TurnState, at: float) -> None:
    if turn.run_id is None:
        return
    run = state.runs.setdefault(turn.run_id, RunState())
    run.live += 1
    run.last_at = at


def _run_charged(state: PoolState, turn: TurnState, lane_seconds: float, at: float) -> None:
    """A turn of a run has left the state: its lane time is the run's attained service
    (PLAS charges a program the service of its calls)."""
    run = state.runs.get(turn.run_id) if turn.run_id is not None else None
    if run is None:
        return
    run.service_s += max(0.0, lane_seconds)
    run.live = max(0, run.live - 1)
    run.last_at = at


def _forget_idle_runs(state: PoolState, at: float) -> None:
    """A run with nothing live for run_forget_seconds is over (the client never says so):
    its service is dropped, as Autellix drops a finished program, which bounds the state."""
    horizon = at - state.settings.run_forget_seconds
    for run_id in [r for r, run in state.runs.items() if run.live == 0 and run.last_at <= horizon]:
        del state.runs[run_id]


def apply(state: PoolState, type_: str, data: dict[str, Any]) -> PoolState:
    """Fold one logged decision (type and data, as the log stores it); other types are not
    the scheduler's and change nothing."""
    if type_ not in _HANDLERS:
        return state
    return apply_event(state, ev.parse(type_, data))


def apply_event(state: PoolState, event: ev.Event) -> PoolState:
    handler = _HANDLERS.get(event.TYPE)
    if handler is None:
        return state
    event = cast(ev.Decided, event)   # every type _HANDLERS names is a decision
    _advance(state, event.at)
    handler(state, event)
    cause = event.cause
    if isinstance(cause, int) and cause > state.inputs_through:
        state.inputs_through = cause
    return state


def _agent_admitted(state: PoolState, d: ev.AgentAdmitted) -> None:
    state.agents[d.agent_id] = AgentState(
        agent_id=d.agent_id, name=d.name, priority_class=d.priority_class, level=d.level)


def _quarantine_lifted(state: PoolState, d: ev.QuarantineLifted) -> None:
    agent = state.agents[d.agent_id]
    agent.state, agent.consecutive_reaps, agent.start_misses = ev.ACTIVE, 0, 0


# -- decisions ------------------------------------------------------------------------

def _turn_queued(state: PoolState, d: ev.TurnQueued) -> None:
    turn = TurnState(turn_id=d.turn_id, agent_id=d.agent_id, level=d.level, seq=d.seq,
                     status=ev.QUEUED, estimated_tokens=d.estimated_tokens,
                     max_output_tokens=d.max_output_tokens, requested_at=d.requested_at,
                     queued_at=d.at, streams=bool(d.streams), run_id=d.run_id, holder=d.holder, model=d.model)
    state.turns[turn.turn_id] = turn
    _run_joined(state, turn, d.at)
    state.next_seq = max(state.next_seq, turn.seq + 1)
    _enqueue(state, turn)


def _turn_granted(state: PoolState, d: ev.TurnGranted) -> None:
    turn = state.turns[d.turn_id]
    _dequeue(state, turn)
    turn.status, turn.lane, turn.granted_at = ev.GRANTED, d.lane, d.at
    turn.lease_expires_at, turn.reserved_tokens = d.lease_expires_at, d.reserved_tokens
    turn.start_backoff = int(d.start_backoff or 0)
    turn.suspect_at = d.suspect_at
    state.lanes[turn.lane] = turn.turn_id
    state.requests.level -= 1
    state.tokens.level -= turn.reserved_tokens
    if state.settings.windowed:
        state.window.add(d.at, turn.reserved_tokens)
        state.window.prune(d.at, limiter.span(state.settings))
    if state.holds:
        for scope in (POOL, turn.model):
            hold = state.holds.get(scope) if scope is not None else None
            if hold is not None and hold.active(d.at):
                hold.requests = None if hold.requests is None else hold.requests - 1
                hold.tokens = None if hold.tokens is None else hold.tokens - turn.reserved_tokens
    turn.granted_mark, turn.grant_number = state.reserved_total, state.granted_total
    state.reserved_total += turn.reserved_tokens
    state.granted_total += 1


def _lease_extended(state: PoolState, d: ev.LeaseExtended) -> None:
    turn = state.turns[d.turn_id]
    turn.lease_expires_at = d.lease_expires_at
    if d.keepalive:
        return   # the holder is alive; the call has shown nothing
    turn.progressed = True
    if d.first_chunk_s is not None:
        agent = state.agents.get(turn.agent_id)
        if deadlines.teaches_model(turn, agent):
            deadlines.estimator(state, turn, learn=True).observe(float(d.first_chunk_s), turn.estimated_tokens)
        if agent is not None and deadlines.in_time(turn):
            agent.start_misses = 0
        if state.silent_from is None or (turn.granted_at is not None and turn.granted_at >= state.silent_from):
            # A call granted no earlier than the silent ones started: new calls are answered.
            # (A first chunk of an older call says nothing about calls sent since.)
            state.silent_reaps, state.silent_from = 0, None
        if state.settings.adaptive_lanes:
            busy = state.busy_lanes()
            sample = math.log(max(float(d.first_chunk_s), 1e-3) / state.start.size(turn.estimated_tokens))
            state.lane_limit.observe(sample, busy, state.settings.lanes, state.settings.adaptive_lanes_initial,
                                     state.settings.adaptive_lanes_minimum)


def _turn_completed(state: PoolState, d: ev.TurnCompleted) -> None:
    turn = state.turns.pop(d.turn_id)
    agent = state.agents.get(turn.agent_id)
    if (turn.holder is not None and not turn.streams and d.outcome == ev.OK
            and deadlines.teaches_model(turn, agent)):
        # A held call that does not stream: its whole answer's time is what its suspicion
        # deadline is learned from.
        deadlines.estimator(state, turn, learn=True).observe(d.lane_seconds, turn.estimated_tokens)
    if state.settings.adaptive_lanes and not turn.streams and d.outcome == ev.OK:
        busy = state.busy_lanes()
        state.lane_limit.grow_unmeasured(busy, state.settings.lanes, state.settings.adaptive_lanes_initial)
    _release_lane(state, turn)
    _run_charged(state, turn, d.lane_seconds, d.at)
    used = d.prompt_tokens + d.completion_tokens
    # Reconcile the reservation with real usage; never above the bucket's capacity.
    capacity = state.tokens.capacity(state.rate_factor)
    state.tokens.level = min(capacity, state.tokens.level + turn.reserved_tokens - used)
    if state.settings.windowed and turn.granted_at is not None:
        state.window.refund(turn.granted_at, turn.reserved_tokens - used)
    if agent:
        agent.used_seconds += d.lane_seconds
        agent.used_tokens += used
        agent.consecutive_reaps = 0
        if turn.holder is None or (d.outcome == ev.OK and deadlines.in_time(turn)):
            # A held call's backoff outlives its late or failed calls (deadlines.py)
            agent.start_misses = 0
        agent.completions += 1
    if state.silent_from is None or (turn.granted_at is not None and turn.granted_at >= state.silent_from):
        state.silent_reaps, state.silent_from = 0, None   # the provider answered a call as new


def _turn_cancelled(state: PoolState, d: ev.TurnCancelled) -> None:
    turn = state.turns.pop(d.turn_id, None)
    if turn is None:
        return
    _dequeue(state, turn)
    _release_lane(state, turn)
    _run_charged(state, turn, d.lane_seconds or 0.0, d.at)
    agent = state.agents.get(turn.agent_id)
    if agent is not None and d.lane_seconds:
        agent.used_seconds += d.lane_seconds


def _turn_reaped(state: PoolState, d: ev.TurnReaped) -> None:
    turn = state.turns.pop(d.turn_id)
    _release_lane(state, turn)
    _run_charged(state, turn, d.at - turn.granted_at if turn.granted_at is not None else 0.0, d.at)
    # A start deadline shorter than the lease may just have been too short (a slow provider,
    # a long prompt): it backs off (start_misses) but does not count towards quarantine.
    # Only a reap after a whole lease of silence marks a zombie.
    cut_short = bool(d.no_first_chunk) and not (d.full_lease if d.has("full_lease") else True)
    # A stream reaped at its stall deadline went silent mid-answer: the provider's fault far
    # more often than a zombie client's, and shorter than a lease, so it is cut short too.
    cut_short = cut_short or bool(d.stalled)
    # With outage detection on, a reap while the pool is already silent (no first chunk since
    # the previous reap, or a suspected outage) is outage evidence, not a latency sample:
    # taken as censored samples, a few such reaps would inflate the start deadline to the
    # whole lease just when every call is hanging.
    silent_pool = state.silent_reaps > 0 or state.outage_since is not None
    if d.no_first_chunk and state.settings.outage_after_silent_reaps > 0:
        state.silent_reaps += 1
        if turn.granted_at is not None:
            state.silent_from = (turn.granted_at if state.silent_from is None
                                 else min(state.silent_from, turn.granted_at))
        if (state.outage_since is not None and turn.granted_at is not None
                and turn.granted_at >= state.outage_since):
            state.failed_probes += 1
    agent = state.agents.get(turn.agent_id)
    if agent:
        # A zombie's whole hold counts against its agent; its reservation stays spent,
        # because we cannot know what the provider charged for a call that never settled.
        agent.used_seconds += d.at - turn.granted_at if turn.granted_at is not None else 0.0
        agent.reaps += 1
        if d.no_first_chunk:
            agent.start_misses += 1
        if not cut_short and turn.holder is None:   # a held turn's expiry is its holder's failure
            agent.consecutive_reaps += 1
    if (cut_short and not d.stalled and turn.granted_at is not None and turn.start_backoff == 0
            and not (silent_pool and state.settings.outage_after_silent_reaps > 0)):
        # A censored sample: this call's first chunk would have come no sooner than the
        # deadline. Taking the deadline as a sample raises the estimate, so a provider that
        # has slowed down for everyone is learned even though no call beats the deadline.
        # Karn: a backed-off deadline says nothing of the pool, so it is not sampled.
        # With the later failure rules on, it moves the mean only: the spread is what
        # separates a slow start from a hang, and a censored sample has no spread to tell.
        # (Taken whole, with 2% of calls hanging, each hang would widen the deadline by a
        # fifth: 4 deviations over the mean, at gain 1/16.)
        expires_at = cast(float, turn.lease_expires_at)   # a granted turn holds a lease
        state.start.observe(expires_at - turn.granted_at, turn.estimated_tokens,
                            spread=state.settings.outage_after_silent_reaps == 0)


def _turn_suspected(state: PoolState, d: ev.TurnSuspected) -> None:
    """A held call is late (deadlines.py): it stays granted; its lane may go. The deadline it
    missed is a censored sample of its model (the mean only: a censored sample has no spread
    to tell), unless the deadline was backed off (Karn); the agent's next one backs off."""
    turn = state.turns[d.turn_id]
    turn.suspected = True
    if d.lane_freed:
        _release_lane(state, turn)
    if d.stalled_s is not None:
        return   # a stream that began and went silent: nothing of its start (deadlines.py)
    if turn.start_backoff == 0 and turn.granted_at is not None:
        deadlines.estimator(state, turn, learn=True).observe(d.waited_s, turn.estimated_tokens, spread=False)
    agent = state.agents.get(turn.agent_id)
    if agent is not None:
        agent.start_misses += 1
    if turn.streams and state.settings.outage_after_silent_reaps > 0:
        # As a start-deadline reap: no first chunk, evidence of a provider that answers nobody.
        state.silent_reaps += 1
        if turn.granted_at is not None:
            state.silent_from = (turn.granted_at if state.silent_from is None
                                 else min(state.silent_from, turn.granted_at))
        if (state.outage_since is not None and turn.granted_at is not None
                and turn.granted_at >= state.outage_since):
            state.failed_probes += 1


def _agent_demoted(state: PoolState, d: ev.AgentDemoted) -> None:
    agent = state.agents[d.agent_id]
    agent.level, agent.used_seconds, agent.used_tokens = d.to_level, 0.0, 0.0
    for turn in sorted((t for t in state.turns.values()
                        if t.agent_id == agent.agent_id and t.status == ev.QUEUED), key=lambda t: t.seq):
        _dequeue(state, turn)
        turn.level = d.to_level
        _enqueue(state, turn)


def _levels_boosted(state: PoolState, d: ev.LevelsBoosted) -> None:
    s = state.settings
    for agent in state.agents.values():
        agent.level = s.entry_level(agent.priority_class)
        agent.used_seconds = agent.used_tokens = 0.0
    queued = sorted((t for t in state.turns.values() if t.status == ev.QUEUED), key=lambda t: t.seq)
    state.queues = [[] for _ in range(s.levels)]
    # (The same turns stay queued, each under its agent: queued_by_agent's counts stand.)
    for turn in queued:
        # Aging through the boost: a turn that has waited a whole period goes to the top
        # level, so under MLFQ every queued turn is granted eventually.
        owner = state.agents.get(turn.agent_id)
        entry = owner.level if owner else s.levels - 1
        turn.level = 0 if d.at - turn.queued_at >= s.boost_seconds else entry
        state.queues[turn.level].append(turn.turn_id)
    state.last_boost_at = d.at
    if state.runs:
        _forget_idle_runs(state, d.at)


def _turn_promoted(state: PoolState, d: ev.TurnPromoted) -> None:
    turn = state.turns[d.turn_id]
    _dequeue(state, turn)
    turn.level = d.to_level
    _enqueue(state, turn)


def _agent_quarantined(state: PoolState, d: ev.AgentQuarantined) -> None:
    state.agents[d.agent_id].state = ev.QUARANTINED


def _pool_paused(state: PoolState, d: ev.PoolPaused) -> None:
    state.paused_until = d.until
    state.rate_factor, state.rate_factor_at = d.rate_factor, d.at
    # After a 429 restart from an empty request bucket: admission resumes at the refill
    # rate instead of releasing a full bucket at once, which is what caused the 429.
    state.requests.level = min(state.requests.level, 0.0)
    state.tokens.level = min(state.tokens.level, state.tokens.capacity(state.rate_factor))
    _reported(state, d.at, d.reporter, None)


def _pool_resumed(state: PoolState, d: ev.PoolResumed) -> None:
    state.paused_until = None


def _reported(state: PoolState, at: float, reporter: str | None, model: str | None) -> None:
    """A 429 report kept for the claims rule (decide._corroborated): the latest per reporter
    and model, so the list is bounded by the reporters."""
    if reporter is None:
        return
    state.rate_reports = [r for r in state.rate_reports if (r[1], r[2]) != (reporter, model)]
    state.rate_reports.append([at, reporter, model])


def _model_paused(state: PoolState, d: ev.ModelPaused) -> None:
    limits = state.model_limits.setdefault(d.model, ModelLimits())
    limits.paused_until = d.until
    limits.factor, limits.factor_at = d.rate_factor, d.at
    _reported(state, d.at, d.reporter, d.model)


def _agent_paused(state: PoolState, d: ev.AgentPaused) -> None:
    state.agent_pauses[d.agent_id] = max(d.until, state.agent_pauses.get(d.agent_id, d.until))
    _reported(state, d.at, d.agent_id, d.model)


def _rate_observed(state: PoolState, d: ev.RateObserved) -> None:
    # The provider counts traffic we cannot see (other clients of the same key), so its
    # remaining budget may only lower ours, never raise it.
    if d.remaining_requests is not None:
        state.requests.level = min(state.requests.level, float(d.remaining_requests))
    if d.remaining_tokens is not None:
        state.tokens.level = min(state.tokens.level, float(d.remaining_tokens))
    if d.hold_until is not None:
        scope = d.model or POOL
        as_of = float(d.hold_as_of) if d.hold_as_of is not None else d.at
        held = state.holds.get(scope)
        # A later call's headers describe a later state of the provider: an older call's,
        # arriving after them, do not replace them.
        if held is None or not held.active(d.at) or held.as_of <= as_of:
            state.holds[scope] = Hold(until=float(d.hold_until), requests=d.hold_requests, tokens=d.hold_tokens,
                                      as_of=as_of)


def _lane_limit_changed(state: PoolState, d: ev.LaneLimitChanged) -> None:
    state.limit_in_use = int(d.lanes_in_use)


def _outage_suspected(state: PoolState, d: ev.ProviderOutageSuspected) -> None:
    state.outage_since, state.failed_probes, state.silent_reaps, state.silent_from = d.at, 0, 0, None


def _provider_recovered(state: PoolState, d: ev.ProviderRecovered) -> None:
    state.outage_since, state.failed_probes, state.silent_reaps, state.silent_from = None, 0, 0, None


def _rate_recovered(state: PoolState, d: ev.RateRecovered) -> None:
    """Nothing beyond moving the clock (apply_event's _advance), which grows the factor."""


# Each handler takes its own event class: the table can only say "some event" (Any), the
# handler's signature says which.
_HANDLERS: dict[str, Callable[[PoolState, Any], None]] = {
    ev.AGENT_ADMITTED: _agent_admitted,
    ev.QUARANTINE_LIFTED: _quarantine_lifted,
    ev.TURN_QUEUED: _turn_queued,
    ev.TURN_GRANTED: _turn_granted,
    ev.LEASE_EXTENDED: _lease_extended,
    ev.TURN_COMPLETED: _turn_completed,
    ev.TURN_CANCELLED: _turn_cancelled,
    ev.TURN_REAPED: _turn_reaped,
    ev.TURN_SUSPECTED: _turn_suspected,
    ev.AGENT_DEMOTED: _agent_demoted,
    ev.LEVELS_BOOSTED: _levels_boosted,
    ev.TURN_PROMOTED: _turn_promoted,
    ev.AGENT_QUARANTINED: _agent_quarantined,
    ev.POOL_PAUSED: _pool_paused,
    ev.POOL_RESUMED: _pool_resumed,
    ev.RATE_OBSERVED: _rate_observed,
    ev.LANE_LIMIT_CHANGED: _lane_limit_changed,
    ev.PROVIDER_OUTAGE_SUSPECTED: _outage_suspected,
    ev.PROVIDER_RECOVERED: _provider_recovered,
    ev.RATE_RECOVERED: _rate_recovered,
    ev.MODEL_PAUSED: _model_paused,
    ev.AGENT_PAUSED: _agent_paused,
}

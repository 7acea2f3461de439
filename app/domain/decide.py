"""decide(state, input, now) -> decisions: the scheduling policy as a pure function.

For each input (a turn request, heartbeat, completion or cancel, or None for "time has
passed") decide first fires the timers due by `now` (lease expiries, the periodic boost,
the end of a pause), then answers the input, then grants as many queued turns as the
free lanes and the rate budget allow. Each decision is folded into `state` through
apply() as soon as it is made, so later decisions of the same step see it; the state you
pass in is therefore advanced (pass `state.copy()` to keep the old one). Nothing here
does I/O or reads a clock: `now` is a value, and it is recorded in every decision.

MLFQ rules (after OSTEP ch. 8, adapted to one-call turns):
 1. A turn at a lower level index runs first.
 2. Within a level, turns run in arrival order (FIFO by sequence number).
 3. An agent enters at its priority class's level (interactive 0, batch 1, background 2).
 4. Each turn's lane-seconds and tokens are charged to its agent at its current level;
    when either allotment is used up the agent moves down one level (its queued turns too).
 5. Every boost period all agents return to their entry level. Independently, a turn
    that has waited one boost period is promoted to level 0 at that moment (aging, with
    its own deadline rather than at the next boost instant), so no wait much exceeds one
    period plus the work ahead of it at level 0: nothing starves.
Policy "deadline" replaces rules 1, 2, 4 and 5 with one virtual deadline per queued turn
(class slack, run attained service, size; ordering.py): no demotions, no promotions, and
the earliest deadline is granted first.
Start deadline: a turn whose client streams (it heartbeats at the answer's first chunk) is
granted with a lease that ends at its start deadline (see settings); its first heartbeat
gives the full lease and is the sample the deadline is estimated from. A provider call
that never produces a chunk is reaped after a few seconds, not a whole lease.
Admission: the head turn is granted only if a lane is free, the pool is not paused, and
the pool's limiter (buckets or window, limiter.py) holds its reservation; the head is
never skipped for a smaller turn behind it, so big requests cannot starve either. A turn
held back by a scope of its own (its agent's pause, its model's pause, hold or lower AIMD
factor) is passed over: the next turn is asked.
A 429 pauses what it concerns: the call's model when the call named one (ModelPaused),
else the pool (PoolPaused). An agent's own report of a 429 is a claim (the gateway's
reports are not): its retry-after is capped, and it pauses only that agent (AgentPaused)
unless the gateway or another agent reported one within the cap.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

from . import deadlines, limiter, ordering, pool_access, rules
from . import events as ev
from .access import AccessPolicy
from .admission import MAX_RETRY_AFTER_S, RateObservation, aimd_factor, jitter, parse_rate_headers
from .apply import apply_event
from .settings import MAX_MODEL_NAME, PoolSettings
from .state import AgentState, PoolState, TurnState

Decision = tuple[str, dict[str, Any]]   # (type, data): a decision as the log stores it

# A lease or start deadline is enforced this long after it passes. An input stamped before
# the deadline (a heartbeat, a completion) may still be on its way through the log (append,
# notify, the scheduler's read) when the deadline comes; and an input stamped in time that
# is in the same pass as the expiry wins over it (see _fire_timers).
REAP_GRACE_S = 0.25
_IN_TIME_INPUTS = (ev.HeartbeatSent, ev.CompletionReported, ev.CancelRequested)


class _Step:
    def __init__(self, state: PoolState, now: float, cause: int | None, access: AccessPolicy | None = None):
        self.state, self.now, self.cause, self.access = state, now, cause, access
        self.out: list[ev.Decided] = []

    def emit(self, kind: type[ev.Decided], **fields: Any) -> None:
        event = kind(**fields, at=self.now, cause=self.cause)
        apply_event(self.state, event)
        self.out.append(event)


def _as_logged(decisions: list[ev.Decided]) -> list[Decision]:
    return [(d.TYPE, d.to_dict()) for d in decisions]


def _input(type_: str, data: dict[str, Any] | None) -> ev.Event | None:
    """The typed input decide answers, or None for a type it does not answer."""
    return ev.parse(type_, data or {}) if type_ in _INPUT_HANDLERS else None


def decide(state: PoolState, input_type: str | None, data: dict[str, Any] | None, now: float,
           cause: int | None = None) -> list[Decision]:
    return _as_logged(decide_events(state, input_type, data, now, cause))


def decide_many(state: PoolState, inputs: list[tuple[str, dict[str, Any], int | None]], now: float,
                access: AccessPolicy | None = None) -> list[Decision]:
    """decide() for a batch of inputs that arrived together: timers fire once, each input is
    answered in order, and granting runs once at the end (its decisions cite the last
    input as their cause). Same rules, less work per input under load. With `access`, the
    pool capability policy as of the batch's start (app/domain/pool_access.py): the
    batch's grants and revocations are folded into it in order, and a request it refuses
    is cancelled."""
    return _as_logged(decide_many_events(state, inputs, now, access))


def decide_events(state: PoolState, input_type: str | None, data: dict[str, Any] | None, now: float,
                  cause: int | None = None) -> list[ev.Decided]:
    """decide(), with the decisions as typed events (for readers in the same process)."""
    now = max(now, state.clock)  # time never runs backwards, even across failover
    step = _Step(state, now, cause)
    event = _input(input_type, data) if input_type is not None else None
    _fire_timers(step, [event] if event is not None else [])
    if event is not None:
        _INPUT_HANDLERS[event.TYPE](step, event)
    _dispatch(step)
    return step.out


def decide_many_events(state: PoolState, inputs: list[tuple[str, dict[str, Any], int | None]],
                       now: float, access: AccessPolicy | None = None) -> list[ev.Decided]:
    """decide_many(), with the decisions as typed events."""
    now = max(now, state.clock)
    step = _Step(state, now, None, access)
    typed = [(_input(type_, data), cause, type_, data) for type_, data, cause in inputs]
    _fire_timers(step, [event for event, _cause, _t, _d in typed if event is not None])
    for event, cause, type_, data in typed:
        if type_ in pool_access.CHANGES:
            if access is not None:
                pool_access.fold(access, type_, data)   # not an input of ours: no decision cites it
            continue
        step.cause = cause
        if event is not None:
            _INPUT_HANDLERS[event.TYPE](step, event)
    _dispatch(step)
    return step.out


def factor_at(state: PoolState, now: float) -> float:
    return aimd_factor(state.rate_factor, state.rate_factor_at, now, state.settings.aimd_increase_per_minute)


def available(state: PoolState, now: float) -> tuple[float, float]:
    """(requests, tokens) admissible at `now`, as apply() will compute them."""
    return limiter.available(state, now)


def next_deadline(state: PoolState, now: float) -> float | None:
    """When decide(state, None, ...) next has something to do, or None for never."""
    times: list[float] = [t.lease_expires_at + REAP_GRACE_S for t in state.turns.values()
                          if t.status == ev.GRANTED and t.lease_expires_at is not None]
    times.extend(cast(float, t.suspect_at) for t in state.turns.values() if _may_become_suspect(t))
    if state.agents:
        times.append(state.last_boost_at + state.settings.boost_seconds)
    if not ordering.by_deadline(state):  # deadlines age by themselves (ordering.py)
        aging = [t.queued_at + state.settings.boost_seconds for q in state.queues[1:] for t in
                 (state.turns[tid] for tid in q[:1])]  # FIFO: a level's oldest turn ages first
        times.extend(aging)
    if state.paused_until is not None:
        times.append(state.paused_until)
    elif deadlines.grants_allowed(state) > 0:
        times.extend(_admission_wakeups(state, now))
    return min(times) if times else None


def _admission_wakeups(state: PoolState, now: float) -> list[float]:
    """When the turns _dispatch would ask, in its order, may be let through: each one
    passed over (its own scope holds it) until the first the pool's budget decides."""
    order, passed, times = ordering.GrantOrder(state), set[str](), list[float]()
    while (turn := order.next(passed) if passed else order.next()) is not None:
        kind, when = limiter.verdict(state, turn, now)
        if math.isinf(when):
            # The reservation exceeds the capacity at the factor of the last decision:
            # wake when the factor has grown enough to hold it (_dispatch then folds
            # it forward with RateRecovered, and the refill wait follows).
            when = now + max(_seconds_until_factor_allows(state, turn, now), 1e-3)
        times.append(max(when, now + 1e-3))
        if kind != limiter.SKIP:
            break
        passed.add(turn.turn_id)
    return times


def _seconds_until_factor_allows(state: PoolState, head: TurnState, now: float) -> float:
    s = state.settings
    needed = limiter.factor_needed(s, head)
    per_second = max(s.aimd_increase_per_minute, 1e-9) / 60.0
    return max(0.0, state.rate_factor_at + (needed - state.rate_factor) / per_second - now)


# -- timers ---------------------------------------------------------------------------

def _in_time(turn: TurnState, inputs: list[ev.Event]) -> bool:
    """An input of this pass for `turn`, stamped at or before its deadline."""
    deadline = cast(float, turn.lease_expires_at)   # a granted turn's
    return any(isinstance(e, _IN_TIME_INPUTS) and e.turn_id == turn.turn_id
               and isinstance(e.at, (int, float)) and e.at <= deadline
               for e in inputs)


def _may_become_suspect(turn: TurnState) -> bool:
    return (turn.status == ev.GRANTED and turn.suspect_at is not None and not turn.suspected
            and not turn.progressed)


def _answered_by(turn: TurnState, inputs: list[ev.Event]) -> bool:
    """An input of this pass that shows `turn` progressed by its suspicion deadline (a first
    chunk or an answer; a keepalive only shows its holder is alive)."""
    deadline = cast(float, turn.suspect_at)
    return any(isinstance(e, _IN_TIME_INPUTS) and e.turn_id == turn.turn_id
               and not (isinstance(e, ev.HeartbeatSent) and e.keepalive)
               and isinstance(e.at, (int, float)) and e.at <= deadline
               for e in inputs)


def _fire_suspicions(step: _Step, inputs: list[ev.Event]) -> None:
    state, now = step.state, step.now
    late = sorted((t for t in state.turns.values() if _may_become_suspect(t)
                   and cast(float, t.suspect_at) <= now and not _answered_by(t, inputs)),
                  key=lambda t: (t.suspect_at, t.turn_id))
    for turn in late:
        step.emit(ev.TurnSuspected, turn_id=turn.turn_id, agent_id=turn.agent_id, lane=turn.lane,
                  waited_s=_held(turn, now), lane_freed=deadlines.frees_lane(state))


def _fire_timers(step: _Step, inputs: list[ev.Event]) -> None:
    state, now = step.state, step.now
    expired = sorted((t for t in state.turns.values()
                      if t.status == ev.GRANTED and t.lease_expires_at is not None
                      and t.lease_expires_at + REAP_GRACE_S <= now and not _in_time(t, inputs)),
                     key=lambda t: (t.lease_expires_at, t.turn_id))
    for turn in expired:
        if state.turns.get(turn.turn_id) is not turn:
            continue  # already settled earlier in this step
        agent_id = turn.agent_id
        silent = turn.streams and not turn.progressed and turn.holder is None
        stalled = turn.streams and turn.progressed and deadlines.lease_after_heartbeat(state.settings, turn)[1]
        step.emit(ev.TurnReaped, turn_id=turn.turn_id, agent_id=agent_id, lane=turn.lane,
                  lease_expires_at=turn.lease_expires_at, granted_at=turn.granted_at,
                  no_first_chunk=True if silent else None,
                  full_lease=(_held(turn, cast(float, turn.lease_expires_at)) >= state.settings.lease_seconds - 1e-6)
                  if silent else None, stalled=True if stalled else None)
        _after_usage(step, agent_id)
        agent = state.agents.get(agent_id)
        if (agent and agent.state == ev.ACTIVE
                and agent.consecutive_reaps >= state.settings.quarantine_after_reaps):
            step.emit(ev.AgentQuarantined, agent_id=agent_id, consecutive_reaps=agent.consecutive_reaps)
            # Its queued turns go; a call already running keeps its lane until it settles
            # or its own lease expires (cancelling it would hide a reap from the record).
            for queued in sorted((t for t in state.turns.values()
                                  if t.agent_id == agent_id and t.status == ev.QUEUED), key=lambda t: t.seq):
                step.emit(ev.TurnCancelled, turn_id=queued.turn_id, agent_id=agent_id,
                          reason="agent quarantined")
    _fire_suspicions(step, inputs)
    if deadlines.outage_suspected(state):
        step.emit(ev.ProviderOutageSuspected, silent_reaps=state.silent_reaps)
    if state.agents and now >= state.last_boost_at + state.settings.boost_seconds:
        step.emit(ev.LevelsBoosted)
    if state.paused_until is not None and now >= state.paused_until:
        step.emit(ev.PoolResumed)
    for level in range(1, len(state.queues) if not ordering.by_deadline(state) else 1):
        for turn_id in list(state.queues[level]):
            turn = state.turns[turn_id]
            # Compare with the very expression next_deadline() arms (float rounding).
            if now < turn.queued_at + state.settings.boost_seconds:
                break  # FIFO within a level: the rest waited less
            step.emit(ev.TurnPromoted, turn_id=turn_id, agent_id=turn.agent_id, from_level=level,
                      to_level=0, waited=now - turn.queued_at)


def _held(turn: TurnState, now: float) -> float:
    """Seconds since the turn's grant (0 if not granted). Not `granted_at or now`: a grant
    at time 0.0 (a simulation's first instant) is a grant."""
    return now - turn.granted_at if turn.granted_at is not None else 0.0


def _after_usage(step: _Step, agent_id: str) -> None:
    """Rule 4: demote an agent that has used up its allotment at its level."""
    state = step.state
    agent = state.agents.get(agent_id)
    if agent is None or agent.level >= state.settings.levels - 1 or ordering.by_deadline(state):
        return  # under "deadline" a level only shows the class; the run slack charges use
    seconds, tokens = state.settings.allotment(agent.level)
    if agent.used_seconds >= seconds or agent.used_tokens >= tokens:
        reason = "lane-seconds" if agent.used_seconds >= seconds else "tokens"
        step.emit(ev.AgentDemoted, agent_id=agent_id, from_level=agent.level, to_level=agent.level + 1,
                  reason=reason, used_seconds=agent.used_seconds, used_tokens=agent.used_tokens,
                  allotment_seconds=None if math.isinf(seconds) else seconds,
                  allotment_tokens=None if math.isinf(tokens) else tokens)


# -- inputs ---------------------------------------------------------------------------

def _on_registered(step: _Step, d: ev.AgentRegistered) -> None:
    if d.agent_id in step.state.agents:
        return
    step.emit(ev.AgentAdmitted, agent_id=d.agent_id, name=d.name, priority_class=d.priority_class,
              level=step.state.settings.entry_level(d.priority_class))


def _on_released(step: _Step, d: ev.AgentReleased) -> None:
    agent = step.state.agents.get(d.agent_id)
    if agent is not None and rules.release_refusal(agent.state) is None:
        step.emit(ev.QuarantineLifted, agent_id=agent.agent_id)


def _on_request(step: _Step, d: ev.TurnRequested) -> None:
    state = step.state
    turn_id, agent_id = d.turn_id, d.agent_id
    if turn_id in state.turns:
        return  # already answered (a replayed input after failover)
    agent = state.agents.get(agent_id)
    max_output = d.max_output_tokens if d.has("max_output_tokens") else 0
    refusal = (rules.agent_refusal(agent.state if agent is not None else None)
               or rules.reservation_refusal(rules.reservation(d.estimated_tokens, max_output),
                                            limiter.token_capacity(state.settings))
               or _queue_refusal(state, agent_id, d.queue_cap))
    if refusal is not None:
        step.emit(ev.TurnCancelled, turn_id=turn_id, agent_id=agent_id,
                  reason=_reason(refusal, limiter.budget_name(state.settings)))
        return
    if (verdict := pool_access.refusal(step.access, agent_id, state.settings.name)) is not None:
        step.emit(ev.TurnCancelled, turn_id=turn_id, agent_id=agent_id, reason=pool_access.reason(verdict),
                  rule=verdict.rule)
        return
    agent = cast(AgentState, agent)   # agent_refusal refuses a request of an unknown agent
    step.emit(ev.TurnQueued, turn_id=turn_id, agent_id=agent_id, level=agent.level,
              seq=state.next_seq, estimated_tokens=d.estimated_tokens,
              max_output_tokens=max_output, requested_at=d.at if d.has("at") else step.now,
              priority_class=agent.priority_class, streams=bool(d.streams or False),
              run_id=d.run_id if isinstance(d.run_id, str) and d.run_id else None,
              holder=deadlines.GATEWAY if d.holder == deadlines.GATEWAY else None,
              model=d.model if isinstance(d.model, str) and 0 < len(d.model) <= MAX_MODEL_NAME else None)


def _queue_refusal(state: PoolState, agent_id: str, cap: object) -> rules.Refusal | None:
    """The request's own cap on its agent's queued turns (the API writes it; older logs and
    the simulator have none). Decided here, in log order, it holds across API workers."""
    if isinstance(cap, bool) or not isinstance(cap, int):
        return None
    if state.queued_count() < cap:
        return None   # fewer queued turns in the whole pool than the cap (every queued turn is in a queue)
    return rules.queue_refusal(state.queued_of(agent_id), cap)


def _reason(refusal: rules.Refusal, budget: str) -> str:
    """A refused request's reason, as the log has always spelled it."""
    if refusal.kind == rules.QUEUE_FULL:
        return rules.queue_full_reason(refusal)
    if refusal.kind == rules.TOO_BIG:
        return rules.too_big_reason(refusal, budget)
    return {rules.UNKNOWN_AGENT: "unknown agent", rules.QUARANTINED: "agent quarantined"}[refusal.kind]


def _on_heartbeat(step: _Step, d: ev.HeartbeatSent) -> None:
    turn = step.state.turns.get(d.turn_id)
    if turn is None or rules.report_refusal(turn.status):
        return
    if d.keepalive and turn.holder is not None:
        # Its holder is alive: the full lease again, and nothing learned about the call.
        step.emit(ev.LeaseExtended, turn_id=turn.turn_id, agent_id=turn.agent_id,
                  lease_expires_at=step.now + step.state.settings.lease_seconds, keepalive=True)
        if (silent := deadlines.stalled_for(step.state, turn, d.idle_s)) is not None:
            step.emit(ev.TurnSuspected, turn_id=turn.turn_id, agent_id=turn.agent_id, lane=cast(int, turn.lane),
                      waited_s=_held(turn, step.now), lane_freed=deadlines.frees_lane(step.state),
                      stalled_s=silent)
        return
    first_chunk_s = None
    if turn.streams and not turn.progressed:
        # The first chunk: how long this call took to start, for the start deadline, from
        # when the heartbeat was stamped (not when this pass got to it).
        at = d.at
        when = min(float(at), step.now) if isinstance(at, (int, float)) and math.isfinite(at) else step.now
        first_chunk_s = max(0.0, _held(turn, when))
    extension, stall = deadlines.lease_after_heartbeat(step.state.settings, turn)
    step.emit(ev.LeaseExtended, turn_id=turn.turn_id, agent_id=turn.agent_id,
              lease_expires_at=step.now + extension, first_chunk_s=first_chunk_s,
              stall_deadline=True if stall else None)
    if first_chunk_s is not None:
        _after_first_chunk(step, turn)


def _after_first_chunk(step: _Step, turn: TurnState) -> None:
    """A first chunk may end a suspected outage, and moves the learned lane limit."""
    state = step.state
    if deadlines.ends_outage(state, turn):
        _recovered(step, turn)
    _limit_moved(step)


def _limit_moved(step: _Step) -> None:
    """LaneLimitChanged when the learned limit's whole part moved."""
    state = step.state
    if not state.settings.adaptive_lanes:
        return
    estimate = state.lane_limit
    previous = state.lanes_in_use()
    lanes, initial = state.settings.lanes, state.settings.adaptive_lanes_initial
    now_in_use = estimate.lanes_in_use(lanes, initial)
    if now_in_use != previous:
        step.emit(ev.LaneLimitChanged, lanes_in_use=now_in_use, previous=previous,
                  limit=estimate.current(lanes, initial),
                  first_chunk_short_s=None if estimate.short is None else math.exp(estimate.short),
                  first_chunk_long_s=None if estimate.long is None else math.exp(estimate.long))


def _recovered(step: _Step, turn: TurnState) -> None:
    state = step.state
    since = cast(float, state.outage_since)   # ends_outage: there is one
    step.emit(ev.ProviderRecovered, turn_id=turn.turn_id, outage_s=step.now - since,
              failed_probes=state.failed_probes)


def _on_completion(step: _Step, d: ev.CompletionReported) -> None:
    state, now = step.state, step.now
    turn: TurnState | None = state.turns.get(d.turn_id)
    if turn is None or rules.report_refusal(turn.status):
        return
    outcome = d.outcome if d.has("outcome") else ev.OK
    observation = parse_rate_headers(d.rate_limit_headers or {}, now)
    if outcome == ev.OK and deadlines.ends_outage(state, turn):
        _recovered(step, turn)   # a probe that answered without streaming
    step.emit(ev.TurnCompleted, turn_id=turn.turn_id, agent_id=turn.agent_id, lane=turn.lane,
              outcome=outcome, prompt_tokens=int(d.prompt_tokens or 0),
              completion_tokens=int(d.completion_tokens or 0),
              lane_seconds=_held(turn, now), reserved_tokens=turn.reserved_tokens,
              level=turn.level, queued_at=turn.queued_at, granted_at=turn.granted_at)
    if not turn.streams:
        _limit_moved(step)   # a non-streaming call's completion may grow the limit
    if not observation.empty():
        granted_since = (state.granted_total - turn.grant_number - 1,
                         state.reserved_total - turn.granted_mark - turn.reserved_tokens)
        fields = _aged_observation(observation, _held(turn, now), granted_since, state.settings)
        if state.settings.rate_rules and not _is_claim(state, turn):
            fields.update(_hold(state, turn, observation, granted_since, now))
        step.emit(ev.RateObserved, turn_id=turn.turn_id, **fields)
    if outcome == ev.RATE_LIMITED:
        _rate_limited(step, turn, d, observation)
    _after_usage(step, turn.agent_id)


def _is_claim(state: PoolState, turn: TurnState) -> bool:
    """Whether a report on this turn is an agent's claim: the agent completed it itself
    (a gateway turn is completed by the gateway only, with what the provider answered),
    in a pool whose rules treat agents' reports as claims."""
    return state.settings.agent_retry_after_cap_seconds is not None and turn.holder != deadlines.GATEWAY


def _rate_limited(step: _Step, turn: TurnState, d: ev.CompletionReported, observation: RateObservation) -> None:
    """A 429: pause what it concerns. An agent's claim, uncorroborated, pauses that agent
    alone; otherwise the call's model, or the pool if the model is unknown, pauses and its
    AIMD factor is cut."""
    state, now = step.state, step.now
    s = state.settings
    retry_after = d.retry_after_seconds
    if retry_after is None:
        retry_after = observation.retry_after_s
    if retry_after is None:
        retry_after = s.retry_after_default
    retry_after = min(float(retry_after), MAX_RETRY_AFTER_S)
    reporter = None
    if s.agent_retry_after_cap_seconds is not None:
        reporter = deadlines.GATEWAY if turn.holder == deadlines.GATEWAY else turn.agent_id
    if _is_claim(state, turn):
        cap = float(cast(float, s.agent_retry_after_cap_seconds))
        claimed, retry_after = retry_after, min(retry_after, cap)
        if not _corroborated(state, turn, now, cap):
            step.emit(ev.AgentPaused, turn_id=turn.turn_id, agent_id=turn.agent_id,
                      until=max(now + retry_after, state.agent_pauses.get(turn.agent_id, now)),
                      retry_after=retry_after, claimed_retry_after=claimed if claimed > retry_after else None,
                      model=turn.model)
            return
    spread = jitter(turn.turn_id, s.jitter_seconds)
    until = now + float(retry_after) + spread
    model = _model_scope(state, turn)
    if model is not None:
        limits = state.model_limits.get(model)
        if limits is not None and limits.paused_until is not None:
            until = max(until, limits.paused_until)
        factor = min(factor_at(state, now), limiter.model_factor(state, turn, now))
        step.emit(ev.ModelPaused, turn_id=turn.turn_id, model=model, until=until, retry_after=float(retry_after),
                  jitter=spread, rate_factor=max(s.aimd_floor, factor * s.aimd_decrease), reporter=reporter)
        return
    if state.paused_until is not None:
        until = max(until, state.paused_until)
    new_factor = max(s.aimd_floor, factor_at(state, now) * s.aimd_decrease)
    step.emit(ev.PoolPaused, turn_id=turn.turn_id, until=until, retry_after=float(retry_after),
              jitter=spread, rate_factor=new_factor, reporter=reporter)


def _model_scope(state: PoolState, turn: TurnState) -> str | None:
    """The model a 429 or the headers of this turn concern, or None for the whole pool: the
    model unknown, the rule off (a pool recorded before it), or too many models already
    (agents name them: the state stays bounded)."""
    model = turn.model
    if not state.settings.rate_rules or not model:
        return None
    if model in state.model_limits or model in state.holds:
        return model
    tracked = max(len(state.model_limits), len(state.holds))
    return model if tracked < deadlines.MAX_MODEL_ESTIMATORS else None


def _corroborated(state: PoolState, turn: TurnState, now: float, cap: float) -> bool:
    """An agent's 429 is believed when the gateway or another agent reported one within the
    cap, on the same model (or either without one)."""
    return any(at > now - cap and who != turn.agent_id and (model is None or turn.model is None or model == turn.model)
               for at, who, model in state.rate_reports)


def _hold(state: PoolState, turn: TurnState, observation: RateObservation, granted_since: tuple[float, float],
          now: float) -> dict[str, Any]:
    """The provider's remaining budget overrides the pool's model of it until its reset:
    remaining 0 holds the scope's grants until the reset; remaining N lets N more through
    (less what was granted after the observed call) until the reset, or for a window if
    none is given. A token bucket reads a remaining N > 0 through its bucket (apply), and
    its reset is the time to refill the whole bucket (OpenAI's meaning), so a bucket holds
    for no longer than one request takes to refill."""
    s = state.settings
    ends: list[float] = []
    left: dict[str, float | None] = {"requests": None, "tokens": None}
    for kind, since, remaining, reset, limit in (
            ("requests", granted_since[0], observation.remaining_requests, observation.reset_requests_s,
             observation.limit_requests or s.rpm),
            ("tokens", granted_since[1], observation.remaining_tokens, observation.reset_tokens_s,
             observation.limit_tokens or s.tpm)):
        if remaining is None:
            continue
        if remaining < 1:
            if reset is None:
                if not s.windowed:
                    continue
                reset = limiter.span(s)
            if not s.windowed:
                reset = min(reset, 60.0 / max(limit, 1e-9))
            left[kind] = 0.0
            ends.append(now + reset)
        elif s.windowed:
            left[kind] = max(0.0, remaining - max(0.0, since))
            ends.append(now + (reset if reset is not None else limiter.span(s)))
    if not ends or max(ends) <= now:
        return {}
    return {"model": _model_scope(state, turn), "hold_until": max(ends), "hold_requests": left["requests"],
            "hold_tokens": left["tokens"], "hold_as_of": turn.granted_at}


def _aged_observation(observation: RateObservation, age: float, granted_since: tuple[float, float],
                      settings: PoolSettings) -> dict[str, Any]:
    """The provider computed `remaining` when it admitted the call, about when we granted
    it; the report reaches us `age` seconds later. Bring it to now: add what the provider
    refilled since, subtract what we granted since (it admitted those after this one).
    Taken raw, every report from a long call drags our bucket below the provider's real
    level and we under-use the budget we pay for."""
    data = observation.to_dict()
    since = {"requests": max(0.0, granted_since[0]), "tokens": max(0.0, granted_since[1])}
    for kind, limit in (("requests", settings.rpm), ("tokens", settings.tpm)):
        remaining = data.get(f"remaining_{kind}")
        if remaining is None:
            continue
        per_second = (data.get(f"limit_{kind}") or limit) / 60.0
        data[f"observed_remaining_{kind}"] = remaining
        data[f"remaining_{kind}"] = remaining + per_second * max(0.0, age) - since[kind]
    data["age_s"] = max(0.0, age)
    return data


def _on_cancel(step: _Step, d: ev.CancelRequested) -> None:
    turn = step.state.turns.get(d.turn_id)
    if turn is None:
        return
    # A granted turn's lane time is charged like a completion's, or cancelling instead of
    # completing would dodge rule 4 and keep an agent at the top level forever.
    held = step.now - turn.granted_at if turn.status == ev.GRANTED and turn.granted_at is not None else 0.0
    step.emit(ev.TurnCancelled, turn_id=turn.turn_id, agent_id=turn.agent_id,
              reason=d.reason if d.has("reason") else "cancelled", lane=turn.lane, lane_seconds=held)
    if held:
        _after_usage(step, turn.agent_id)


# Each handler takes its own input class: the table can only say "some event" (Any), the
# handler's signature says which.
_INPUT_HANDLERS: dict[str, Callable[[_Step, Any], None]] = {
    ev.AGENT_REGISTERED: _on_registered,
    ev.AGENT_RELEASED: _on_released,
    ev.TURN_REQUESTED: _on_request,
    ev.HEARTBEAT_SENT: _on_heartbeat,
    ev.COMPLETION_REPORTED: _on_completion,
    ev.CANCEL_REQUESTED: _on_cancel,
}


# -- granting -------------------------------------------------------------------------

def _dispatch(step: _Step) -> None:
    state, now = step.state, step.now
    if state.paused_until is not None and now < state.paused_until:
        return
    # The free lanes, lowest first, as free_lanes() lists them, found one at a time from
    # `after` (a list of every free lane per pass would scan all of a big pool's lanes).
    after = 0
    order = ordering.GrantOrder(state)
    passed: set[str] = set()   # held back by a scope of their own for the rest of this pass
    while (lane := _free_lane(state, after)) is not None and deadlines.grants_allowed(state) > 0:
        head = order.next(passed) if passed else order.next()
        if head is None:
            return
        kind, _when = limiter.verdict(state, head, now)
        if kind == limiter.SKIP:
            passed.add(head.turn_id)
            continue
        if kind == limiter.WAIT:
            if _rate_recovered(step, head):
                continue
            return
        after = lane + 1
        lease, deadline, backoff, suspect_at = state.settings.lease_seconds, None, 0, None
        probe = state.outage_since is not None
        if head.holder is not None:
            agent = state.agents.get(head.agent_id)
            backoff = agent.start_misses if agent else 0
            suspect_in = deadlines.suspicion_after(state, head, backoff)
            suspect_at = None if suspect_in is None else now + suspect_in
        elif head.streams:
            agent = state.agents.get(head.agent_id)
            backoff = max(agent.start_misses if agent else 0, deadlines.probe_backoff(state))
            lease = state.start.timeout(head.estimated_tokens, state.settings.start_timeout_floor_seconds, lease,
                                        backoff)
            deadline = True
        step.emit(ev.TurnGranted, turn_id=head.turn_id, agent_id=head.agent_id, lane=lane,
                  level=head.level, lease_expires_at=now + lease, reserved_tokens=head.need_tokens,
                  start_deadline=deadline, start_backoff=backoff or None, probe=True if probe else None,
                  suspect_at=suspect_at,
                  **ordering.grant_fields(state, head))


def _free_lane(state: PoolState, after: int) -> int | None:
    try:
        return state.lanes.index(None, after)
    except ValueError:
        return None


def _rate_recovered(step: _Step, head: TurnState) -> bool:
    """The head does not fit the capacity at the factor of the last decision, but the factor
    has grown since: fold the clock forward (RateRecovered) so admission judges the head by
    today's factor. Without it a pass that decides nothing never moves the factor, and the
    head waits for some unrelated decision. True when the head may now fit."""
    state, now = step.state, step.now
    stale = state.rate_factor
    if limiter.within_capacity(state.settings, head, stale):
        return False   # it fits the capacity; only the refill is missing
    grown = factor_at(state, now)
    if grown <= stale:
        return False
    step.emit(ev.RateRecovered, turn_id=head.turn_id, rate_factor=grown)
    return limiter.fits(state, head, now, state.rate_factor)

"""Counterfactual replay: a recorded workload run again through the pure scheduler core
under other settings, on a virtual clock, without touching the log.

What is taken from the record (the workload) and what is re-decided (the policy):
- Inputs: registrations, releases, turn requests and cancels of the pool, in log order.
  Each enters the simulated scheduler at the moment the real scheduler saw it (the `at`
  of the first decision it caused; its own `data.at` if it caused none), so that a
  replay under the recorded settings takes exactly the real steps. Latency still counts
  from the client's request time (`TurnRequested.data.at`).
- Calls: a turn's call lasts what it lasted in reality, TurnGranted.at -> TurnCompleted.at,
  and ends with the recorded CompletionReported (outcome, tokens, retry-after, headers).
  So when a turn is granted in the counterfactual run, its completion is scheduled at
  grant + recorded duration; while in flight it heartbeats every lease/3.
- A streaming turn (requested with streams) sends its first heartbeat at the recorded
  offset from its grant, its first chunk, so its start deadline is met as it was for real.
- Hung calls (reaped in reality) never complete: they send the heartbeats they really
  sent (at the same offsets from their grant), then fall silent and are reaped by lease.
- Turns whose fate is unknown (still queued or in flight at the end of the log) hold a
  lane once granted and are left out of the metrics.
- Access grants and revocations are inputs too: the policy starts as the fold of those
  before the window, and the later ones enter in log order with the requests, so a request
  the real scheduler refused for access is refused again (app/domain/pool_access.py).
The provider is not modelled: a call that met a 429 in reality meets it again, whatever
the counterfactual's pacing; 429 counts therefore compare pacing only through pauses.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from app.domain import events as ev
from app.domain import pool_access, turn_history
from app.domain.access import AccessPolicy
from app.domain.decide import decide_events, decide_many_events, next_deadline
from app.domain.settings import ORDER_FIELDS, PoolSettings
from app.domain.state import PoolState
from app.stats import percentile

from . import Record

_REPLAYED_INPUTS = (ev.AGENT_REGISTERED, ev.AGENT_RELEASED, ev.TURN_REQUESTED, ev.CANCEL_REQUESTED)
MAX_STEPS = 2_000_000
_ENDS = (ev.TurnCompleted, ev.TurnReaped, ev.TurnCancelled)


@dataclass
class TurnSpec:
    turn_id: str
    agent_id: str
    requested_at: float                     # the client's time: latency counts from here
    duration: float | None = None           # granted -> completed in reality
    completion: dict | None = None          # the recorded CompletionReported data
    reaped: bool = False
    # Recorded heartbeats as (arrival offset from the grant, stamp offset, log position):
    # hung calls keep all, streaming calls the first (their first chunk), others none.
    heartbeat_offsets: list[tuple[float, float, int]] = field(default_factory=list)
    streams: bool = False
    completion_stamp: float | None = None   # the completion report's own `at`, from the grant
    granted_at: float | None = None         # the recorded grant and completion times and the
    completed_at: float | None = None       # completion's log position: ties in the virtual
    completion_position: float = math.inf   # clock break in log order, as they did for real

    @property
    def fate_known(self) -> bool:
        return self.reaped or (self.duration is not None and self.completion is not None)


@dataclass
class Workload:
    pool: str
    settings: PoolSettings
    start: float
    end: float
    first_position: int
    last_position: int
    inputs: list[tuple[float, int, str, dict]]     # (arrival, position, type, data) in log order
    turns: dict[str, TurnSpec]
    actual: list[ev.Decided]                       # recorded decisions about the window's turns
    access_before: list[tuple[str, dict]] = field(default_factory=list)   # grants/revocations before the inputs

    def access_policy(self) -> AccessPolicy:
        """The pool access policy as the window's first input found it."""
        policy = AccessPolicy()
        for type_, data in self.access_before:
            pool_access.fold(policy, type_, data)
        return policy


def extract_workload(records: Iterable[Record], pool: str, first: int = 0, last: int | None = None) -> Workload:
    """The recorded workload of `pool`: turns requested at positions in [first, last]."""
    if first < 0 or (last is not None and last < first):
        raise ValueError(f"positions must satisfy 0 <= from <= to, got from {first} to {last}")
    records = sorted(records, key=lambda r: r.position)
    stream = f"pool-{pool}"
    created_record = next((r for r in records if r.stream == stream and r.type == ev.POOL_CREATED), None)
    if created_record is None:
        raise ValueError(f"pool {pool!r} has no PoolCreated event in the log")
    created = ev.PoolCreated.from_dict(created_record.data)
    last = last if last is not None else (records[-1].position if records else 0)
    # (after its creation, a pool's stream holds its scheduler's decisions)
    decisions = [(r.position, cast(ev.Decided, ev.parse(r.type, r.data))) for r in records
                 if r.stream == stream and r.type != ev.POOL_CREATED]
    seen_at: dict[int, float] = {}
    for _, d in decisions:
        if isinstance(d.cause, int) and d.cause not in seen_at:
            seen_at[d.cause] = d.at

    inputs = [(r.position, ev.parse(r.type, r.data), r.data) for r in records if r.type in ev.INPUTS]
    inputs = [(position, e, data) for position, e, data in inputs if e.pool == pool]  # type: ignore[attr-defined]
    access = [(r.position, r.type, r.data) for r in records if r.type in pool_access.CHANGES]
    # The window's turns: their requests, then every decision and input about them, in log order.
    requested = [(p, e) for p, e, _ in inputs if isinstance(e, ev.TurnRequested) and first <= p <= last]
    others = [(p, e) for p, e in decisions] + [(p, e) for p, e, _ in inputs if not isinstance(e, ev.TurnRequested)]
    histories = turn_history.histories(sorted(requested + others, key=lambda pe: pe[0]))
    turns = {turn_id: _spec(h, seen_at) for turn_id, h in histories.items()}

    start = created.at if first <= created_record.position else None
    replayed: list[tuple[float, int, str, dict]] = []
    clock = -math.inf
    for position, e, data in inputs:
        if e.TYPE not in _REPLAYED_INPUTS:
            continue
        in_window = first <= position <= last
        if isinstance(e, ev.AgentRegistered) and position <= last:
            pass                                  # agents registered before the window still exist
        elif isinstance(e, ev.CancelRequested) and e.turn_id in turns:
            pass                                  # a window turn's cancel, wherever it lies
        elif not in_window:
            continue
        arrival = seen_at.get(position, 0.0 if e.at is None else e.at)  # type: ignore[attr-defined]  # each has one
        clock = max(clock, arrival)               # inputs keep their log order
        spec = turns.get(e.turn_id) if isinstance(e, ev.TurnRequested) else None
        if spec is not None and spec.streams and not spec.fate_known and not spec.heartbeat_offsets:
            # Still in flight at the end of the log with no first chunk: when it would have
            # started is unknown, so it is replayed as a plain lease (no start deadline, no
            # invented sample for the estimator).
            data = {**data, "streams": False}
            spec.streams = False
        replayed.append((clock, position, e.TYPE, data))
    if start is None:
        start = min((a for a, _, t, _ in replayed if t != ev.AGENT_REGISTERED), default=created.at)
        replayed = [(max(a, start), p, t, d) for a, p, t, d in replayed]
    # Access changes after the first replayed input go in among the inputs, at the time of
    # the input before them (so the heap keeps their log order); earlier ones seed the policy.
    first_input = replayed[0][1] if replayed else math.inf
    access_before = [(t, d) for p, t, d in access if p < first_input]
    timed = replayed[:]
    for position, type_, data in access:
        if position > first_input:
            before = [a for a, p, _, _ in replayed if p < position]
            timed.append((max(before) if before else start, position, type_, data))
    replayed = sorted(timed, key=lambda r: r[1])
    actual = [d for _, d in decisions if getattr(d, "turn_id", None) in turns]
    end = max([d.at for d in actual] + [start])
    return Workload(pool, PoolSettings.from_dict(created.settings), start, end,
                    first, last, replayed, turns, actual, access_before)


def _spec(h: turn_history.TurnHistory, seen_at: dict[int, float]) -> TurnSpec:
    """What the replay takes from a turn's recorded history."""
    # (a window turn was requested; the log's fold sets the times of each step it took)
    spec = TurnSpec(h.turn_id, h.agent_id, cast(float, h.requested_at), streams=h.streams, granted_at=h.granted_at,
                    reaped=h.status == ev.REAPED)
    granted = h.granted_at
    if h.status == ev.COMPLETED and granted is not None:
        finished = cast(float, h.finished_at)   # a completed turn's
        spec.duration, spec.completed_at = finished - granted, finished
    if h.report is not None:
        spec.completion = {k: v for k, v in h.report.to_dict().items() if k != "at"}
        spec.completion_position = cast(int, h.report_position)
        if granted is not None:
            spec.completion_stamp = cast(float, h.report.at) - granted
    if granted is not None:
        for logged_at, beat in h.heartbeats:
            position, stamp = cast(int, logged_at), cast(float, beat.at)
            offset = seen_at.get(position, stamp) - granted
            if offset >= 0:
                # Keep the stamp too: an input stamped before a deadline wins over it even
                # when the scheduler gets to it after the deadline (decide._in_time).
                spec.heartbeat_offsets.append((offset, stamp - granted, position))
    if spec.reaped:
        spec.duration, spec.completion = None, None
    else:
        spec.heartbeat_offsets = spec.heartbeat_offsets[:1] if spec.streams else []
    return spec


# -- settings ---------------------------------------------------------------------------

def counterfactual_settings(recorded: PoolSettings, *, lanes: int | None = None, policy: str | None = None,
                            lease_seconds: float | None = None, levels: int | None = None,
                            boost_seconds: float | None = None,
                            allotment_seconds: tuple[float, ...] | None = None,
                            **order: float | tuple[float, ...] | None) -> PoolSettings:
    """The recorded settings with some changed. `order` takes the deadline order's settings
    (class_slack_seconds, run_slack_per_service, run_slack_cap_seconds, size_slack_per_ktoken,
    size_slack_cap_seconds, run_forget_seconds, output credit and agent backlog slack); they
    apply under policy "deadline"."""
    unknown = set(order) - set(ORDER_FIELDS)
    if unknown:
        raise ValueError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    changes: dict = {}
    for key, value in (("lanes", lanes), ("policy", policy), ("lease_seconds", lease_seconds),
                       ("levels", levels), ("boost_seconds", boost_seconds),
                       ("allotment_seconds", allotment_seconds), *order.items()):
        if value is not None:
            changes[key] = value
    if changes.get("policy") == "fifo":
        changes["levels"] = 1                     # FIFO is MLFQ with one level: no demotion, no priority
    return dataclasses.replace(recorded, **changes).validate()


# -- the virtual-clock run ----------------------------------------------------------------

@dataclass
class SimRun:
    decisions: list[ev.Decided]
    end: float
    steps: int
    complete: bool                                # every turn of known fate finished


def simulate(w: Workload, settings: PoolSettings, max_steps: int = MAX_STEPS) -> SimRun:
    state = PoolState.new(settings, w.start)
    access = w.access_policy()
    heap: list[tuple[float, float, int, str, Any]] = []   # the payload's shape is the kind's
    order = itertools.count()

    def push(at: float, kind: str, payload, key: float = math.inf) -> None:
        # (time, log position, sequence): simultaneous events run in log order
        heapq.heappush(heap, (at, key, next(order), kind, payload))

    for arrival, position, type_, data in w.inputs:
        push(arrival, "input", (type_, data), position)
    waiting = {t for t, spec in w.turns.items() if spec.fate_known}
    horizon = w.end + max(600.0, 10.0 * (w.end - w.start))
    out: list[ev.Decided] = []
    now, steps = w.start, 0
    beat = settings.lease_seconds / 3.0

    def in_flight(turn_id: str) -> bool:
        turn = state.turns.get(turn_id)
        return turn is not None and turn.status == ev.GRANTED

    while waiting and steps < max_steps:
        steps += 1
        t_heap = heap[0][0] if heap else math.inf
        deadline = next_deadline(state, now)
        t_timer = math.inf if deadline is None else deadline
        t = min(t_heap, t_timer)
        if math.isinf(t) or t > horizon:
            break
        now = max(now, t)
        decided: list[ev.Decided] = []
        if t_heap <= t_timer:
            # Everything due at this instant is answered in one pass, as the real scheduler
            # answers the inputs it finds together (one decide_many: granting runs once after
            # all of them, so a completion in the batch frees its lane for a request that came
            # before it in the log). The heap yields them in log order.
            batch: list[tuple[str, dict, int | None]] = []
            while heap and heap[0][0] == t:
                _, key, _, kind, payload = heapq.heappop(heap)
                cause = int(key) if math.isfinite(key) else None
                if kind == "input":
                    batch.append((payload[0], payload[1], cause))
                elif kind == "complete":
                    turn_id, data = payload
                    if in_flight(turn_id):
                        batch.append((ev.COMPLETION_REPORTED, data, cause))
                elif kind == "heartbeat":
                    turn_id, periodic, stamped = payload
                    if in_flight(turn_id):
                        turn = state.turns[turn_id]
                        batch.append((ev.HEARTBEAT_SENT, {"turn_id": turn_id, "agent_id": turn.agent_id,
                                                          "pool": w.pool, "at": min(stamped, now)}, cause))
                        if periodic:
                            push(now + beat, "heartbeat", (turn_id, True, now + beat))
            if batch:
                decided = decide_many_events(state, batch, now, access)
        else:
            decided = decide_events(state, None, None, now)
        for d in decided:
            out.append(d)
            if isinstance(d, ev.TurnGranted):
                _schedule_call(w.turns.get(d.turn_id), d.at, beat, push)
            elif isinstance(d, _ENDS):
                waiting.discard(d.turn_id)
    return SimRun(out, now, steps, not waiting)


def _schedule_call(spec: TurnSpec | None, granted_at: float, beat: float, push) -> None:
    if spec is None:
        return

    def recorded_beat(arrival: float, stamp: float, position: int, periodic: bool) -> None:
        push(granted_at + arrival, "heartbeat", (spec.turn_id, periodic, granted_at + stamp), position)

    if spec.reaped:
        for arrival, stamp, position in spec.heartbeat_offsets:
            recorded_beat(arrival, stamp, position, False)
        return
    if spec.fate_known:
        # At the recorded grant time, use the recorded completion time itself: g + (c - g)
        # need not round back to c, and a one-ulp shift can reorder simultaneous events.
        # (a known fate: a recorded duration and completion)
        done = cast(float, spec.completed_at if granted_at == spec.granted_at
                    else granted_at + cast(float, spec.duration))
        data = dict(cast(dict, spec.completion))
        if spec.completion_stamp is not None:
            data["at"] = min(done, granted_at + spec.completion_stamp)
        push(done, "complete", (spec.turn_id, data), spec.completion_position)
    first = 0.0
    if spec.heartbeat_offsets:                   # a streaming call: its first chunk, then every beat
        first, stamp, position = spec.heartbeat_offsets[0]
        recorded_beat(first, stamp, position, False)
    push(granted_at + first + beat, "heartbeat", (spec.turn_id, True, granted_at + first + beat))


# -- metrics, the same for the record and the counterfactual ----------------------------

@dataclass
class RunMetrics:
    turns: int = 0
    finished: int = 0
    completed_ok: int = 0
    rate_limited: int = 0
    errors: int = 0
    reaped: int = 0
    cancelled: int = 0
    unfinished: int = 0
    latency_p50: float | None = None
    latency_p90: float | None = None
    latency_p99: float | None = None
    latency_max: float | None = None
    lane_seconds: float = 0.0
    productive_lane_seconds: float = 0.0
    lane_waste: float | None = None
    throughput_per_minute: float | None = None
    span_seconds: float = 0.0




def grants(turns: dict[str, TurnSpec], decisions: Iterable[ev.Decided]) -> list[tuple[str, int]]:
    return [(d.turn_id, d.lane) for d in decisions if isinstance(d, ev.TurnGranted) and d.turn_id in turns]


def measure(turns: dict[str, TurnSpec], decisions: Iterable[ev.Decided]) -> RunMetrics:
    """Latency is request -> finish (completed with any outcome, or reaped); lane waste is
    the share of held lane-seconds that did not end in an OK completion; throughput is OK
    completions per minute from the first request to the last finish."""
    granted: dict[str, float] = {}
    finish: dict[str, tuple[str, float, str | None]] = {}
    last_at = max((s.requested_at for s in turns.values()), default=0.0)
    for d in decisions:
        turn_id = getattr(d, "turn_id", None)
        if turn_id not in turns:
            continue
        last_at = max(last_at, d.at)
        if isinstance(d, ev.TurnGranted):
            granted[turn_id] = d.at
        elif isinstance(d, _ENDS) and turn_id not in finish:
            finish[turn_id] = (d.TYPE, d.at, getattr(d, "outcome", None))
    m = RunMetrics(turns=len(turns))
    latencies = []
    for turn_id, spec in turns.items():
        held_from = granted.get(turn_id)
        if turn_id not in finish:
            m.unfinished += 1
            if held_from is not None:
                m.lane_seconds += last_at - held_from
            continue
        type_, at, outcome = finish[turn_id]
        hold = at - held_from if held_from is not None else 0.0
        m.lane_seconds += hold
        if type_ == ev.TURN_CANCELLED:
            m.cancelled += 1
            continue
        m.finished += 1
        latencies.append(at - spec.requested_at)
        if type_ == ev.TURN_REAPED:
            m.reaped += 1
        elif outcome == ev.OK:
            m.completed_ok += 1
            m.productive_lane_seconds += hold
        elif outcome == ev.RATE_LIMITED:
            m.rate_limited += 1
        else:
            m.errors += 1
    m.latency_p50, m.latency_p90 = percentile(latencies, 50), percentile(latencies, 90)
    m.latency_p99, m.latency_max = percentile(latencies, 99), (max(latencies) if latencies else None)
    if m.lane_seconds > 0:
        m.lane_waste = 1.0 - m.productive_lane_seconds / m.lane_seconds
    first = min((s.requested_at for s in turns.values()), default=0.0)
    m.span_seconds = max(0.0, last_at - first)
    if m.span_seconds > 0:
        m.throughput_per_minute = m.completed_ok * 60.0 / m.span_seconds
    return m


@dataclass
class WhatIfReport:
    pool: str
    from_position: int
    to_position: int
    recorded_settings: PoolSettings
    settings: PoolSettings
    actual: RunMetrics
    whatif: RunMetrics
    grants_compared: int                 # grants of turns whose durations are known
    same_grant_order: bool               # ... same order and same lanes as recorded
    first_divergence: str | None
    simulation_complete: bool
    actual_grants: list[tuple[str, int]]
    whatif_grants: list[tuple[str, int]]


def what_if(w: Workload, settings: PoolSettings) -> WhatIfReport:
    run = simulate(w, settings)
    known = {t: s for t, s in w.turns.items() if s.duration is not None}
    real, sim = grants(w.turns, w.actual), grants(w.turns, run.decisions)
    real_known, sim_known = [g for g in real if g[0] in known], [g for g in sim if g[0] in known]
    divergence = None
    for i, (a, b) in enumerate(itertools.zip_longest(real_known, sim_known)):
        if a != b:
            divergence = (f"grant #{i + 1}: recorded {a[0][:8] + ' on lane ' + str(a[1]) if a else 'nothing'}, "
                          f"counterfactual {b[0][:8] + ' on lane ' + str(b[1]) if b else 'nothing'}")
            break
    return WhatIfReport(w.pool, w.first_position, w.last_position, w.settings, settings,
                        measure(w.turns, w.actual), measure(w.turns, run.decisions), len(real_known),
                        divergence is None, divergence, run.complete, real, sim)


def report_dict(r: WhatIfReport) -> dict:
    return {"pool": r.pool, "from_position": r.from_position, "to_position": r.to_position,
            "recorded_settings": r.recorded_settings.to_dict(), "settings": r.settings.to_dict(),
            "actual": dataclasses.asdict(r.actual), "whatif": dataclasses.asdict(r.whatif),
            "grants_compared": r.grants_compared, "same_grant_order": r.same_grant_order,
            "first_divergence": r.first_divergence, "simulation_complete": r.simulation_complete}

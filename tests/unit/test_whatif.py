"""Counterfactual replay on logs recorded by a closed-loop fleet driven through the pure core."""
from __future__ import annotations

import heapq
import itertools
import math

import pytest

from app.audit.whatif import counterfactual_settings, extract_workload, measure, percentile, simulate, what_if
from app.domain import events as ev
from app.domain.decide import next_deadline
from tests.unit.test_audit_verify import Log

# agent -> (priority class, [(call seconds or None for a hung call, outcome)], think seconds)
FLEET = {
    "i1": (ev.INTERACTIVE, [(1.0, ev.OK), (0.5, ev.OK), (2.0, ev.OK), (0.7, ev.OK)], 0.3),
    "i2": (ev.INTERACTIVE, [(0.8, ev.OK), (None, None), (1.2, ev.OK), (0.4, ev.OK)], 0.2),
    "b1": (ev.BATCH, [(6.0, ev.OK), (5.0, ev.RATE_LIMITED), (6.0, ev.OK), (7.0, ev.OK)], 0.0),
    "b2": (ev.BATCH, [(4.0, ev.OK), (8.0, ev.OK), (3.0, ev.ERROR), (5.0, ev.OK)], 0.1),
}


def record_fleet(fleet=FLEET, **settings) -> Log:
    """Each agent requests, calls for its scripted time after the grant, completes, thinks,
    requests again; a hung call never completes. Timers fire at their deadlines."""
    log = Log(at=0.0, **{"lanes": 2, "lease_seconds": 3.0, "allotment_seconds": (4.0, 12.0, math.inf),
                        **settings})
    clock = itertools.count()
    actions: list = []
    script = {a: list(calls) for a, (_, calls, _) in fleet.items()}
    current: dict[str, str] = {}

    def later(at, fn):
        heapq.heappush(actions, (at, next(clock), fn))

    def ask(agent, at):
        if not script[agent]:
            return
        turn_id = f"{agent}-{len(fleet[agent][1]) - len(script[agent])}"
        current[turn_id] = agent
        later(at, lambda now: log.request(turn_id, agent, now, est=500, out=200))

    def beat(turn_id, now):
        turn = log.state.turns.get(turn_id)
        return log.heartbeat(turn_id, now) if turn is not None and turn.status == ev.GRANTED else []

    for n, agent in enumerate(fleet):
        later(0.0, lambda now, a=agent, c=fleet[agent][0]: log.register(a, now, c))
        ask(agent, 0.1 + n * 0.01)
    now, steps = 0.0, 0
    while (actions or log.state.turns) and steps < 10_000:
        steps += 1
        deadline = next_deadline(log.state, now) if log.state.turns else None
        t_action = actions[0][0] if actions else math.inf
        if deadline is not None and deadline < t_action:
            now, decided = deadline, log.tick(deadline)
        else:
            now, _, fn = heapq.heappop(actions)
            decided = fn(now)
        for type_, d in decided:
            agent = current.get(d.get("turn_id"))
            if agent is None:
                continue
            if type_ == ev.TURN_GRANTED:
                seconds, outcome = script[agent].pop(0)
                if seconds is not None:
                    later(d["at"] + seconds, lambda t, tid=d["turn_id"], o=outcome: log.complete(tid, t, o))
                    for k in range(1, int(seconds / 1.0) + 1):   # a live call heartbeats every second
                        later(d["at"] + k * 1.0, lambda t, tid=d["turn_id"]: beat(tid, t))
            elif type_ in (ev.TURN_COMPLETED, ev.TURN_REAPED):
                ask(agent, d["at"] + fleet[agent][2])
    return log


def test_replay_under_the_recorded_settings_reproduces_the_run():
    log = record_fleet()
    w = extract_workload(log.records, "p")
    assert len(w.turns) == 16 and sum(s.reaped for s in w.turns.values()) == 1
    report = what_if(w, w.settings)
    assert report.simulation_complete
    assert report.grants_compared == 15 and report.same_grant_order, report.first_divergence
    assert report.actual_grants == report.whatif_grants
    a, s = report.actual, report.whatif
    assert (a.completed_ok, a.reaped, a.rate_limited, a.errors) == (13, 1, 1, 1)
    assert (s.completed_ok, s.reaped, s.rate_limited, s.errors) == (13, 1, 1, 1)
    assert s.latency_p50 == pytest.approx(a.latency_p50) and s.latency_max == pytest.approx(a.latency_max)
    assert s.lane_waste == pytest.approx(a.lane_waste)


def test_fewer_lanes_raise_latency_and_more_lanes_lower_it():
    w = extract_workload(record_fleet().records, "p")
    base = what_if(w, w.settings).actual
    one = what_if(w, counterfactual_settings(w.settings, lanes=1)).whatif
    four = what_if(w, counterfactual_settings(w.settings, lanes=4)).whatif
    assert one.latency_p90 > base.latency_p90 > four.latency_p90
    assert one.completed_ok == four.completed_ok == base.completed_ok


def test_fifo_lets_batch_calls_block_interactive_ones():
    w = extract_workload(record_fleet().records, "p")
    fifo = what_if(w, counterfactual_settings(w.settings, policy="fifo"))
    assert fifo.settings.levels == 1 and not fifo.same_grant_order

    def interactive_p90(report_decisions):
        turns = {t: s for t, s in w.turns.items() if t.startswith("i")}
        return measure(turns, report_decisions).latency_p90
    assert interactive_p90(simulate(w, fifo.settings).decisions) > interactive_p90(w.actual)


def test_a_shorter_lease_reaps_the_hung_call_sooner_and_wastes_less():
    w = extract_workload(record_fleet().records, "p")
    longer = what_if(w, counterfactual_settings(w.settings, lease_seconds=20.0)).whatif
    assert longer.reaped == 1 and longer.lane_waste > what_if(w, w.settings).actual.lane_waste


def test_a_window_keeps_only_turns_requested_inside_it():
    log = record_fleet()
    requests = [r for r in log.records if r.type == ev.TURN_REQUESTED]
    middle = requests[len(requests) // 2].position
    w = extract_workload(log.records, "p", first=middle)
    assert set(w.turns) == {r.data["turn_id"] for r in requests if r.position >= middle}
    # agents registered before the window are still admitted, at the window's start
    assert {d["agent_id"] for _, _, t, d in w.inputs if t == ev.AGENT_REGISTERED} == set(FLEET)
    report = what_if(w, w.settings)
    assert report.whatif.turns == len(w.turns) and report.simulation_complete


def test_percentile_interpolates_like_numpy():
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0


def test_unknown_pool_is_an_error():
    with pytest.raises(ValueError):
        extract_workload(record_fleet().records, "nope")


def _deadline_order_holds(decisions, settings) -> None:
    from tests.unit.workload import Ledger
    ledger = Ledger(settings)
    for d in decisions:
        ledger.fold(d.TYPE, d.to_dict())   # raises on a grant out of deadline order


def test_what_if_compares_the_recorded_mlfq_with_the_deadline_order():
    w = extract_workload(record_fleet().records, "p")
    assert w.settings.policy == "mlfq"
    settings = counterfactual_settings(w.settings, policy="deadline", class_slack_seconds=(0.0, 30.0, 60.0))
    report = what_if(w, settings)
    assert report.simulation_complete and not report.same_grant_order
    assert report.whatif.completed_ok == report.actual.completed_ok == 13
    run = simulate(w, settings)
    grants = [d for d in run.decisions if isinstance(d, ev.TurnGranted)]
    assert grants and all(g.order_deadline is not None for g in grants)
    assert not any(isinstance(d, (ev.AgentDemoted, ev.TurnPromoted)) for d in run.decisions)
    _deadline_order_holds(run.decisions, settings)
    # With a batch slack this large, interactive calls never wait behind a batch call queued
    # after them: their latency is no worse than under the recorded MLFQ (which demotes them).
    interactive = {t: s for t, s in w.turns.items() if t.startswith("i")}
    assert measure(interactive, run.decisions).latency_max <= measure(interactive, w.actual).latency_max


def test_a_log_recorded_under_the_deadline_order_replays_exactly_and_compares_with_mlfq():
    log = record_fleet(policy="deadline", class_slack_seconds=(0.0, 2.0, 4.0), run_slack_per_service=1.0)
    w = extract_workload(log.records, "p")
    assert w.settings == log.settings
    same = what_if(w, w.settings)
    assert same.simulation_complete and same.same_grant_order, same.first_divergence
    mlfq = what_if(w, counterfactual_settings(w.settings, policy="mlfq"))
    assert mlfq.simulation_complete and mlfq.settings.policy == "mlfq"
    assert all(g.order_deadline is None for g in simulate(w, mlfq.settings).decisions
               if isinstance(g, ev.TurnGranted))


def test_an_unknown_order_setting_is_refused():
    w = extract_workload(record_fleet().records, "p")
    with pytest.raises(ValueError, match="unknown setting"):
        counterfactual_settings(w.settings, class_slack=(0.0, 1.0, 2.0))
    with pytest.raises(ValueError, match="classSlackSeconds"):
        counterfactual_settings(w.settings, policy="deadline", class_slack_seconds=(0.0, 1.0))


def test_replay_folds_the_access_policy_in_log_order_with_the_requests():
    """A request the real scheduler refused for pool access is refused again in the replay,
    and one granted before a revocation is granted again: grants and revocations are inputs
    the replay folds in log order (a pool grant before the window counts from the start)."""
    from app.domain import pool_access
    from app.domain import resource_events as rev
    from app.domain.access import AccessPolicy
    from app.domain.decide import decide_many

    log, policy = Log(lanes=2, lease_seconds=30.0), AccessPolicy()

    def access(type_, **data):
        record = log.append(f"access-{data.get('agent_id', 'x')}", type_, {**data, "at": 1000.0})
        pool_access.fold(policy, type_, record.data)

    def request(turn_id, agent_id, now):
        data = {"turn_id": turn_id, "agent_id": agent_id, "pool": "p", "at": now,
                "estimated_tokens": 10, "max_output_tokens": 10}
        record = log.append(f"turn-{turn_id}", ev.TURN_REQUESTED, data)
        log._decisions(decide_many(log.state, [(ev.TURN_REQUESTED, data, record.position)], now, policy))

    access(rev.ACCESS_GRANTED, grant_id="g1", agent_id="a", pattern="pool:p", modes=["SHARED"])
    log.register("a", 1000.0)
    log.register("b", 1000.0)
    request("t1", "a", 1001.0)          # allowed by g1
    request("t2", "b", 1002.0)          # b holds no grant: refused
    access(rev.ACCESS_REVOKED, grant_id="g1")
    request("t3", "a", 1003.0)          # behind the revocation: refused
    log.complete("t1", 1004.0)          # the replay runs until every turn of known fate ends
    recorded = {d["turn_id"]: t for t, d in ((r.type, r.data) for r in log.records)
                if t in (ev.TURN_GRANTED, ev.TURN_CANCELLED)}
    assert recorded == {"t1": ev.TURN_GRANTED, "t2": ev.TURN_CANCELLED, "t3": ev.TURN_CANCELLED}

    w = extract_workload(log.records, "p")
    replayed = {d.turn_id: d for d in simulate(w, w.settings).decisions
                if isinstance(d, (ev.TurnGranted, ev.TurnCancelled))}
    assert {t: type(d) for t, d in replayed.items()} == \
        {"t1": ev.TurnGranted, "t2": ev.TurnCancelled, "t3": ev.TurnCancelled}
    assert all(pool_access.is_refused_reason(replayed[t].reason) for t in ("t2", "t3"))

"""Policy "deadline" (app/domain/ordering.py): grants by the earliest virtual deadline
(queued_at + class slack + run slack + size slack). Properties over random batched
workloads checked by the independent ledger (order, no double grant, lanes within capacity,
each run's attained service), replay equal to live, a bound on waiting under sustained load,
and worked examples of each term."""
from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings

from app.domain import events as ev
from app.domain import ordering
from app.domain.apply import apply, new_pool
from app.domain.decide import decide_many
from app.domain.ordering import max_slack
from app.domain.settings import PoolSettings
from app.domain.state import PoolState

from .examples import examples
from .test_starvation import CALL_S, DEPTH, LANES, Hog
from .workload import DEADLINE_SETTINGS, Ledger, drive, start, to_inputs, workload


@settings(max_examples=examples(150), deadline=None)
@given(workload)
def test_every_grant_is_the_earliest_deadline_and_the_stored_log_rebuilds_the_state(batches):
    run = start(DEADLINE_SETTINGS)
    ledger = Ledger(DEADLINE_SETTINGS)
    for type_, data in run.log:
        ledger.fold(type_, data)
    for wait, actions in batches:
        for type_, data in run.step(run.now + wait, to_inputs(run, actions)):
            ledger.fold(type_, data)     # order, lanes, lifecycles, no demotion or promotion
        ledger.matches(run.state)        # ... and each run's service, after every batch
    shadow = new_pool(run.created)
    for type_, data in json.loads(json.dumps(run.log, allow_nan=False)):
        apply(shadow, type_, data)
    assert shadow.canonical_json() == run.state.canonical_json()


@settings(max_examples=examples(60), deadline=None)
@given(workload, workload)
def test_a_reloaded_state_orders_exactly_as_the_original(first, then):
    run = drive(first, DEADLINE_SETTINGS)
    reloaded = PoolState.from_dict(json.loads(json.dumps(run.state.to_dict(), allow_nan=False)))
    assert reloaded.canonical_json() == run.state.canonical_json()
    twin = drive([], DEADLINE_SETTINGS)
    twin.state, twin.issued, twin.now, twin.position = reloaded, list(run.issued), run.now, run.position
    mark_run, mark_twin = len(run.log), len(twin.log)
    for wait, actions in then:
        twin.step(twin.now + wait, to_inputs(twin, actions))
        run.step(run.now + wait, to_inputs(run, actions))
    assert json.dumps(twin.log[mark_twin:]) == json.dumps(run.log[mark_run:])


# -- nothing starves --------------------------------------------------------------------

def test_a_background_turn_of_a_long_run_waits_at_most_its_capped_slack_plus_the_work_ahead():
    """Sixteen interactive agents keep every lane busy and DEPTH turns queued at all times;
    a background turn whose run has already held lanes arrives. Its slack is the background
    class's plus the run's, capped (uncapped it would be 100 s per lane-second); every hog
    turn queued after its deadline comes after it, so it waits at most that slack, then the
    DEPTH turns queued before its deadline, then one call to free a lane. The backlog slack's
    cap counts in the bound (max_slack), though the background agent, one turn at a time,
    gets none of it."""
    hog = Hog(policy="deadline", class_slack_seconds=(0.0, 6.0, 12.0), run_slack_per_service=100.0,
              run_slack_cap_seconds=30.0, agent_backlog_slack_seconds=2.0, agent_backlog_slack_cap_seconds=10.0)
    hog.run_until(20.0)
    request = hog.request("bg.0", "bg")
    hog.run_until(60.0, [(request[0], {**request[1], "run_id": "job"})])
    assert "bg.0" in hog.granted_at
    assert hog.state.runs["job"].service_s == CALL_S      # completed: the run is charged
    arrival = hog.now
    request = hog.request("bg.1", "bg")
    hog.run_until(arrival + 400.0, [(request[0], {**request[1], "run_id": "job"})])
    assert "bg.1" in hog.granted_at, "the background turn starved"
    slack = 12.0 + 30.0
    assert max_slack(hog.state) == slack + 10.0
    waited = hog.granted_at["bg.1"] - arrival
    bound = max_slack(hog.state) + (DEPTH / LANES + 1) * CALL_S
    assert slack - CALL_S <= waited <= bound, f"waited {waited:.1f} s, bound {bound:.1f}"
    assert all(lane is not None for lane in hog.state.lanes)   # the hog saturated the pool
    assert hog.spins == 0


# -- worked examples ----------------------------------------------------------------------

def pool(**settings) -> PoolState:
    """A one-lane pool for worked examples: each shows one term, so the backlog slack (per
    agent, shown in test_agent_fairness.py) is off unless an example turns it on."""
    s = PoolSettings(**{"lanes": 1, "rpm": 600, "tpm": 100_000, "lease_seconds": 60.0,
                        "class_slack_seconds": (0.0, 10.0, 20.0), "agent_backlog_slack_seconds": 0.0, **settings})
    state = new_pool({"settings": s.to_dict(), "at": 0.0})
    agents = [("i", ev.INTERACTIVE), ("j", ev.INTERACTIVE), ("b", ev.BATCH), ("g", ev.BACKGROUND)]
    decide_many(state, [(ev.AGENT_REGISTERED, {"agent_id": a, "name": a, "priority_class": c}, None)
                        for a, c in agents], 0.0)
    return state


def request(turn_id, agent_id, at, est=100, out=0, run=None):
    data = {"turn_id": turn_id, "agent_id": agent_id, "estimated_tokens": est, "max_output_tokens": out,
            "at": at}
    if run is not None:
        data["run_id"] = run
    return ev.TURN_REQUESTED, data, None


def complete(turn_id):
    return ev.COMPLETION_REPORTED, {"turn_id": turn_id, "outcome": ev.OK, "prompt_tokens": 1,
                                    "completion_tokens": 1}, None


def granted(out) -> list[str]:
    return [d["turn_id"] for t, d in out if t == ev.TURN_GRANTED]


def test_interactive_goes_ahead_of_batch_by_the_class_slack_and_no_further():
    state = pool()
    assert granted(decide_many(state, [request("hold", "i", 0.0)], 0.0)) == ["hold"]
    decide_many(state, [request("batch", "b", 1.0)], 1.0)          # deadline 11
    decide_many(state, [request("chat", "i", 5.0)], 5.0)           # deadline 5
    decide_many(state, [request("late", "j", 12.0)], 12.0)         # deadline 12
    out = decide_many(state, [complete("hold")], 13.0)
    assert granted(out) == ["chat"]
    assert [d["order_deadline"] for t, d in out if t == ev.TURN_GRANTED] == [5.0]
    assert granted(decide_many(state, [complete("chat")], 14.0)) == ["batch"]   # 11 < 12
    assert granted(decide_many(state, [complete("batch")], 15.0)) == ["late"]
    assert not any(t in (ev.AGENT_DEMOTED, ev.TURN_PROMOTED) for t, _ in
                   decide_many(state, [], 500.0))


def test_a_short_run_overtakes_a_long_one_by_its_attained_service():
    state = pool(class_slack_seconds=(0.0, 0.0, 0.0), run_slack_per_service=2.0, run_slack_cap_seconds=25.0)
    decide_many(state, [request("long.1", "i", 0.0, run="long")], 0.0)
    decide_many(state, [complete("long.1")], 8.0)                   # the long run has used 8 s
    assert state.runs["long"].service_s == 8.0
    decide_many(state, [request("hold", "j", 8.0)], 8.0)
    decide_many(state, [request("long.2", "i", 9.0, run="long")], 9.0)   # 9 + min(25, 16) = 25
    decide_many(state, [request("short.1", "j", 20.0, run="short")], 20.0)   # 20 + 0
    out = decide_many(state, [complete("hold")], 21.0)
    assert granted(out) == ["short.1"]
    assert [d["run_service_s"] for t, d in out if t == ev.TURN_GRANTED] == [0.0]
    out = decide_many(state, [complete("short.1")], 22.0)
    assert granted(out) == ["long.2"]
    assert [(d["order_deadline"], d["run_service_s"]) for t, d in out if t == ev.TURN_GRANTED] == [(25.0, 8.0)]


def test_the_run_slack_is_capped_so_a_long_run_is_never_starved():
    state = pool(class_slack_seconds=(0.0, 0.0, 0.0), run_slack_per_service=100.0, run_slack_cap_seconds=5.0)
    decide_many(state, [request("long.1", "i", 0.0, run="long")], 0.0)
    decide_many(state, [complete("long.1")], 50.0)                  # 5000 s of slack uncapped
    decide_many(state, [request("hold", "j", 50.0)], 50.0)
    decide_many(state, [request("long.2", "i", 51.0, run="long")], 51.0)   # 51 + 5 = 56
    decide_many(state, [request("new", "j", 57.0, run="new")], 57.0)     # 57
    assert granted(decide_many(state, [complete("hold")], 58.0)) == ["long.2"]


def test_a_smaller_reservation_goes_first_within_the_size_cap():
    state = pool(class_slack_seconds=(0.0, 0.0, 0.0), size_slack_per_ktoken=1.0, size_slack_cap_seconds=4.0)
    decide_many(state, [request("hold", "i", 0.0)], 0.0)
    decide_many(state, [request("big", "i", 1.0, est=9_000, out=1_000)], 1.0)   # 1 + min(4, 10) = 5
    decide_many(state, [request("small", "j", 2.0, est=500, out=500)], 2.0)     # 2 + 1 = 3
    decide_many(state, [request("later", "j", 4.5, est=500, out=500)], 4.5)     # 4.5 + 1 = 5.5
    assert granted(decide_many(state, [complete("hold")], 6.0)) == ["small"]
    assert granted(decide_many(state, [complete("small")], 7.0)) == ["big"]


def test_an_idle_run_is_forgotten_at_a_boost_and_a_live_one_is_kept():
    state = pool(run_slack_per_service=1.0, run_forget_seconds=100.0, boost_seconds=60.0)
    decide_many(state, [request("a.1", "i", 0.0, run="a")], 0.0)
    decide_many(state, [complete("a.1"), request("b.1", "j", 10.0, run="b")], 10.0)  # b.1 queued behind nothing
    decide_many(state, [request("b.2", "j", 11.0, run="b")], 11.0)
    assert set(state.runs) == {"a", "b"} and state.runs["b"].live == 2   # one granted, one queued
    decide_many(state, [], 130.0)                                   # boosts at 60 and 120
    assert set(state.runs) == {"b"}                                 # a: idle since 10; b: live


def test_a_run_idle_for_exactly_the_forget_period_is_forgotten_at_that_boost():
    state = pool(run_slack_per_service=1.0, run_forget_seconds=100.0, boost_seconds=55.0)
    decide_many(state, [request("a.1", "i", 0.0, run="a")], 0.0)
    decide_many(state, [complete("a.1")], 10.0)                      # a idle from 10
    decide_many(state, [], 55.0)                                      # a boost, 45 s idle: kept
    assert set(state.runs) == {"a"}
    decide_many(state, [], 110.0)                                     # the next, 100 s idle: gone
    assert state.last_boost_at == 110.0 and state.runs == {}


def test_a_runs_last_activity_is_its_latest_turn_queued_or_settled():
    state = pool(run_slack_per_service=1.0)
    decide_many(state, [request("a.1", "i", 5.0, run="a")], 5.0)
    assert (state.runs["a"].live, state.runs["a"].last_at) == (1, 5.0)
    decide_many(state, [request("a.2", "i", 7.0, run="a")], 7.0)
    assert (state.runs["a"].live, state.runs["a"].last_at) == (2, 7.0)
    assert state.to_dict()["runs"]["a"] == {"service_s": 0.0, "last_at": 7.0, "live": 2}
    decide_many(state, [complete("a.1")], 9.0)
    assert (state.runs["a"].live, state.runs["a"].last_at, state.runs["a"].service_s) == (1, 9.0, 4.0)


def test_a_log_without_run_ids_keeps_its_shape_and_state_hash():
    """TurnRequested and TurnQueued without run_id, as every log before runs: the decisions
    carry no run fields and the state has no `runs` key (the golden logs rely on it)."""
    s = PoolSettings(name="p", lanes=1, policy="mlfq")
    state = new_pool({"settings": s.to_dict(), "at": 0.0})
    decide_many(state, [(ev.AGENT_REGISTERED, {"agent_id": "a", "name": "a", "priority_class": ev.BATCH}, None)], 0.0)
    out = decide_many(state, [request("t", "a", 0.0)], 0.0)
    assert all("run_id" not in d and "order_deadline" not in d for _, d in out)
    assert "runs" not in state.to_dict() and "run_id" not in state.to_dict()["turns"]["t"]
    assert "class_slack_seconds" not in s.to_dict()          # settings JSON as before, too
    assert PoolSettings.from_dict(s.to_dict()) == s


def test_deadline_settings_round_trip_and_bad_ones_are_refused():
    s = replace(DEADLINE_SETTINGS)
    assert PoolSettings.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    for bad in ({"class_slack_seconds": (0.0, 1.0)}, {"class_slack_seconds": (0.0, -1.0, 2.0)},
                {"run_slack_per_service": -1.0}, {"size_slack_cap_seconds": 1e9}, {"run_forget_seconds": 0.0},
                {"policy": "lottery"}):
        try:
            replace(s, **bad).validate()
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")


# -- the rate-bound order ------------------------------------------------------------------

def settle(turn_id, prompt_tokens):
    """A completion that used its whole reservation, so nothing is refunded to the bucket."""
    return ev.COMPLETION_REPORTED, {"turn_id": turn_id, "outcome": ev.OK, "prompt_tokens": prompt_tokens,
                                    "completion_tokens": 0}, None


def test_while_the_token_budget_binds_the_longest_answer_starts_first_and_no_further():
    """tpm 100k: an 80k call leaves the token bucket below half for a while. Then class slack
    is off and each turn's deadline moves earlier by 3 s per 1,000 max-output tokens (at
    most 30 s): the batch turn with a 4,000-token answer cap goes before the interactive one
    queued earlier, a turn queued more than the credit later does not, and each grant says
    it was chosen by this order."""
    state = pool()
    assert granted(decide_many(state, [request("hold", "i", 0.0, est=80_000)], 0.0)) == ["hold"]
    decide_many(state, [request("chat", "i", 1.0, out=1_000)], 1.0)     # 1 - 3 = -2
    decide_many(state, [request("job", "b", 2.0, out=4_000)], 2.0)      # 2 - 12 = -10 (class slack 10 off)
    decide_many(state, [request("late", "b", 12.0, out=4_000)], 12.0)   # 12 - 12 = 0
    out = decide_many(state, [settle("hold", 80_000)], 13.0)
    assert granted(out) == ["job"]
    assert [(d["order_deadline"], d["rate_bound"]) for t, d in out if t == ev.TURN_GRANTED] == [(-10.0, True)]
    assert granted(decide_many(state, [settle("job", 4_100)], 14.0)) == ["chat"]
    assert granted(decide_many(state, [settle("chat", 1_100)], 15.0)) == ["late"]


def test_with_budget_to_spare_the_class_order_holds_and_grants_keep_their_shape():
    state = pool()
    assert granted(decide_many(state, [request("hold", "i", 0.0, est=100)], 0.0)) == ["hold"]
    decide_many(state, [request("chat", "i", 1.0, out=1_000)], 1.0)     # 1 + 0
    decide_many(state, [request("job", "b", 2.0, out=4_000)], 2.0)      # 2 + 10
    out = decide_many(state, [settle("hold", 100)], 3.0)
    assert granted(out) == ["chat"]
    assert all("rate_bound" not in d for t, d in out if t == ev.TURN_GRANTED)


def test_the_output_credit_off_keeps_the_class_order_under_a_binding_budget():
    state = pool(output_credit_per_ktoken=0.0)
    decide_many(state, [request("hold", "i", 0.0, est=80_000)], 0.0)
    decide_many(state, [request("chat", "i", 1.0, out=1_000)], 1.0)
    decide_many(state, [request("job", "b", 2.0, out=4_000)], 2.0)
    assert granted(decide_many(state, [settle("hold", 80_000)], 13.0)) == ["chat"]


def test_output_credit_settings_are_stored_only_when_they_matter_and_bad_ones_are_refused():
    new = PoolSettings().to_dict()
    assert new["output_credit_per_ktoken"] == 3.0 and "output_credit_cap_seconds" not in new
    assert PoolSettings.from_dict(new) == PoolSettings()
    old_deadline = {k: v for k, v in new.items() if k != "output_credit_per_ktoken"}
    assert PoolSettings.from_dict(old_deadline).output_credit_per_ktoken == 0.0   # recorded before the rule
    mlfq = PoolSettings(policy="mlfq")
    assert "output_credit_per_ktoken" not in mlfq.to_dict() and PoolSettings.from_dict(mlfq.to_dict()) == mlfq
    for field, value, message in (
            ("output_credit_per_ktoken", -1.0, "outputCreditPerKtoken must be between 0 and 3600"),
            ("output_credit_cap_seconds", 4000.0, "outputCreditCapSeconds must be between 0 and 3600")):
        try:
            PoolSettings(**{field: value}).validate()
        except ValueError as error:
            assert message in str(error)
        else:
            raise AssertionError(f"{field}={value} was accepted")


# -- the order's terms, each at its edge (mutation testing found them unchecked) ----------

def test_the_output_credit_off_keeps_class_slack_even_where_it_reverses_arrival_order():
    """A batch turn queued a second before an interactive one still goes after it under a
    binding budget when the credit is off: the rate-bound order (no class slack) would
    grant the batch turn first, and grants record no rate-bound order."""
    state = pool(output_credit_per_ktoken=0.0)
    decide_many(state, [request("hold", "i", 0.0, est=80_000)], 0.0)
    decide_many(state, [request("job", "b", 1.0, out=4_000)], 1.0)     # 1 + 10
    decide_many(state, [request("chat", "i", 2.0, out=1_000)], 2.0)    # 2 + 0
    assert not ordering.rate_bound(state)
    out = decide_many(state, [settle("hold", 80_000)], 13.0)
    assert granted(out) == ["chat"]
    assert all("rate_bound" not in d for t, d in out if t == ev.TURN_GRANTED)


def _bucket_at(state: PoolState, bucket, fraction: float) -> None:
    """`bucket` exactly at `fraction` of its capacity at the state's clock (no refill)."""
    bucket.level = fraction * bucket.capacity(state.rate_factor)
    bucket.updated_at = state.clock


def test_a_bucket_at_exactly_half_its_capacity_does_not_bind():
    state = pool(limiter="token-bucket")
    for bucket in (state.requests, state.tokens):
        _bucket_at(state, bucket, 0.5)
    assert not ordering.rate_bound(state)
    _bucket_at(state, state.tokens, 0.499)
    assert ordering.rate_bound(state)
    _bucket_at(state, state.tokens, 0.5)
    _bucket_at(state, state.requests, 0.499)
    assert ordering.rate_bound(state)


def test_a_deadline_asked_without_the_bound_reads_it_from_the_state():
    state = pool()
    decide_many(state, [request("hold", "i", 0.0, est=80_000)], 0.0)
    decide_many(state, [request("job", "b", 2.0, out=4_000)], 2.0)
    turn = state.turns["job"]
    assert ordering.rate_bound(state)
    assert ordering.deadline(state, turn) == ordering.deadline(state, turn, True) == 2.0 - 12.0
    assert ordering.deadline(state, turn, False) == 2.0 + 10.0


def test_a_turn_of_an_unknown_agent_or_class_waits_as_background():
    state = pool()
    decide_many(state, [request("job", "b", 2.0)], 2.0)
    turn = state.turns["job"]
    background = state.settings.class_slack_seconds[2]
    state.agents[turn.agent_id].priority_class = "REALTIME"   # a class this version does not know
    assert ordering.slack(state, turn, False) == background
    del state.agents[turn.agent_id]
    assert ordering.slack(state, turn, False) == background


def test_a_run_the_state_no_longer_holds_has_no_attained_service():
    state = pool(run_slack_per_service=2.0)
    decide_many(state, [request("job", "b", 2.0, run="r")], 2.0)
    turn = state.turns["job"]
    state.runs["r"].service_s = 3.0
    assert ordering.run_service(state, turn) == 3.0
    assert ordering.slack(state, turn, False) == 10.0 + 6.0
    del state.runs["r"]
    assert ordering.run_service(state, turn) == 0.0 and ordering.slack(state, turn, False) == 10.0


@settings(max_examples=examples(60), deadline=None)
@given(workload)
def test_every_slack_lies_within_the_bounds_the_starvation_argument_uses(batches):
    """min_slack <= slack <= max_slack for every queued turn, in both orders, with the output
    credit on and off (the starvation bound is max_slack - min_slack plus the service of
    the turns queued before)."""
    for credit in (0.0, 0.5, 3.0):   # 0.5: any positive credit counts, not only whole seconds
        run = start(replace(DEADLINE_SETTINGS, output_credit_per_ktoken=credit, output_credit_cap_seconds=7.0))
        low, high = ordering.min_slack(run.state), ordering.max_slack(run.state)
        assert low == (-7.0 if credit else 0.0)
        for wait, actions in batches:
            run.step(run.now + wait, to_inputs(run, actions))
            for turn in run.state.turns.values():
                if turn.status == ev.QUEUED:
                    for bound in (False, True):
                        assert low - 1e-9 <= ordering.slack(run.state, turn, bound) <= high + 1e-9


def test_one_granting_pass_orders_the_queue_once(monkeypatch):
    """GrantOrder's reason to exist: a pass that grants k of q queued turns computes q
    deadlines (plus one per grant, for the grant's record), not k x q; before it, a batch
    after a stall took the leader 100 ms and more to decide."""
    # No light-agent reserve: one agent's four turns fill all four lanes.
    state = pool(lanes=4, rpm=100_000, tpm=10_000_000, light_agent_reserve=0.0)
    holds = [f"hold{i}" for i in range(4)]
    decide_many(state, [request(t, "i", 0.0) for t in holds], 0.0)
    waiting = [f"w{i}" for i in range(20)]
    decide_many(state, [request(t, "b", 1.0 + i / 100) for i, t in enumerate(waiting)], 1.0)
    calls = []
    real = ordering.deadline
    monkeypatch.setattr(ordering, "deadline", lambda *a, **k: calls.append(1) or real(*a, **k))
    out = decide_many(state, [complete(t) for t in holds], 2.0)
    assert granted(out) == waiting[:4] and not ordering.rate_bound(state)
    assert len(calls) == len(waiting) + 4

"""Edges of the grant-order, outage and refusal rules that the worked examples of
test_ordering.py and test_capacity_rules.py leave open: the starvation bound's constant for
each combination of terms, a run slack rate below one, probes while an old call is still in
flight or when the outage is suspected with turns already waiting, what recovery records and
leaves in the state, and the refusal values the Service turns into errors."""
from __future__ import annotations

import math

import pytest

from app.domain import events as ev
from app.domain import rules
from app.domain.decide import REAP_GRACE_S, decide, decide_many
from app.domain.ordering import max_slack
from app.domain.settings import PoolSettings
from app.domain.state import PoolState

from .test_capacity_rules import _hung_outage, beat, kinds, register, request, warm
from .test_capacity_rules import pool as failure_pool
from .test_ordering import complete as complete_input
from .test_ordering import granted
from .test_ordering import pool as order_pool
from .test_ordering import request as request_input

# -- the starvation bound's constant ------------------------------------------------------

@pytest.mark.parametrize("run_rate, size_rate, backlog_rate, bound", [
    (0.0, 0.0, 0.0, 12.0),          # only the class slack: run, size and backlog caps are not in play
    (0.5, 0.0, 0.0, 52.0),          # a run slack rate below 1 still counts its cap (40)
    (0.0, 0.5, 0.0, 22.0),          # so does a size slack rate below 1 (cap 10)
    (0.5, 0.5, 0.0, 62.0),
    (0.0, 0.0, 0.5, 32.0),          # and a backlog slack rate below 1 (cap 20)
    (0.5, 0.5, 0.5, 82.0),
])
def test_the_largest_slack_counts_each_cap_only_when_its_term_is_on(run_rate, size_rate, backlog_rate, bound):
    s = PoolSettings(class_slack_seconds=(0.0, 6.0, 12.0), run_slack_per_service=run_rate,
                     run_slack_cap_seconds=40.0, size_slack_per_ktoken=size_rate, size_slack_cap_seconds=10.0,
                     agent_backlog_slack_seconds=backlog_rate, agent_backlog_slack_cap_seconds=20.0)
    assert max_slack(PoolState.new(s, 0.0)) == bound


def test_a_run_slack_rate_below_one_second_per_second_still_delays_a_run_by_its_service():
    # Run "long" held the lane 10 s; at 0.5 s of slack per lane-second its next turn's
    # deadline is 5 s after its arrival, so a run-less turn queued 4 s later goes first.
    state = order_pool(class_slack_seconds=(0.0, 0.0, 0.0), run_slack_per_service=0.5, run_slack_cap_seconds=60.0)
    assert granted(decide_many(state, [request_input("first", "i", 0.0, run="long")], 0.0)) == ["first"]
    decide_many(state, [complete_input("first")], 10.0)
    decide_many(state, [request_input("hold", "j", 10.0)], 10.0)
    decide_many(state, [request_input("again", "i", 11.0, run="long")], 11.0)    # deadline 11 + 5
    decide_many(state, [request_input("fresh", "j", 15.0)], 15.0)                # deadline 15
    out = decide_many(state, [complete_input("hold")], 20.0)
    assert granted(out) == ["fresh"]
    out = decide_many(state, [complete_input("fresh")], 21.0)
    assert [(d["turn_id"], d["order_deadline"], d["run_service_s"]) for t, d in out if t == ev.TURN_GRANTED] == \
        [("again", 16.0, 10.0)]


# -- probes ---------------------------------------------------------------------------------

def test_an_old_call_still_in_flight_does_not_hold_back_the_probe():
    s = failure_pool(lanes=5)
    register(s, "a")
    now = warm(s, "a", 0.0)
    request(s, "old", "a", now, streams=False)      # sent before the silence; holds its plain lease
    _hung_outage(s, now + 0.1, 4)
    assert s.outage_since is not None and s.turns["old"].status == ev.GRANTED
    register(s, "n", now + 3.0)
    out = request(s, "new", "n", now + 3.0)
    grants = [d for t, d in out if t == ev.TURN_GRANTED]
    assert [(d["turn_id"], d["probe"]) for d in grants] == [("new", True)]


def test_turns_waiting_when_the_outage_is_suspected_get_one_probe_in_that_same_pass():
    s = failure_pool(lanes=4)
    register(s, "a")
    now = warm(s, "a", 0.0)
    for i in range(4):                               # every lane busy with a call that hangs
        register(s, f"o{i}", now)
        request(s, f"o{i}", f"o{i}", now)
    for i in range(3):                               # and three turns queued behind them
        register(s, f"q{i}", now)
        request(s, f"q{i}", f"q{i}", now)
    assert s.queued_count() == 3
    out = decide(s, None, None, now + 1.5 + REAP_GRACE_S)
    assert kinds(out).count(ev.TURN_REAPED) == 4 and ev.PROVIDER_OUTAGE_SUSPECTED in kinds(out)
    grants = [d for t, d in out if t == ev.TURN_GRANTED]
    assert [(d["turn_id"], d["probe"]) for d in grants] == [("q0", True)]
    assert s.turns["q0"].granted_at == s.outage_since and s.queued_count() == 2


def _pool_in_outage_with_a_waiting_agent():
    """A pool whose calls all hung (an outage suspected), and agent p registered after it."""
    s = failure_pool(lanes=4)
    register(s, "a")
    now = warm(s, "a", 0.0)
    _hung_outage(s, now, 4)
    since = s.outage_since
    register(s, "p", since + 1.0)
    return s, since


def test_recovery_records_the_probe_and_the_outage_and_leaves_no_outage_state_behind():
    s, since = _pool_in_outage_with_a_waiting_agent()
    request(s, "probe1", "p", since + 1.0)
    probe = s.turns["probe1"]
    decide(s, None, None, probe.lease_expires_at + REAP_GRACE_S)        # the first probe hangs too
    assert s.failed_probes == 1
    asked = probe.lease_expires_at + 1.0
    register(s, "p2", asked)
    request(s, "probe2", "p2", asked)                                  # asked for again: the next probe
    second = s.turns["probe2"]
    assert second.status == ev.GRANTED
    at = second.granted_at + 0.5
    out = beat(s, second.turn_id, at)
    recovered = dict(out)[ev.PROVIDER_RECOVERED]
    assert (recovered["turn_id"], recovered["failed_probes"]) == (second.turn_id, 1)
    assert recovered["outage_s"] == pytest.approx(at - since)
    # The pool's stored form is again that of a pool that never saw an outage.
    assert not {"outage_since", "failed_probes", "silent_reaps", "silent_from"} & set(s.to_dict())


@pytest.mark.parametrize("outcome, recovered", [(ev.OK, True), (ev.ERROR, False), (ev.RATE_LIMITED, False)])
def test_a_probe_that_does_not_stream_ends_the_outage_only_by_answering_ok(outcome, recovered):
    s, since = _pool_in_outage_with_a_waiting_agent()
    request(s, "probe", "p", since + 1.0, streams=False)           # no first chunk to wait for
    assert s.turns["probe"].status == ev.GRANTED
    out = decide(s, ev.COMPLETION_REPORTED, {"turn_id": "probe", "outcome": outcome, "prompt_tokens": 0,
                                             "completion_tokens": 10}, since + 2.0)
    assert (ev.PROVIDER_RECOVERED in kinds(out)) == recovered
    assert (s.outage_since is None) == recovered
    if recovered:
        assert dict(out)[ev.PROVIDER_RECOVERED]["turn_id"] == "probe"


# -- refusals --------------------------------------------------------------------------------

def test_the_queue_cap_refuses_the_turn_that_would_exceed_it_and_says_by_how_much():
    assert rules.queue_refusal(0, 3) is None and rules.queue_refusal(2, 3) is None
    assert rules.queue_refusal(3, 3) == rules.Refusal(rules.QUEUE_FULL, need=4, limit=3)
    assert rules.queue_refusal(7, 3) == rules.Refusal(rules.QUEUE_FULL, need=8, limit=3)


def test_a_queue_full_refusal_is_worded_for_the_log_and_recognised_from_it():
    reason = rules.queue_full_reason(rules.queue_refusal(3, 3))
    assert reason == "queue full: the agent has 3 turns waiting, the most one agent may have is 3"
    assert rules.is_queue_full_reason(reason)
    for other in (None, "", "queue full", "queue fullness: x", "reaped: queue full: x", 3):
        assert not rules.is_queue_full_reason(other)


def test_the_free_lanes_are_listed_lowest_first():
    state = PoolState.new(PoolSettings(lanes=4), 0.0)
    assert state.free_lanes() == [0, 1, 2, 3]
    state.lanes[1], state.lanes[3] = "a", "b"
    assert state.free_lanes() == [0, 2] and state.busy_lanes() == 2


def test_only_a_quarantined_agent_can_be_released():
    assert rules.release_refusal(ev.QUARANTINED) is None
    for state in (ev.ACTIVE, ev.HIBERNATED, None):
        assert rules.release_refusal(state) == rules.Refusal(rules.NOT_QUARANTINED)


# -- waking for a factor that must grow (RateRecovered) -------------------------------------

def test_a_pool_of_one_request_a_minute_waits_for_the_whole_factor_back_and_no_longer():
    from app.domain.decide import next_deadline

    from .test_core_edges import complete as core_complete
    from .test_core_edges import pool as core_pool
    from .test_core_edges import register as core_register
    from .test_core_edges import request as core_request
    # At 1 rpm one request needs the whole factor: after a 429 halves it at 1 s, the factor
    # is back to 1 at 1 + 0.5 / (0.1 per minute) = 301 s, whatever the tokens need.
    s = core_pool(lanes=2, rpm=1, tpm=1_000)
    core_register(s, "a")
    core_request(s, "t1", "a", 0.0, est=10)
    core_complete(s, "t1", 1.0, outcome=ev.RATE_LIMITED)
    core_request(s, "t2", "a", 2.0, est=10)
    decide(s, None, None, 3.0)                               # the pause ends
    assert next_deadline(s, 3.0) == pytest.approx(301.0)
    # Asked after that instant (the state still at the old factor): at once, 1 ms on.
    assert next_deadline(s, 400.0) == pytest.approx(400.0 + 1e-3)


def _cut_to_a_quarter(rpm, tpm, est):
    """A one-lane pool whose factor a 429 at 1 s cut from 1 to 0.25 (decrease 0.25, no
    jitter, 60 s retry), with a head of `est` tokens queued since 0 s. The pass at 61 s
    resumes it: the factor is then 0.25 + 0.25 per minute x 60 s = exactly 0.5."""
    from .test_core_edges import pool as core_pool
    from .test_core_edges import register as core_register
    from .test_core_edges import request as core_request
    s = core_pool(lanes=1, rpm=rpm, tpm=tpm, aimd_decrease=0.25, aimd_increase_per_minute=0.25,
                  jitter_seconds=0.0, boost_seconds=3600.0)
    core_register(s, "a")
    core_request(s, "t1", "a", 0.0, est=10)
    core_request(s, "t2", "a", 0.0, est=est)                 # waits behind t1
    out = decide(s, ev.COMPLETION_REPORTED, {"turn_id": "t1", "outcome": ev.RATE_LIMITED, "prompt_tokens": 0,
                                             "completion_tokens": 0, "retry_after_seconds": 60.0}, 1.0)
    assert dict(out)[ev.POOL_PAUSED]["rate_factor"] == 0.25 and s.paused_until == 61.0
    assert kinds(decide(s, None, None, 61.0)) == [ev.POOL_RESUMED] and s.rate_factor == 0.5
    return s


@pytest.mark.parametrize("rpm, tpm, est", [
    (2, 100_000, 10),      # 2 rpm x 0.5 holds exactly the head's one request; the bucket holds 0.5
    (600, 1_000, 500),     # 1,000 tpm x 0.5 holds exactly its 500 tokens; the bucket holds 250
])
def test_a_head_that_exactly_fits_the_capacity_at_the_last_factor_waits_for_the_refill_alone(rpm, tpm, est):
    from app.domain.decide import next_deadline
    s = _cut_to_a_quarter(rpm, tpm, est)
    # It fits: nothing to fold forward, however much the factor has grown since 61 s. Half
    # the reservation is missing, refilled at half the rate: 30 s.
    assert next_deadline(s, 61.0) == pytest.approx(91.0)
    assert decide(s, None, None, 71.0) == []
    assert kinds(decide(s, None, None, 91.0)) == [ev.TURN_GRANTED]


# -- adaptive lanes: the arithmetic of one sample (concurrency.py) ----------------------------

def test_the_first_samples_are_a_plain_mean_in_both_averages():
    from app.domain.concurrency import LaneLimit
    limit = LaneLimit()
    for i, sample in enumerate((0.0, 0.3, 0.6, 0.9)):
        limit.observe(sample, in_use=1, lanes=64)      # app-limited: the means move, the limit does not
        mean = sum((0.0, 0.3, 0.6, 0.9)[:i + 1]) / (i + 1)
        assert (limit.samples, limit.short, limit.long) == (i + 1, pytest.approx(mean), pytest.approx(mean))
    assert limit.limit is None
    # From the ninth sample on, short moves by 1/8 of the gap; long still by 1/n until 128.
    limit = LaneLimit(limit=None, short=0.0, long=0.0, samples=8)
    limit.observe(0.8, in_use=1, lanes=64)
    assert (limit.short, limit.long) == (pytest.approx(0.1), pytest.approx(0.8 / 9))


def test_a_long_average_far_above_the_short_one_is_pulled_down_and_a_near_one_is_not():
    from app.domain.concurrency import LaneLimit
    # long - short = 1.99 - 1 > ln 2 after the sample: long = short + 0.95 x the gap.
    limit = LaneLimit(limit=10.0, short=1.0, long=2.0, samples=500)
    limit.observe(1.0, in_use=10, lanes=64)
    gap = (2.0 - 1.0 / 128) - 1.0
    assert (limit.short, limit.long) == (pytest.approx(1.0), pytest.approx(1.0 + gap * 0.95))
    # Gradient 1 (2 x e^(long - short) > 1) with the limit in use: 0.8 x 10 + 0.2 x (10 + 4).
    assert limit.limit == pytest.approx(10.8)
    # A gap under ln 2 is left alone (the sum of the two is no criterion).
    limit = LaneLimit(limit=10.0, short=1.0, long=1.2, samples=500)
    limit.observe(1.0, in_use=10, lanes=64)
    assert limit.long == pytest.approx(1.2 - 0.2 / 128)


def test_the_limit_grows_from_half_of_it_in_use_and_not_below():
    from app.domain.concurrency import LaneLimit
    at_half = LaneLimit(limit=10.0, short=0.0, long=0.0, samples=500)
    at_half.observe(0.0, in_use=5, lanes=64)
    assert at_half.limit == pytest.approx(10.8)
    below = LaneLimit(limit=10.0, short=0.0, long=0.0, samples=500)
    below.observe(0.0, in_use=4, lanes=64)
    assert below.limit == 10.0
    unmeasured = LaneLimit(limit=10.0)
    unmeasured.grow_unmeasured(in_use=5, lanes=64)
    assert unmeasured.limit == pytest.approx(10.8)      # + 0.2 x 4
    unmeasured.grow_unmeasured(in_use=4, lanes=64)
    assert unmeasured.limit == pytest.approx(10.8)


def test_the_initial_limit_is_the_setting_within_the_configured_lanes():
    from app.domain.concurrency import LaneLimit
    for initial, lanes, start in ((4, 64, 4.0), (32, 64, 32.0), (32, 20, 20.0)):
        limit = LaneLimit()
        assert limit.current(lanes, initial) == start and limit.lanes_in_use(lanes, initial) == int(start)
        limit.observe(0.0, in_use=lanes, lanes=lanes, initial=initial)     # gradient 1, in use
        assert limit.limit == pytest.approx(min(lanes, start + 0.8))
        grown = LaneLimit()
        grown.grow_unmeasured(in_use=lanes, lanes=lanes, initial=initial)
        assert grown.limit == pytest.approx(min(lanes, start + 0.8))
    # Calls queue (short far above long: the gradient at its floor, 0.8):
    # 0.8 x 30 + 0.2 x (24 + 4) = 29.6, but never below the minimum.
    for minimum, after in ((2, 29.6), (30, 30.0)):
        floor = LaneLimit(limit=30.0, short=5.0, long=0.0, samples=500)
        floor.observe(math.log(4.0), in_use=30, lanes=64, minimum=minimum)
        assert floor.limit == pytest.approx(after)


# -- the stall deadline and the end of an outage (deadlines.py) -------------------------------

def test_a_stall_deadline_as_long_as_the_lease_is_the_plain_lease():
    s = failure_pool(lanes=1, lease_seconds=6.0, stall_timeout_seconds=6.0)
    register(s, "a")
    request(s, "t", "a", 0.0)
    beat(s, "t", 0.2)                                    # the first chunk
    out = beat(s, "t", 1.0)
    extended = dict(out)[ev.LEASE_EXTENDED]
    assert extended["lease_expires_at"] == pytest.approx(7.0) and extended.get("stall_deadline") is None


def test_the_probe_granted_in_the_pass_that_suspects_the_outage_ends_it_with_its_first_chunk():
    s = failure_pool(lanes=4)
    register(s, "a")
    now = warm(s, "a", 0.0)
    for i in range(4):
        register(s, f"o{i}", now)
        request(s, f"o{i}", f"o{i}", now)
    register(s, "q", now)
    request(s, "q", "q", now)
    decide(s, None, None, now + 1.5 + REAP_GRACE_S)
    assert s.turns["q"].granted_at == s.outage_since
    out = beat(s, "q", s.outage_since + 0.5)
    assert ev.PROVIDER_RECOVERED in kinds(out) and s.outage_since is None


def test_a_probe_that_has_shown_life_no_longer_holds_the_probe_slot():
    # A probe that does not stream heartbeats without a first chunk: it is no longer waiting
    # for one, so the next queued turn may go as a probe (the outage goes on: no first chunk).
    s = failure_pool(lanes=4)
    register(s, "a")
    now = warm(s, "a", 0.0)
    _hung_outage(s, now, 4)
    at = s.outage_since + 1.0
    for name in ("p", "n"):
        register(s, name, at)
    request(s, "plain", "p", at, streams=False)
    request(s, "next", "n", at)
    assert s.turns["plain"].status == ev.GRANTED and s.turns["next"].status == ev.QUEUED
    out = beat(s, "plain", at + 1.0)
    assert [d["turn_id"] for t, d in out if t == ev.TURN_GRANTED] == ["next"] and s.outage_since is not None


@pytest.mark.parametrize("after, hung, suspected", [(0, 4, False), (1, 1, True), (3, 3, True), (3, 2, False)])
def test_an_outage_is_suspected_at_exactly_the_set_number_of_silent_reaps_and_never_when_off(after, hung, suspected):
    s = failure_pool(lanes=4, outage_after_silent_reaps=after)
    register(s, "a")
    now = warm(s, "a", 0.0)
    out = _hung_outage(s, now, hung)
    assert kinds(out).count(ev.TURN_REAPED) == hung
    assert (ev.PROVIDER_OUTAGE_SUSPECTED in kinds(out)) is suspected
    assert (s.outage_since is not None) is suspected


def test_a_report_for_a_turn_that_holds_no_lane_is_refused_with_the_turn_status():
    assert rules.report_refusal(ev.GRANTED) is None
    assert rules.report_refusal(ev.COMPLETED) == rules.Refusal(rules.NOT_GRANTED, status=ev.COMPLETED)
    assert rules.report_refusal(None) == rules.Refusal(rules.NOT_GRANTED, status="")


def test_a_grant_of_a_turn_without_a_run_records_no_run_service():
    state = order_pool()
    out = decide_many(state, [request_input("solo", "i", 0.0)], 0.0)
    assert [(d["turn_id"], d.get("run_service_s"), d["order_deadline"]) for t, d in out if t == ev.TURN_GRANTED] == \
        [("solo", None, 0.0)]


def _cut_factor(rpm, tpm, est):
    """A pool whose factor a 429 halved at 1 s (resumed at 3 s), with a head of `est` tokens."""
    from .test_core_edges import complete as core_complete
    from .test_core_edges import pool as core_pool
    from .test_core_edges import register as core_register
    from .test_core_edges import request as core_request
    s = core_pool(lanes=2, rpm=rpm, tpm=tpm)
    core_register(s, "a")
    core_request(s, "t1", "a", 0.0, est=10)
    core_complete(s, "t1", 1.0, outcome=ev.RATE_LIMITED)
    core_request(s, "t2", "a", 2.0, est=est)
    decide(s, None, None, 3.0)
    return s


def _until_granted(s, now):
    from app.domain.decide import next_deadline
    seen = []
    for _ in range(6):
        now = next_deadline(s, now)
        out = decide(s, None, None, now)
        seen.append([(t, d) for t, d in out])
        if ev.TURN_GRANTED in kinds(out):
            break
    return seen


def test_rate_recovered_names_the_head_and_the_factor_it_found():
    s = _cut_factor(rpm=1, tpm=1_000, est=10)
    first = _until_granted(s, 3.0)[0]
    assert [t for t, _ in first][:1] == [ev.RATE_RECOVERED]
    recovered = first[0][1]
    assert recovered["turn_id"] == "t2" and recovered["rate_factor"] == pytest.approx(1.0)


def test_a_head_within_the_reduced_request_capacity_waits_for_the_refill_alone():
    # 2 rpm at a factor of about 0.5 holds one request: the head fits, only the emptied
    # request bucket must refill; the factor need not grow first.
    s = _cut_factor(rpm=2, tpm=100_000, est=10)
    # A pass while the bucket is still short (the loop may wake for any reason) records nothing.
    assert kinds(decide(s, None, None, 30.0)) == []
    seen = _until_granted(s, 30.0)
    assert [t for t, _ in seen[0]] == [ev.TURN_GRANTED]


def test_lane_limit_changed_records_the_move_and_the_two_averages_behind_it():
    s = failure_pool(lanes=64, adaptive_lanes_initial=4)
    register(s, "a")
    for i in range(4):
        request(s, f"t{i}", "a", 0.0)
    assert sum(1 for lane in s.lanes if lane is not None) == 4      # the initial limit
    # First chunks after 0.5 s with all 4 in use (gradient 1): 4 -> 4.8 -> 5.6 lanes.
    assert ev.LANE_LIMIT_CHANGED not in kinds(beat(s, "t0", 0.5))
    out = beat(s, "t1", 0.5)
    changed = dict(out)[ev.LANE_LIMIT_CHANGED]
    assert (changed["lanes_in_use"], changed["previous"]) == (5, 4)
    assert changed["limit"] == pytest.approx(5.6)
    assert changed["first_chunk_short_s"] == pytest.approx(0.5) and changed["first_chunk_long_s"] == pytest.approx(0.5)


def test_a_first_chunk_that_teaches_nothing_moves_no_limit_from_the_initial_setting():
    s = failure_pool(lanes=64, adaptive_lanes_initial=4)
    register(s, "a")
    request(s, "t", "a", 0.0)
    out = beat(s, "t", 0.5)                 # 1 of 4 in use: app-limited, the limit is still unset
    assert ev.LANE_LIMIT_CHANGED not in kinds(out) and s.lanes_in_use() == 4

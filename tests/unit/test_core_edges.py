"""Edges of the scheduling core the rule examples do not reach: when the scheduler wakes
up next, demotion of an agent's queued turns, the start estimator's gains and Karn's cap,
the provider report's ageing, and the state's stored form.

Expected values are worked out by hand in the comments. Decisions are reached through
`decisions()` alone, so that a change in how decide() returns them is a one-line change.
"""
from __future__ import annotations

import json
import math

import pytest

from app.domain import events as ev
from app.domain.admission import Bucket
from app.domain.apply import new_pool
from app.domain.decide import decide, decide_many, next_deadline
from app.domain.settings import PoolSettings
from app.domain.state import PoolState, StartEstimator
from tests.unit.limits import TRUSTED_BUCKET


def decisions(out) -> list[tuple[str, dict]]:
    """decide()'s output as (type, payload) pairs: the only place that unpacks it."""
    return [(t, d) for t, d in out]


def pool(**kw):
    s = PoolSettings(**{"lanes": 1, "rpm": 600, "tpm": 60_000, "lease_seconds": 1000.0, "policy": "mlfq",
                        **TRUSTED_BUCKET,
                        "boost_seconds": 1000.0, "jitter_seconds": 0.0, **kw})
    return new_pool({"settings": s.to_dict(), "at": 0.0})


def register(state, agent_id, cls=ev.INTERACTIVE, now=0.0):
    decide(state, ev.AGENT_REGISTERED, {"agent_id": agent_id, "name": agent_id, "priority_class": cls}, now)


def request(state, turn_id, agent_id, now, est=100, **fields):
    data = {"turn_id": turn_id, "agent_id": agent_id, "estimated_tokens": est, "at": now, **fields}
    return decisions(decide(state, ev.TURN_REQUESTED, data, now))


def complete(state, turn_id, now, p=0, c=0, outcome=ev.OK, **extra):
    data = {"turn_id": turn_id, "outcome": outcome, "prompt_tokens": p, "completion_tokens": c, **extra}
    return decisions(decide(state, ev.COMPLETION_REPORTED, data, now))


def kinds(out):
    return [t for t, _ in out]


# -- next_deadline: when the scheduler has something to do ------------------------------------

def test_a_head_short_of_tokens_is_retried_when_the_bucket_will_hold_it():
    s = pool(lanes=2, tpm=1_000)
    register(s, "a")
    request(s, "t1", "a", 0.0, est=900)            # leaves 100 tokens
    request(s, "t2", "a", 0.0, est=500)            # needs 400 more: 400 / (1000/60 per s) = 24 s
    assert s.queues[0] == ["t2"]
    assert next_deadline(s, 0.0) == pytest.approx(24.0)
    # Asked later, when the bucket already holds it: at once (1 ms on), never in the past.
    assert next_deadline(s, 30.0) == 30.0 + 1e-3
    assert kinds(decisions(decide(s, None, None, 24.0))) == [ev.TURN_GRANTED]


def test_a_head_over_the_reduced_capacity_is_retried_when_the_factor_has_recovered_a_step():
    s = pool(lanes=2, tpm=1_000)
    register(s, "a")
    request(s, "t1", "a", 0.0, est=100)
    out = complete(s, "t1", 1.0, outcome=ev.RATE_LIMITED)   # factor 0.5, paused to 3.0
    assert out[1][1]["rate_factor"] == 0.5 and s.paused_until == 3.0
    request(s, "t2", "a", 2.0, est=600)            # over the halved capacity of 500 tokens
    assert next_deadline(s, 2.0) == 3.0            # paused: the pause's end
    assert kinds(decisions(decide(s, None, None, 3.0))) == [ev.POOL_RESUMED]
    # No refill reaches 600 at factor 0.5: wake when the factor holds 600 tokens. From 0.5
    # at 1 s, at 0.1 per minute, 0.6 comes 60 s later: 61 s.
    assert next_deadline(s, 3.0) == pytest.approx(61.0)


def test_a_head_over_the_reduced_capacity_is_granted_once_the_factor_allows_it():
    s = pool(lanes=2, tpm=1_000)
    register(s, "a")
    request(s, "t1", "a", 0.0, est=100)
    complete(s, "t1", 1.0, outcome=ev.RATE_LIMITED)
    request(s, "t2", "a", 2.0, est=600)
    decide(s, None, None, 3.0)
    # Follow the core's own wake-ups, as the scheduler loop does, with no other input.
    now, seen = 3.0, []
    for _ in range(5):
        now = next_deadline(s, now)
        out = decisions(decide(s, None, None, now))
        seen.append(kinds(out))
        if ev.TURN_GRANTED in kinds(out):
            break
    # At 61 s the factor holds 600 tokens: RateRecovered folds it forward. The bucket,
    # capped at the old capacity of 503.3 (factor 0.5033 at 3 s), refills the missing
    # 96.7 tokens at 0.6 x 1000 / 60 = 10 per second: the grant comes at 70.67 s.
    assert seen[0] == [ev.RATE_RECOVERED]
    assert seen[-1] == [ev.TURN_GRANTED] and len(seen) <= 3
    assert now == pytest.approx(61.0 + (600 - 1000 * (0.5 + 0.1 * 2 / 60)) / 10.0, abs=0.01)


def test_the_retry_interval_follows_the_configured_recovery_rate():
    s = pool(lanes=2, tpm=1_000, aimd_increase_per_minute=0.2)
    register(s, "a")
    request(s, "t1", "a", 0.0, est=100)
    complete(s, "t1", 1.0, outcome=ev.RATE_LIMITED)
    request(s, "t2", "a", 2.0, est=600)
    decide(s, None, None, 3.0)
    assert next_deadline(s, 3.0) == pytest.approx(31.0)   # 0.1 of recovery at 0.2 per minute: 30 s after 1 s


def test_a_turn_that_stayed_at_its_level_through_a_boost_ages_on_its_own_deadline():
    s = pool(boost_seconds=60.0)
    register(s, "i")
    register(s, "b", ev.BATCH)
    request(s, "hold", "i", 0.0)                   # holds the only lane
    request(s, "b1", "b", 30.0)
    request(s, "b2", "b", 40.0)
    assert kinds(decisions(decide(s, None, None, 60.0))) == [ev.LEVELS_BOOSTED]
    assert s.queues == [[], ["b1", "b2"], []]      # waited 30 s at the boost: it stays
    # Next boost at 120, but b1 has waited a period at 90 (queued at 30).
    assert next_deadline(s, 60.0) == 90.0
    out = decisions(decide(s, None, None, 90.0))
    assert [(t, d["turn_id"]) for t, d in out] == [(ev.TURN_PROMOTED, "b1")]


def test_a_lease_is_enforced_exactly_at_its_expiry_plus_grace():
    s = pool(lease_seconds=5.0)
    register(s, "a")
    request(s, "t1", "a", 1.0)
    assert next_deadline(s, 1.0) == 6.25
    assert decisions(decide(s, None, None, 6.249)) == []
    assert kinds(decisions(decide(s, None, None, 6.25))) == [ev.TURN_REAPED]


def test_a_pause_and_a_boost_end_exactly_at_their_instants():
    s = pool(lanes=2, boost_seconds=10.0)
    register(s, "a")
    request(s, "t1", "a", 0.0)
    complete(s, "t1", 1.0, outcome=ev.RATE_LIMITED)          # paused to 3.0
    assert decisions(decide(s, None, None, 2.999)) == []
    assert kinds(decisions(decide(s, None, None, 3.0))) == [ev.POOL_RESUMED]
    assert kinds(decisions(decide(s, None, None, 9.999))) == []
    assert kinds(decisions(decide(s, None, None, 10.0))) == [ev.LEVELS_BOOSTED]


def test_aging_promotes_exactly_one_period_after_queueing():
    s = pool(boost_seconds=100.0)
    register(s, "i")
    register(s, "bg", ev.BACKGROUND)
    request(s, "hold", "i", 0.0)
    request(s, "b0", "bg", 0.5)
    # At the boost (100.4) it has waited 99.9 s: not yet a period, so it stays at level 2.
    assert kinds(decisions(decide(s, None, None, 100.4))) == [ev.LEVELS_BOOSTED]
    assert s.queues[2] == ["b0"]
    out = decisions(decide(s, None, None, 100.5))
    assert [(t, d["turn_id"], d["waited"]) for t, d in out] == [(ev.TURN_PROMOTED, "b0", 100.0)]


@pytest.mark.parametrize("cls", [ev.BATCH, ev.BACKGROUND])
def test_under_the_deadline_policy_a_long_wait_promotes_nothing(cls):
    # The same wait as above, under "deadline": a level only shows the class and a deadline
    # ages by itself, so no TurnPromoted, at level 1 or 2; the boost still lifts the turn.
    s = pool(boost_seconds=100.0, policy="deadline")
    register(s, "i")
    register(s, "x", cls)
    request(s, "hold", "i", 0.0)
    request(s, "b0", "x", 0.5)
    level = s.turns["b0"].level
    assert level > 0
    assert kinds(decisions(decide(s, None, None, 100.4))) == [ev.LEVELS_BOOSTED]
    assert decisions(decide(s, None, None, 100.6)) == [] and s.turns["b0"].level == level
    assert kinds(decisions(decide(s, None, None, 200.4))) == [ev.LEVELS_BOOSTED]
    assert s.turns["b0"].level == 0


def test_turns_granted_in_one_pass_take_the_free_lanes_lowest_first():
    s = pool(lanes=4)
    register(s, "a")
    for i in range(4):
        request(s, f"t{i}", "a", 0.0)
    complete(s, "t0", 1.0)
    complete(s, "t1", 1.0)
    complete(s, "t3", 1.0)                      # lanes 0, 1 and 3 free; 2 busy
    assert s.lanes == [None, None, "t2", None]
    out = decisions(decide_many(s, [(ev.TURN_REQUESTED, {"turn_id": f"n{i}", "agent_id": "a",
                                                         "estimated_tokens": 100, "at": 2.0}, None)
                                    for i in range(3)], 2.0))
    assert [(d["turn_id"], d["lane"]) for t, d in out if t == ev.TURN_GRANTED] == [("n0", 0), ("n1", 1), ("n2", 3)]


# -- rule 4: demotion moves the agent's queued turns, in order, and resets its usage -------

def test_demotion_moves_only_that_agents_queued_turns_in_arrival_order():
    s = pool(lanes=1, allotment_seconds=(10.0, 20.0, math.inf))
    register(s, "a")
    register(s, "b")
    request(s, "a1", "a", 0.0)                     # granted
    request(s, "a2", "a", 1.0)
    request(s, "b1", "b", 2.0)
    request(s, "a3", "a", 3.0)
    out = complete(s, "a1", 11.0, p=10, c=5)       # 11 lane-seconds: demoted
    assert kinds(out) == [ev.TURN_COMPLETED, ev.AGENT_DEMOTED, ev.TURN_GRANTED]
    assert s.queues == [[], ["a2", "a3"], []]      # b1 was granted; a's turns keep their order
    assert out[2][1]["turn_id"] == "b1"
    agent = s.agents["a"]
    assert (agent.level, agent.used_seconds, agent.used_tokens) == (1, 0.0, 0.0)
    assert s.turns["a2"].level == 1 and s.turns["a3"].level == 1 and s.turns["b1"].level == 0


def test_a_granted_turn_keeps_its_level_when_its_agent_is_demoted():
    s = pool(lanes=2, allotment_seconds=(10.0, 20.0, math.inf))
    register(s, "a")
    request(s, "a1", "a", 0.0)
    request(s, "a2", "a", 0.0)                     # both granted
    complete(s, "a1", 11.0)
    assert s.agents["a"].level == 1
    assert s.turns["a2"].level == 0 and s.queues == [[], [], []]


# -- the start estimator ------------------------------------------------------------------------

def test_the_estimators_second_sample_weighs_half_in_mean_and_deviation():
    e = StartEstimator()
    e.observe(1.0, 0)                              # log 1 = 0; deviation starts at 0.5
    assert (e.srtt, e.rttvar, e.samples) == (0.0, 0.5, 1)
    e.observe(math.e, 0)                           # log e = 1, gains 1/2
    assert e.rttvar == pytest.approx(0.5 * 0.5 + 0.5 * 1.0)
    assert e.srtt == pytest.approx(0.5)


def test_the_estimators_gains_settle_at_a_32nd_and_a_16th():
    e = StartEstimator(srtt=0.0, rttvar=0.0, samples=100)
    e.observe(math.e, 0)
    assert e.srtt == pytest.approx(1 / 32) and e.rttvar == pytest.approx(1 / 16)


def test_samples_are_scaled_to_the_prompt():
    e = StartEstimator()
    e.observe(3.0, 20_000)                         # size 1 + 20000/10000 = 3: a 1 s base
    assert e.srtt == pytest.approx(0.0)
    assert StartEstimator.size(-5) == 1.0


def test_the_start_deadline_keeps_a_50_percent_margin_and_caps_karns_backoff():
    e = StartEstimator(srtt=0.0, rttvar=0.0, samples=8)
    assert e.timeout(0, 0.1, 1e9, 0) == pytest.approx(1.5)      # exp(log 1.5): the minimum margin
    assert e.timeout(0, 0.1, 1e9, 3) == pytest.approx(12.0)
    assert e.timeout(0, 0.1, 1e9, 16) == pytest.approx(1.5 * 2 ** 16)
    assert e.timeout(0, 0.1, 1e9, 17) == pytest.approx(1.5 * 2 ** 16)   # at most 16 doublings
    assert e.timeout(0, 0.1, 1e9, 10_000) == pytest.approx(1.5 * 2 ** 16)
    wide = StartEstimator(srtt=0.0, rttvar=0.25, samples=8)
    assert wide.timeout(0, 0.1, 1e9, 0) == pytest.approx(math.e)  # 4 * 0.25 = 1 over the minimum
    assert StartEstimator(srtt=0.0, rttvar=0.0, samples=7).timeout(0, 0.1, 30.0, 0) == 30.0


# -- the provider report's ageing ---------------------------------------------------------------

def test_a_tokens_only_report_is_aged_and_a_fresh_one_barely():
    s = pool(lanes=2, tpm=60_000)
    register(s, "a")
    request(s, "t1", "a", 0.0, est=100)
    out = complete(s, "t1", 0.5, rate_limit_headers={"x-ratelimit-remaining-tokens": "5000"})
    # half a second old: + 500 tokens refilled by the provider, nothing granted since
    assert out[1] == (ev.RATE_OBSERVED, {"turn_id": "t1", "remaining_tokens": 5500.0,
                                         "observed_remaining_tokens": 5000.0, "age_s": 0.5, "at": 0.5})
    assert s.tokens.level == 5500.0


# -- the stored form of the state ---------------------------------------------------------------

def busy_state():
    s = pool(lanes=2, lease_seconds=30.0, start_timeout_floor_seconds=0.5)
    register(s, "a")
    register(s, "b", ev.BATCH)
    for i in range(3):
        request(s, f"w{i}", "a", float(i), est=0, streams=True)
        decide(s, ev.HEARTBEAT_SENT, {"turn_id": f"w{i}"}, i + 0.5)
        complete(s, f"w{i}", i + 0.75)
    request(s, "t1", "b", 5.0)
    request(s, "t2", "a", 5.0)
    request(s, "t3", "b", 5.0)
    return s


def test_the_stored_form_keeps_the_estimator_and_the_grant_counters():
    s = busy_state()
    assert s.start.samples == 3 and s.granted_total == 5 and s.reserved_total == 200
    back = PoolState.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back.start == s.start
    assert (back.granted_total, back.reserved_total) == (5, 200)
    assert back.canonical_json() == s.canonical_json()


def test_a_stored_form_from_before_the_counters_and_estimator_reads_as_fresh():
    d = busy_state().to_dict()
    for key in ("reserved_total", "granted_total", "start"):
        del d[key]
    back = PoolState.from_dict(d)
    assert back.reserved_total == 0.0 and back.granted_total == 0
    assert back.start == StartEstimator()


def test_the_canonical_form_is_compact_json_with_sorted_keys():
    s = busy_state()
    text = s.canonical_json()
    assert text.startswith('{"agents":{"a":{"agent_id":"a",')
    assert ", " not in text and '": ' not in text
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_a_copy_is_equal_and_independent():
    s = busy_state()
    c = s.copy()
    assert c.canonical_json() == s.canonical_json()
    decide(c, ev.COMPLETION_REPORTED, {"turn_id": "t1", "prompt_tokens": 1, "completion_tokens": 1}, 6.0)
    assert "t1" in s.turns and "t1" not in c.turns


def test_bucket_wait_counts_only_the_shortfall():
    b = Bucket(limit_per_minute=600, level=100.0, updated_at=0.0)
    assert b.seconds_until(400, 0.0, 1.0) == 30.0          # 300 short at 10 per second
    assert b.seconds_until(400, 10.0, 1.0) == 20.0         # 100 refilled by then
    assert b.seconds_until(100, 0.0, 1.0) == 0.0
    assert b.seconds_until(601, 0.0, 1.0) == math.inf      # never fits the capacity


# -- what the fold accumulates ------------------------------------------------------------------

def test_an_agents_usage_and_counts_accumulate_over_completions_cancels_and_reaps():
    s = pool(lanes=1, lease_seconds=5.0, allotment_seconds=(100.0, 200.0, math.inf),
             quarantine_after_reaps=5)
    register(s, "a")
    assert s.agents["a"].name == "a"
    request(s, "t1", "a", 0.0)
    complete(s, "t1", 2.0, p=10, c=5)              # 2 s, 15 tokens
    request(s, "t2", "a", 2.0)
    complete(s, "t2", 3.0, p=20, c=5)              # 1 s, 25 tokens
    agent = s.agents["a"]
    assert (agent.used_seconds, agent.used_tokens, agent.completions) == (3.0, 40, 2)
    request(s, "t3", "a", 3.0)
    decide(s, ev.CANCEL_REQUESTED, {"turn_id": "t3"}, 7.0)     # 4 s held
    assert agent.used_seconds == 7.0
    request(s, "t4", "a", 7.0)
    decide(s, None, None, 12.25)                   # reaped: 5.25 s held
    assert agent.used_seconds == 12.25 and agent.reaps == 1
    request(s, "t5", "a", 13.0)
    decide(s, None, None, 18.25)
    assert agent.used_seconds == 17.5 and agent.reaps == 2 and agent.completions == 2


def test_the_boost_clears_every_agents_usage():
    s = pool(lanes=1, boost_seconds=10.0, allotment_seconds=(100.0, 200.0, math.inf))
    register(s, "a")
    request(s, "t1", "a", 0.0)
    complete(s, "t1", 4.0, p=10, c=5)
    assert s.agents["a"].used_seconds == 4.0
    assert kinds(decisions(decide(s, None, None, 10.0))) == [ev.LEVELS_BOOSTED]
    assert (s.agents["a"].used_seconds, s.agents["a"].used_tokens) == (0.0, 0.0)


def test_a_new_pool_starts_its_clocks_at_its_creation():
    s = new_pool({"settings": PoolSettings(boost_seconds=60.0, policy="mlfq").to_dict(), "at": 1000.0})
    assert (s.created_at, s.clock, s.rate_factor_at, s.last_boost_at) == (1000.0, 1000.0, 1000.0, 1000.0)
    register(s, "a", now=1000.0)
    assert next_deadline(s, 1000.0) == 1060.0      # the first boost one period after creation
    assert kinds(decisions(decide(s, None, None, 1059.0))) == []


# -- boost and aging in one pass -------------------------------------------------------------

def test_a_turn_due_for_aging_at_the_boost_is_lifted_by_the_boost_alone():
    s = pool(boost_seconds=50.0)
    register(s, "i")
    register(s, "bg", ev.BACKGROUND)
    request(s, "hold", "i", 0.0)
    request(s, "b0", "bg", 0.0)
    # At 50 the boost is due and b0 has waited exactly one period: one decision, level 0.
    assert kinds(decisions(decide(s, None, None, 50.0))) == [ev.LEVELS_BOOSTED]
    assert s.queues == [["b0"], [], []]


def test_aging_checks_every_level_even_when_a_higher_ones_head_is_young():
    s = pool(boost_seconds=50.0)
    register(s, "i")
    register(s, "b", ev.BATCH)
    register(s, "bg", ev.BACKGROUND)
    request(s, "hold", "i", 0.0)
    request(s, "old", "bg", 20.0)
    request(s, "young", "b", 45.0)
    assert kinds(decisions(decide(s, None, None, 50.0))) == [ev.LEVELS_BOOSTED]   # both stay
    # At 70 old has waited 50 s, young (one level up) only 25 s.
    out = decisions(decide(s, None, None, 70.0))
    assert [(t, d["turn_id"]) for t, d in out] == [(ev.TURN_PROMOTED, "old")]
    assert s.queues == [["old"], ["young"], []]


# -- quarantine, in-time inputs, the start deadline near the lease ---------------------------

def test_a_quarantine_cancels_only_that_agents_queued_turns():
    s = pool(lanes=2, lease_seconds=5.0, quarantine_after_reaps=1)
    register(s, "z")
    register(s, "b")
    request(s, "z1", "z", 0.0)
    request(s, "b1", "b", 0.0)                     # both lanes taken
    request(s, "z2", "z", 1.0)
    request(s, "b2", "b", 1.0)
    decide(s, ev.HEARTBEAT_SENT, {"turn_id": "b1"}, 4.0)
    out = decisions(decide(s, None, None, 5.25))
    assert [(t, d.get("turn_id")) for t, d in out][:3] == [
        (ev.TURN_REAPED, "z1"), (ev.AGENT_QUARANTINED, None), (ev.TURN_CANCELLED, "z2")]
    assert "b1" in s.turns and "b2" in s.turns


def test_a_heartbeat_stamped_exactly_at_the_deadline_is_in_time():
    s = pool(lease_seconds=5.0)
    register(s, "a")
    request(s, "t1", "a", 1.0)                     # expires at 6.0
    out = decisions(decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t1", "at": 6.0}, 7.0))
    assert kinds(out) == [ev.LEASE_EXTENDED]


def test_a_start_deadline_half_a_second_short_of_the_lease_is_not_a_full_lease():
    s = pool(lanes=1, lease_seconds=2.0, start_timeout_floor_seconds=0.5)
    register(s, "a")
    now = 100.0
    for i in range(8):                             # first chunks after 1.0 s: deadline 1.5 s
        request(s, f"w{i}", "a", now, est=0, streams=True)
        decide(s, ev.HEARTBEAT_SENT, {"turn_id": f"w{i}", "at": now + 1.0}, now + 1.0)
        complete(s, f"w{i}", now + 1.5)
        now += 10.0
    request(s, "hung", "a", now, est=0, streams=True)
    out = decisions(decide(s, None, None, now + 1.75))
    assert out[0][1]["full_lease"] is False and s.agents["a"].consecutive_reaps == 0


# -- inputs: defaults and headers ---------------------------------------------------------------

def test_a_request_of_exactly_the_tpm_without_an_output_cap_is_admitted():
    s = pool(tpm=1_000)
    register(s, "a")
    assert kinds(request(s, "t1", "a", 0.0, est=1_000)) == [ev.TURN_QUEUED, ev.TURN_GRANTED]


def test_a_provider_reporting_nothing_left_empties_the_bucket():
    s = pool(lanes=1)
    register(s, "a")
    request(s, "t1", "a", 0.0)
    complete(s, "t1", 0.0, rate_limit_headers={"x-ratelimit-remaining-requests": "0",
                                               "x-ratelimit-remaining-tokens": "0"})
    assert s.requests.level == 0.0 and s.tokens.level == 0.0


def test_an_anthropic_reset_instant_is_read_against_the_completions_time():
    s = pool(lanes=1)
    register(s, "a")
    request(s, "t1", "a", 0.0)
    out = complete(s, "t1", 2.0, rate_limit_headers={"anthropic-ratelimit-tokens-reset": "1970-01-01T00:01:00Z"})
    assert out[1][1]["reset_tokens_s"] == 58.0     # the instant 60 s after the epoch, 2 s on


def test_a_report_is_aged_by_what_was_granted_after_that_turn_only():
    s = pool(lanes=3, rpm=600, tpm=60_000)
    register(s, "a")
    request(s, "t0", "a", 0.0, est=100)
    request(s, "t1", "a", 0.0, est=200)
    request(s, "t2", "a", 0.0, est=400)            # granted after t1
    headers = {"x-ratelimit-remaining-tokens": "5000", "x-ratelimit-remaining-requests": "50"}
    out = complete(s, "t1", 1.0, rate_limit_headers=headers)
    observed = out[1][1]
    # 1 s old: + 10 requests and 1000 tokens refilled; t2's request and 400 tokens since
    assert observed["remaining_requests"] == 50 + 10 - 1
    assert observed["remaining_tokens"] == 5000 + 1000 - 400

"""The exact payload of every decision type.

A decision's field names and values are the public event schema: the read models, the
API, `audit explain` and every client replaying the log read them, while apply() reads
only some. So each test pins whole payloads, every field, with values worked out by hand
in the comments. Decisions are reached through `decisions()` alone, so that a change in
how decide() returns them is a one-line change here.
"""
from __future__ import annotations

import math

import pytest

from app.domain import events as ev
from app.domain.admission import jitter
from app.domain.apply import new_pool
from app.domain.decide import decide, decide_many
from app.domain.settings import PoolSettings
from tests.unit.limits import TRUSTED_BUCKET


def decisions(out) -> list[tuple[str, dict]]:
    """decide()'s output as (type, payload) pairs: the only place that unpacks it."""
    return [(t, d) for t, d in out]


def pool(**kw):
    s = PoolSettings(**{"lanes": 1, "rpm": 600, "tpm": 60_000, "lease_seconds": 5.0, "policy": "mlfq",
                        **TRUSTED_BUCKET, **kw})
    return new_pool({"settings": s.to_dict(), "at": 0.0})


def register(state, agent_id, cls=ev.INTERACTIVE, now=0.0, cause=None):
    return decisions(decide(state, ev.AGENT_REGISTERED,
                            {"agent_id": agent_id, "name": f"name-{agent_id}", "priority_class": cls},
                            now, cause=cause))


def request(state, turn_id, agent_id, now, cause=None, **fields):
    data = {"turn_id": turn_id, "agent_id": agent_id, "estimated_tokens": 300, "at": now, **fields}
    return decisions(decide(state, ev.TURN_REQUESTED, data, now, cause=cause))


def complete(state, turn_id, now, p=250, c=100, outcome=ev.OK, **extra):
    data = {"turn_id": turn_id, "outcome": outcome, "prompt_tokens": p, "completion_tokens": c, **extra}
    return decisions(decide(state, ev.COMPLETION_REPORTED, data, now))


def tick(state, now):
    return decisions(decide(state, None, None, now))


# -- admission and queueing ---------------------------------------------------------------

def test_agent_admitted_at_its_class_entry_level_citing_its_input():
    s = pool()
    assert register(s, "a", ev.BATCH, now=0.0, cause=7) == [
        (ev.AGENT_ADMITTED, {"agent_id": "a", "name": "name-a", "priority_class": ev.BATCH, "level": 1,
                             "at": 0.0, "cause": 7})]
    assert s.inputs_through == 7
    assert register(s, "a", ev.BATCH, now=1.0, cause=8) == []      # a replayed registration
    assert s.inputs_through == 7


def test_turn_queued_and_granted_carry_the_whole_request():
    s = pool()
    register(s, "a", ev.BATCH)
    # Stamped by the client at 0.5, answered at 1.0: requested_at is the client's stamp.
    out = request(s, "t1", "a", 1.0, cause=8, max_output_tokens=200, at=0.5)
    assert out == [
        (ev.TURN_QUEUED, {"turn_id": "t1", "agent_id": "a", "level": 1, "seq": 0, "estimated_tokens": 300,
                          "max_output_tokens": 200, "requested_at": 0.5, "priority_class": ev.BATCH,
                          "streams": False, "at": 1.0, "cause": 8}),
        # lease 5 s from the grant at 1.0; reserve 300 + 200 tokens
        (ev.TURN_GRANTED, {"turn_id": "t1", "agent_id": "a", "lane": 0, "level": 1, "lease_expires_at": 6.0,
                           "reserved_tokens": 500, "at": 1.0, "cause": 8})]
    assert s.inputs_through == 8
    assert s.turns["t1"].requested_at == 0.5 and s.turns["t1"].queued_at == 1.0
    assert (s.reserved_total, s.granted_total) == (500, 1)


def test_a_request_without_a_stamp_or_output_cap_is_queued_at_now_with_no_output_reserve():
    s = pool()
    register(s, "a")
    request(s, "hold", "a", 0.0)
    data = {"turn_id": "t2", "agent_id": "a", "estimated_tokens": 300, "streams": 1}
    out = decisions(decide(s, ev.TURN_REQUESTED, data, 2.0))
    assert out == [
        (ev.TURN_QUEUED, {"turn_id": "t2", "agent_id": "a", "level": 0, "seq": 1, "estimated_tokens": 300,
                          "max_output_tokens": 0, "requested_at": 2.0, "priority_class": ev.INTERACTIVE,
                          "streams": True, "at": 2.0})]
    assert s.next_seq == 2


def test_sequence_numbers_count_up_by_one_per_queued_turn():
    s = pool()
    register(s, "a")
    for i in range(4):
        request(s, f"t{i}", "a", float(i))
    assert [s.turns[f"t{i}"].seq for i in range(4)] == [0, 1, 2, 3]
    assert s.next_seq == 4


def test_refusals_name_their_reason():
    s = pool(tpm=1_000, quarantine_after_reaps=1)
    register(s, "a")
    assert request(s, "t1", "nobody", 1.0) == [
        (ev.TURN_CANCELLED, {"turn_id": "t1", "agent_id": "nobody", "reason": "unknown agent", "at": 1.0})]
    assert request(s, "t2", "a", 1.0, max_output_tokens=701) == [
        (ev.TURN_CANCELLED, {"turn_id": "t2", "agent_id": "a", "at": 1.0,
                             "reason": "reservation of 1001 tokens exceeds the pool's tpm of 1000"})]
    # Exactly the tpm fits.
    assert [t for t, _ in request(s, "t3", "a", 1.0, max_output_tokens=700)] == [ev.TURN_QUEUED, ev.TURN_GRANTED]
    tick(s, 6.25)                                  # reaped: quarantined after one reap
    assert s.agents["a"].state == ev.QUARANTINED
    assert request(s, "t4", "a", 7.0) == [
        (ev.TURN_CANCELLED, {"turn_id": "t4", "agent_id": "a", "reason": "agent quarantined", "at": 7.0})]
    assert "t1" not in s.turns and "t4" not in s.turns


# -- leases, completion, cancel -----------------------------------------------------------

def test_lease_extended_is_now_plus_a_lease():
    s = pool()
    register(s, "a")
    request(s, "t1", "a", 1.0)
    assert decisions(decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t1"}, 2.0)) == [
        (ev.LEASE_EXTENDED, {"turn_id": "t1", "agent_id": "a", "lease_expires_at": 7.0, "at": 2.0})]
    assert s.turns["t1"].progressed is True
    # A heartbeat for a queued or unknown turn decides nothing.
    request(s, "t2", "a", 2.0)
    assert decisions(decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t2"}, 3.0)) == []
    assert decisions(decide(s, ev.HEARTBEAT_SENT, {"turn_id": "zz"}, 3.0)) == []


def test_turn_completed_reports_usage_hold_and_history():
    s = pool()
    register(s, "a", ev.BATCH)
    request(s, "t1", "a", 1.0, max_output_tokens=200)
    request(s, "t2", "a", 1.5)
    out = complete(s, "t1", 3.0)
    assert out == [
        (ev.TURN_COMPLETED, {"turn_id": "t1", "agent_id": "a", "lane": 0, "outcome": ev.OK, "prompt_tokens": 250,
                             "completion_tokens": 100, "lane_seconds": 2.0, "reserved_tokens": 500, "level": 1,
                             "queued_at": 1.0, "granted_at": 1.0, "at": 3.0}),
        (ev.TURN_GRANTED, {"turn_id": "t2", "agent_id": "a", "lane": 0, "level": 1, "lease_expires_at": 8.0,
                           "reserved_tokens": 300, "at": 3.0})]
    agent = s.agents["a"]
    assert (agent.completions, agent.reaps, agent.used_seconds, agent.used_tokens) == (1, 0, 2.0, 350)
    # A completion for a turn that is not granted (queued, unknown, already done) decides nothing.
    assert complete(s, "t1", 4.0) == [] and complete(s, "zz", 4.0) == []
    request(s, "t3", "a", 4.0)
    assert complete(s, "t3", 4.0) == []


def test_a_completion_without_usage_or_outcome_counts_zero_tokens_ok():
    s = pool()
    register(s, "a")
    request(s, "t1", "a", 1.0)
    out = decisions(decide(s, ev.COMPLETION_REPORTED, {"turn_id": "t1", "prompt_tokens": None}, 2.0))
    assert out == [
        (ev.TURN_COMPLETED, {"turn_id": "t1", "agent_id": "a", "lane": 0, "outcome": ev.OK, "prompt_tokens": 0,
                             "completion_tokens": 0, "lane_seconds": 1.0, "reserved_tokens": 300, "level": 0,
                             "queued_at": 1.0, "granted_at": 1.0, "at": 2.0})]


def test_cancelling_a_queued_turn_frees_nothing_and_charges_nothing():
    s = pool()
    register(s, "a")
    request(s, "t1", "a", 1.0)
    request(s, "t2", "a", 1.0)
    out = decisions(decide(s, ev.CANCEL_REQUESTED, {"turn_id": "t2"}, 2.0))
    assert out == [(ev.TURN_CANCELLED, {"turn_id": "t2", "agent_id": "a", "reason": "cancelled", "lane": None,
                                        "lane_seconds": 0.0, "at": 2.0})]
    assert s.agents["a"].used_seconds == 0.0
    assert decisions(decide(s, ev.CANCEL_REQUESTED, {"turn_id": "t2"}, 2.5)) == []


def test_cancelling_a_granted_turn_reports_its_lane_and_hold_and_may_demote():
    s = pool(lanes=2, lease_seconds=30.0, allotment_seconds=(10.0, 20.0, math.inf))
    register(s, "a")
    request(s, "t1", "a", 1.0)
    out = decisions(decide(s, ev.CANCEL_REQUESTED, {"turn_id": "t1", "reason": "user hit stop"}, 12.0))
    assert out == [
        (ev.TURN_CANCELLED, {"turn_id": "t1", "agent_id": "a", "reason": "user hit stop", "lane": 0,
                             "lane_seconds": 11.0, "at": 12.0}),
        # 11 lane-seconds against a 10 s allotment at level 0
        (ev.AGENT_DEMOTED, {"agent_id": "a", "from_level": 0, "to_level": 1, "reason": "lane-seconds",
                            "used_seconds": 11.0, "used_tokens": 0.0, "allotment_seconds": 10.0,
                            "allotment_tokens": 32_000, "at": 12.0})]
    assert s.lanes == [None, None]


# -- rule 4 and 5: demotion, boost, aging ---------------------------------------------------

def test_agent_demoted_by_tokens_reports_both_allotments():
    s = pool(allotment_tokens=(1_000, 2_000, math.inf))
    register(s, "a")
    request(s, "t1", "a", 1.0)
    out = complete(s, "t1", 2.0, p=900, c=100)     # 1000 tokens: exactly the allotment
    assert out[1] == (ev.AGENT_DEMOTED, {"agent_id": "a", "from_level": 0, "to_level": 1, "reason": "tokens",
                                         "used_seconds": 1.0, "used_tokens": 1_000, "allotment_seconds": 30.0,
                                         "allotment_tokens": 1_000, "at": 2.0})
    assert s.agents["a"].level == 1


def test_an_unbounded_allotment_is_reported_as_none():
    s = pool(levels=3, allotment_seconds=(10.0, math.inf, math.inf), allotment_tokens=(math.inf, 5.0, math.inf))
    register(s, "a")
    request(s, "t1", "a", 1.0)
    out = complete(s, "t1", 11.0, p=0, c=0)        # exactly 10 lane-seconds at level 0
    assert out[1] == (ev.AGENT_DEMOTED, {"agent_id": "a", "from_level": 0, "to_level": 1,
                                         "reason": "lane-seconds", "used_seconds": 10.0, "used_tokens": 0,
                                         "allotment_seconds": 10.0, "allotment_tokens": None, "at": 11.0})
    request(s, "t2", "a", 12.0)
    out = complete(s, "t2", 13.0, p=5, c=0)
    assert out[1] == (ev.AGENT_DEMOTED, {"agent_id": "a", "from_level": 1, "to_level": 2, "reason": "tokens",
                                         "used_seconds": 1.0, "used_tokens": 5, "allotment_seconds": None,
                                         "allotment_tokens": 5.0, "at": 13.0})


def test_boost_and_promotion_payloads():
    s = pool(lanes=1, boost_seconds=50.0, lease_seconds=100.0)
    register(s, "i")
    register(s, "bg", ev.BACKGROUND)
    request(s, "hold", "i", 0.0)                   # holds the only lane throughout
    request(s, "b0", "bg", 1.0)
    assert tick(s, 50.0) == [(ev.LEVELS_BOOSTED, {"at": 50.0})]   # the periodic boost: only its time
    assert s.last_boost_at == 50.0 and s.queues == [[], [], ["b0"]]
    # b0, queued at 1.0, has waited one boost period at 51.0: aged to level 0 there and then
    assert tick(s, 51.0) == [(ev.TURN_PROMOTED, {"turn_id": "b0", "agent_id": "bg", "from_level": 2,
                                                 "to_level": 0, "waited": 50.0, "at": 51.0})]
    assert s.queues == [["b0"], [], []] and s.turns["b0"].level == 0


# -- reaps and quarantine ---------------------------------------------------------------------

def test_reap_quarantine_and_its_cancellations():
    s = pool(quarantine_after_reaps=2)
    register(s, "a", ev.BATCH)
    request(s, "t1", "a", 1.0)
    assert tick(s, 6.25) == [                       # lease 6.0 + 0.25 s grace
        (ev.TURN_REAPED, {"turn_id": "t1", "agent_id": "a", "lane": 0, "lease_expires_at": 6.0,
                          "granted_at": 1.0, "at": 6.25})]
    agent = s.agents["a"]
    assert (agent.reaps, agent.consecutive_reaps, agent.completions, agent.used_seconds) == (1, 1, 0, 5.25)
    request(s, "t2", "a", 10.0)
    request(s, "t3", "a", 10.0)
    request(s, "t4", "a", 10.0)
    assert tick(s, 15.25) == [
        (ev.TURN_REAPED, {"turn_id": "t2", "agent_id": "a", "lane": 0, "lease_expires_at": 15.0,
                          "granted_at": 10.0, "at": 15.25}),
        (ev.AGENT_QUARANTINED, {"agent_id": "a", "consecutive_reaps": 2, "at": 15.25}),
        (ev.TURN_CANCELLED, {"turn_id": "t3", "agent_id": "a", "reason": "agent quarantined", "at": 15.25}),
        (ev.TURN_CANCELLED, {"turn_id": "t4", "agent_id": "a", "reason": "agent quarantined", "at": 15.25})]
    assert s.turns == {} and s.queued_count() == 0
    assert (agent.reaps, agent.consecutive_reaps) == (2, 2)
    # Releasing lifts it and clears its counts; releasing an active agent decides nothing.
    assert decisions(decide(s, ev.AGENT_RELEASED, {"agent_id": "a"}, 16.0)) == [
        (ev.QUARANTINE_LIFTED, {"agent_id": "a", "at": 16.0})]
    assert (agent.state, agent.consecutive_reaps, agent.start_misses) == (ev.ACTIVE, 0, 0)
    assert decisions(decide(s, ev.AGENT_RELEASED, {"agent_id": "a"}, 17.0)) == []
    assert decisions(decide(s, ev.AGENT_RELEASED, {"agent_id": "nobody"}, 17.0)) == []


def test_a_completion_clears_the_consecutive_reap_count_but_not_the_total():
    s = pool(quarantine_after_reaps=2)
    register(s, "a")
    request(s, "t1", "a", 1.0)
    tick(s, 6.25)
    request(s, "t2", "a", 7.0)
    complete(s, "t2", 8.0)
    agent = s.agents["a"]
    assert (agent.reaps, agent.consecutive_reaps, agent.completions) == (1, 0, 1)
    request(s, "t3", "a", 9.0)
    tick(s, 14.25)
    assert agent.state == ev.ACTIVE and agent.consecutive_reaps == 1


# -- rate control -------------------------------------------------------------------------------

def test_pool_paused_payload_with_the_default_retry_after():
    s = pool(jitter_seconds=0.0)
    register(s, "a")
    request(s, "t1", "a", 1.0)
    out = complete(s, "t1", 3.0, outcome=ev.RATE_LIMITED)
    assert out[1] == (ev.POOL_PAUSED, {"turn_id": "t1", "until": 5.0, "retry_after": 2.0, "jitter": 0.0,
                                       "rate_factor": 0.5, "at": 3.0})
    assert out[0][1]["outcome"] == ev.RATE_LIMITED


def test_pool_paused_payload_takes_the_header_retry_after_and_its_jitter():
    s = pool(jitter_seconds=1.0)
    register(s, "a")
    request(s, "t1", "a", 1.0)
    out = complete(s, "t1", 3.0, outcome=ev.RATE_LIMITED, rate_limit_headers={"retry-after": "7"})
    spread = jitter("t1", 1.0)
    assert 0.0 < spread < 1.0
    assert out[2] == (ev.POOL_PAUSED, {"turn_id": "t1", "until": 3.0 + 7.0 + spread, "retry_after": 7.0,
                                       "jitter": spread, "rate_factor": 0.5, "at": 3.0})
    assert out[1] == (ev.RATE_OBSERVED, {"turn_id": "t1", "retry_after_s": 7.0, "age_s": 2.0, "at": 3.0})


def test_a_retry_after_is_capped_at_an_hour_and_a_pause_never_shortens():
    s = pool(lanes=2, jitter_seconds=0.0)
    register(s, "a")
    request(s, "t1", "a", 1.0)
    request(s, "t2", "a", 1.0)
    out = complete(s, "t1", 2.0, outcome=ev.RATE_LIMITED, retry_after_seconds=10_000)
    assert out[1][1]["retry_after"] == 3600.0 and out[1][1]["until"] == 3602.0
    out = complete(s, "t2", 2.0, outcome=ev.RATE_LIMITED, retry_after_seconds=1)
    # the second 429 would end at 3.0; the pause already runs to 3602.0; the factor halves again
    assert out[1] == (ev.POOL_PAUSED, {"turn_id": "t2", "until": 3602.0, "retry_after": 1.0, "jitter": 0.0,
                                       "rate_factor": 0.25, "at": 2.0})
    assert tick(s, 3601.0) == [(ev.LEVELS_BOOSTED, {"at": 3601.0})]    # still paused
    assert tick(s, 3602.0) == [(ev.POOL_RESUMED, {"at": 3602.0})]
    assert s.paused_until is None


def test_rate_observed_is_aged_to_now():
    s = pool(lanes=2, rpm=600, tpm=60_000)
    register(s, "a")
    request(s, "t1", "a", 0.0, estimated_tokens=100)
    request(s, "t2", "a", 0.0, estimated_tokens=200)     # granted after t1: admitted after it too
    headers = {"x-ratelimit-remaining-tokens": "5000", "x-ratelimit-remaining-requests": "50"}
    out = complete(s, "t1", 2.0, p=0, c=0, rate_limit_headers=headers)
    # 2 s old: the provider refilled 2 * 1000 tokens and 2 * 10 requests since; we granted
    # one more request (t2) and 200 more tokens since.
    assert out[1] == (ev.RATE_OBSERVED, {"turn_id": "t1", "remaining_requests": 50 + 20 - 1,
                                         "observed_remaining_requests": 50.0,
                                         "remaining_tokens": 5000 + 2000 - 200,
                                         "observed_remaining_tokens": 5000.0, "age_s": 2.0, "at": 2.0})


def test_rate_observed_ages_at_the_providers_own_limits():
    s = pool(lanes=1, rpm=600, tpm=60_000)
    register(s, "a")
    request(s, "t1", "a", 0.0, estimated_tokens=100)
    headers = {"x-ratelimit-remaining-tokens": "5000", "x-ratelimit-limit-tokens": "120000",
               "x-ratelimit-remaining-requests": "50", "x-ratelimit-limit-requests": "1200"}
    out = complete(s, "t1", 2.0, p=0, c=0, rate_limit_headers=headers)
    assert out[1] == (ev.RATE_OBSERVED, {"turn_id": "t1", "remaining_requests": 50 + 2 * 20,
                                         "observed_remaining_requests": 50.0, "limit_requests": 1200.0,
                                         "remaining_tokens": 5000 + 2 * 2000, "limit_tokens": 120_000.0,
                                         "observed_remaining_tokens": 5000.0, "age_s": 2.0, "at": 2.0})
    assert s.tokens.level == 9000 and s.requests.level == 90


# -- batches: causes ------------------------------------------------------------------------------

def test_a_batch_cites_each_input_and_grants_cite_the_last():
    s = pool(lanes=2)
    inputs = [(ev.AGENT_REGISTERED, {"agent_id": "a", "name": "A", "priority_class": ev.INTERACTIVE}, 11),
              (ev.TURN_REQUESTED, {"turn_id": "t1", "agent_id": "a", "estimated_tokens": 10, "at": 1.0}, 12),
              (ev.TURN_REQUESTED, {"turn_id": "t2", "agent_id": "a", "estimated_tokens": 10, "at": 1.0}, 13)]
    out = decisions(decide_many(s, inputs, 1.0))
    assert [(t, d.get("turn_id"), d["cause"]) for t, d in out] == [
        (ev.AGENT_ADMITTED, None, 11), (ev.TURN_QUEUED, "t1", 12), (ev.TURN_QUEUED, "t2", 13),
        (ev.TURN_GRANTED, "t1", 13), (ev.TURN_GRANTED, "t2", 13)]
    assert s.inputs_through == 13
    # Timers fired by a tick cite no input.
    out = decisions(decide_many(s, [], 7.0))
    assert [t for t, _ in out] == [ev.TURN_REAPED, ev.TURN_REAPED]
    assert all("cause" not in d for _, d in out) and s.inputs_through == 13


# -- streaming turns: the start deadline ---------------------------------------------------------

def stream_pool(**overrides):
    return pool(**{"lease_seconds": 30.0, "start_timeout_floor_seconds": 0.5, **overrides})


def warm(s, agent_id, now=100.0, samples=8):
    """`samples` streaming turns (no prompt) whose first chunk comes 1.0 s after the grant:
    the estimate is then srtt = log 1 = 0 with a deviation under the 50% minimum margin,
    so the warm start deadline is 1.5 s."""
    for i in range(samples):
        request(s, f"w{i}", agent_id, now, estimated_tokens=0, streams=True)
        decide(s, ev.HEARTBEAT_SENT, {"turn_id": f"w{i}", "at": now + 1.0}, now + 1.0)
        complete(s, f"w{i}", now + 2.0)
        now += 10.0
    return now


def test_a_cold_streaming_grant_gets_the_whole_lease_and_its_first_chunk_is_measured():
    s = stream_pool()
    register(s, "a")
    out = request(s, "t1", "a", 1.0, estimated_tokens=0, streams=True)
    assert out[1] == (ev.TURN_GRANTED, {"turn_id": "t1", "agent_id": "a", "lane": 0, "level": 0,
                                        "lease_expires_at": 31.0, "reserved_tokens": 0, "start_deadline": True,
                                        "at": 1.0})
    # Stamped at 1.75, read at 2.0: measured at its stamp.
    # Once streaming, each heartbeat extends it to the stall deadline (6 s), not the lease.
    out = decisions(decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t1", "at": 1.75}, 2.0))
    assert out == [(ev.LEASE_EXTENDED, {"turn_id": "t1", "agent_id": "a", "lease_expires_at": 8.0,
                                        "first_chunk_s": 0.75, "stall_deadline": True, "at": 2.0})]
    assert s.start.samples == 1
    # Only the first chunk is a sample.
    out = decisions(decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t1", "at": 3.0}, 3.0))
    assert out == [(ev.LEASE_EXTENDED, {"turn_id": "t1", "agent_id": "a", "lease_expires_at": 9.0,
                                        "stall_deadline": True, "at": 3.0})]
    assert s.start.samples == 1


def test_without_a_stall_deadline_a_first_chunk_gives_the_whole_lease():
    s = stream_pool(stall_timeout_seconds=None)
    register(s, "a")
    request(s, "t1", "a", 1.0, estimated_tokens=0, streams=True)
    out = decisions(decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t1", "at": 1.75}, 2.0))
    assert out == [(ev.LEASE_EXTENDED, {"turn_id": "t1", "agent_id": "a", "lease_expires_at": 32.0,
                                        "first_chunk_s": 0.75, "at": 2.0})]


def test_a_first_chunk_without_a_usable_stamp_is_measured_when_it_is_read():
    s = stream_pool()
    register(s, "a")
    request(s, "t1", "a", 1.0, estimated_tokens=0, streams=True)
    out = decisions(decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t1", "at": math.inf}, 2.5))
    assert out[0][1]["first_chunk_s"] == 1.5
    request(s, "t2", "a", 3.0, estimated_tokens=0, streams=True)
    complete(s, "t1", 3.0)
    # a stamp from the future (a skewed client clock) counts as now; one before the grant as 0
    assert decisions(decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t2", "at": 99.0}, 4.0))[0][1]["first_chunk_s"] == 1.0
    complete(s, "t2", 4.0)
    request(s, "t3", "a", 5.0, estimated_tokens=0, streams=True)
    assert decisions(decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t3", "at": 4.0}, 6.0))[0][1]["first_chunk_s"] == 0.0
    assert s.start.samples == 3


def test_a_warm_deadline_reap_is_cut_short_and_backs_the_agent_off():
    s = stream_pool()
    register(s, "a")
    now = warm(s, "a")
    assert s.start.timeout(0, 0.5, 30.0, 0) == 1.5
    out = request(s, "hung", "a", now, estimated_tokens=0, streams=True)
    assert out[1] == (ev.TURN_GRANTED, {"turn_id": "hung", "agent_id": "a", "lane": 0, "level": 0,
                                        "lease_expires_at": now + 1.5, "reserved_tokens": 0,
                                        "start_deadline": True, "at": now})
    assert tick(s, now + 1.75) == [
        (ev.TURN_REAPED, {"turn_id": "hung", "agent_id": "a", "lane": 0, "lease_expires_at": now + 1.5,
                          "granted_at": now, "no_first_chunk": True, "full_lease": False, "at": now + 1.75})]
    agent = s.agents["a"]
    assert (agent.reaps, agent.consecutive_reaps, agent.start_misses) == (1, 0, 1)
    # The censored sample (1.5 s) is the 9th: srtt moves a ninth of the way to log 1.5.
    assert s.start.samples == 9 and s.start.srtt == pytest.approx(math.log(1.5) / 9)
    out = request(s, "retry", "a", now + 2.0, estimated_tokens=0, streams=True)
    granted = out[1][1]
    assert granted["start_backoff"] == 1 and granted["start_deadline"] is True
    assert granted["lease_expires_at"] == pytest.approx(now + 2.0 + 2 * s.start.timeout(0, 0.5, 30.0, 0))
    assert s.turns["retry"].start_backoff == 1
    # Karn: a backed-off deadline's reap says nothing of the pool and is not sampled.
    tick(s, granted["lease_expires_at"] + 0.25)
    assert s.start.samples == 9 and agent.start_misses == 2 and agent.consecutive_reaps == 0
    # The first chunk clears the backoff.
    out = request(s, "ok", "a", now + 20.0, estimated_tokens=0, streams=True)
    assert out[1][1]["start_backoff"] == 2
    decide(s, ev.HEARTBEAT_SENT, {"turn_id": "ok", "at": now + 20.5}, now + 20.5)
    assert agent.start_misses == 0 and s.start.samples == 10


def test_a_silent_call_that_held_its_whole_lease_counts_towards_quarantine():
    s = stream_pool()
    register(s, "a")
    request(s, "t1", "a", 1.0, estimated_tokens=0, streams=True)     # cold: the whole lease
    out = tick(s, 31.25)
    assert out[0] == (ev.TURN_REAPED, {"turn_id": "t1", "agent_id": "a", "lane": 0, "lease_expires_at": 31.0,
                                       "granted_at": 1.0, "no_first_chunk": True, "full_lease": True, "at": 31.25})
    # its 30.25 s hold is over the 30 s allotment of level 0
    assert out[1][0] == ev.AGENT_DEMOTED and out[1][1]["used_seconds"] == 30.25
    agent = s.agents["a"]
    assert (agent.reaps, agent.consecutive_reaps, agent.start_misses) == (1, 1, 1)
    assert s.start.samples == 0                    # a zombie is no sample of the provider

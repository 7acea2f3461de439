"""Held calls (app/domain/deadlines.py): the gateway holds its turns and renews their
leases, so a slow call is never reaped; a learned deadline makes a late call a suspect
whose lane may go while the call stays open; a held turn's expiry never quarantines."""
from __future__ import annotations

import pytest

from app.domain import events as ev
from app.domain.deadlines import MAX_MODEL_ESTIMATORS, estimator_key, suspicion_after
from app.domain.decide import decide, decide_events, next_deadline

from .test_capacity_rules import complete, kinds, pool, register


def held(s, turn_id, agent_id, now, *, model="chat", streams=True, est=0):
    return decide(s, ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": agent_id, "estimated_tokens": est,
                                         "max_output_tokens": 0, "at": now, "streams": streams,
                                         "holder": "gateway", "model": model}, now)


def keepalive(s, turn_id, now):
    return decide(s, ev.HEARTBEAT_SENT, {"turn_id": turn_id, "at": now, "keepalive": True}, now)


def first_chunk(s, turn_id, now):
    return decide(s, ev.HEARTBEAT_SENT, {"turn_id": turn_id, "at": now}, now)


def warm_model(s, agent_id, now, *, model="chat", first_chunk_s=1.0, samples=8):
    for i in range(samples):
        held(s, f"{agent_id}-{model}-w{i}", agent_id, now, model=model)
        for alive in range(10, int(first_chunk_s), 10):   # its holder renews the lease meanwhile
            keepalive(s, f"{agent_id}-{model}-w{i}", now + alive)
        first_chunk(s, f"{agent_id}-{model}-w{i}", now + first_chunk_s)
        complete(s, f"{agent_id}-{model}-w{i}", now + first_chunk_s + 0.5)
        now += first_chunk_s + 10.0
    return now


def test_a_held_grant_has_the_full_lease_and_no_start_deadline_while_its_model_is_cold():
    s = pool()
    register(s, "a")
    out = held(s, "t", "a", 0.0)
    granted = dict(out)[ev.TURN_GRANTED]
    assert granted["lease_expires_at"] == 30.0 and "start_deadline" not in granted and "suspect_at" not in granted
    assert s.turns["t"].holder == "gateway" and s.turns["t"].model == "chat"


def test_keepalives_keep_a_silent_call_granted_far_past_the_lease_and_teach_nothing():
    s = pool()
    register(s, "a")
    held(s, "t", "a", 0.0)
    for now in range(10, 200, 10):
        out = keepalive(s, "t", float(now))
        [data] = [d for k, d in out if k == ev.LEASE_EXTENDED]
        assert data["keepalive"] is True and data["lease_expires_at"] == now + 30.0
    assert s.turns["t"].status == ev.GRANTED and not s.turns["t"].progressed
    assert s.model_starts == {} and s.start.samples == 0   # nothing learned from a keepalive


def test_without_keepalives_a_held_turn_is_reaped_at_its_lease_and_never_quarantines():
    s = pool()
    register(s, "a")
    now = 0.0
    for i in range(5):   # more reaps in a row than quarantine_after_reaps (3)
        held(s, f"t{i}", "a", now)
        out = decide(s, None, None, now + 31.0)
        assert ev.TURN_REAPED in kinds(out) and ev.AGENT_QUARANTINED not in kinds(out)
        now += 40.0
    assert s.agents["a"].state == ev.ACTIVE and s.agents["a"].consecutive_reaps == 0


def test_an_unheld_turn_still_quarantines_after_three_reaps():
    s = pool()
    register(s, "a")
    now = 0.0
    out = []
    for i in range(3):
        decide(s, ev.TURN_REQUESTED, {"turn_id": f"t{i}", "agent_id": "a", "estimated_tokens": 0,
                                      "max_output_tokens": 0, "at": now}, now)
        out = decide(s, None, None, now + 31.0)
        now += 40.0
    assert ev.AGENT_QUARANTINED in kinds(out)


def test_a_late_held_call_becomes_a_suspect_frees_its_lane_and_completes_later_once():
    s = pool(lanes=1, adaptive_lanes=False)
    register(s, "a")
    now = warm_model(s, "a", 0.0)            # 8 first chunks at 1 s: a deadline of 1.5 s
    out = held(s, "slow", "a", now)
    suspect_at = dict(out)[ev.TURN_GRANTED]["suspect_at"]
    assert suspect_at == now + 1.5
    assert next_deadline(s, now) == suspect_at
    held(s, "next", "a", now + 0.1)           # queued behind it: one lane
    assert s.turns["next"].status == ev.QUEUED
    out = decide_events(s, None, None, suspect_at)
    suspected = [d for d in out if isinstance(d, ev.TurnSuspected)]
    assert len(suspected) == 1 and suspected[0].lane_freed and suspected[0].waited_s == 1.5
    assert s.turns["slow"].status == ev.GRANTED           # the call stays open
    assert [d.turn_id for d in out if isinstance(d, ev.TurnGranted)] == ["next"]   # the pool moves
    # Its answer comes 20 s in: a first chunk, then the completion, charged once.
    first_chunk(s, "slow", now + 20.0)
    keepalive(s, "next", now + 10.0)
    out = decide(s, ev.COMPLETION_REPORTED, {"turn_id": "slow", "outcome": ev.OK, "prompt_tokens": 5,
                                             "completion_tokens": 7}, now + 25.0)
    [done] = [d for k, d in out if k == ev.TURN_COMPLETED]
    assert done["prompt_tokens"] == 5 and done["completion_tokens"] == 7
    assert s.lanes == ["next"]                 # the completion did not free the lane it no longer holds
    assert s.agents["a"].state == ev.ACTIVE


def test_a_first_chunk_in_time_wins_over_its_suspicion_in_the_same_pass():
    s = pool()
    register(s, "a")
    now = warm_model(s, "a", 0.0)
    out = held(s, "t", "a", now)
    suspect_at = dict(out)[ev.TURN_GRANTED]["suspect_at"]
    out = decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t", "at": suspect_at - 0.01}, suspect_at + 0.2)
    assert ev.TURN_SUSPECTED not in kinds(out)


def test_suspects_off_their_lanes_are_bounded_by_the_lanes_in_use():
    s = pool(lanes=2, adaptive_lanes=False)
    register(s, "a")
    now = warm_model(s, "a", 0.0)
    freed = []
    for i in range(4):                          # each grant is late in turn
        out = held(s, f"h{i}", "a", now)
        granted = [d for k, d in out if k == ev.TURN_GRANTED]
        now = max([now] + [d["suspect_at"] for d in granted])
        for d in decide_events(s, None, None, now + 0.01):
            if isinstance(d, ev.TurnSuspected):
                freed.append(d.lane_freed)
        now += 0.1
    assert freed.count(True) == 2               # two lanes: at most two suspects leave theirs
    assert sum(1 for t in s.turns.values() if t.status == ev.GRANTED) <= 4


def test_deadlines_are_learned_per_model():
    s = pool()
    register(s, "a")
    now = warm_model(s, "a", 0.0, model="chat", first_chunk_s=1.0)
    now = warm_model(s, "a", now, model="reasoner", first_chunk_s=40.0)
    chat = dict(held(s, "c", "a", now, model="chat"))[ev.TURN_GRANTED]["suspect_at"] - now
    slow = dict(held(s, "r", "a", now, model="reasoner"))[ev.TURN_GRANTED]["suspect_at"] - now
    assert chat == 1.5 and slow == 60.0        # each its own: 1.5x its typical first chunk
    assert set(s.model_starts) == {"chat", "reasoner"}


def test_a_non_streaming_held_call_learns_from_whole_answers():
    s = pool()
    register(s, "a")
    now = 0.0
    for i in range(8):
        held(s, f"w{i}", "a", now, streams=False)
        complete(s, f"w{i}", now + 2.0)
        now += 10.0
    granted = dict(held(s, "t", "a", now, streams=False))[ev.TURN_GRANTED]
    assert granted["suspect_at"] == now + 3.0
    assert estimator_key(s.turns["t"]) in s.model_starts


def test_model_estimators_are_bounded_whatever_names_agents_choose():
    s = pool(lanes=64, adaptive_lanes=False)
    register(s, "a")
    now = 0.0
    for i in range(MAX_MODEL_ESTIMATORS + 20):
        held(s, f"t{i}", "a", now, model=f"m{i}")
        first_chunk(s, f"t{i}", now + 1.0)
        complete(s, f"t{i}", now + 1.5)
        now += 2.0
    assert len(s.model_starts) <= MAX_MODEL_ESTIMATORS + 1


def test_a_state_with_held_turns_round_trips_and_an_old_state_keeps_its_form():
    s = pool()
    register(s, "a")
    now = warm_model(s, "a", 0.0)
    held(s, "t", "a", now)
    assert s.copy().canonical_json() == s.canonical_json()
    plain = pool()
    register(plain, "a")
    decide(plain, ev.TURN_REQUESTED, {"turn_id": "u", "agent_id": "a", "estimated_tokens": 0,
                                      "max_output_tokens": 0, "at": 0.0}, 0.0)
    d = plain.to_dict()
    assert "model_starts" not in d and not {"holder", "model", "suspect_at", "suspected"} & set(d["turns"]["u"])


# -- a held stream that began and went silent (deadlines.stalled_for) --------------------

def keepalive_idle(s, turn_id, now, idle_s):
    return decide_events(s, ev.HEARTBEAT_SENT, {"turn_id": turn_id, "at": now, "keepalive": True,
                                                "idle_s": idle_s}, now)


def test_a_held_stream_silent_past_the_stall_timeout_is_a_suspect_and_frees_its_lane():
    s = pool(lanes=1, adaptive_lanes=False)     # stall_timeout_seconds 6 (the default)
    register(s, "a")
    now = warm_model(s, "a", 0.0)
    held(s, "t", "a", now)
    first_chunk(s, "t", now + 1.0)
    held(s, "next", "a", now + 2.0)             # queued behind it: one lane
    learned = s.model_starts["chat"].samples
    out = keepalive_idle(s, "t", now + 10.0, 3.0)   # streaming, 3 s since its last chunk: alive
    assert not any(isinstance(d, ev.TurnSuspected) for d in out) and s.turns["next"].status == ev.QUEUED
    out = keepalive_idle(s, "t", now + 20.0, 12.0)  # nothing for 12 s: stalled
    [suspect] = [d for d in out if isinstance(d, ev.TurnSuspected)]
    assert suspect.stalled_s == 12.0 and suspect.lane_freed and suspect.waited_s == 20.0
    assert [d.turn_id for d in out if isinstance(d, ev.TurnGranted)] == ["next"]   # the pool moves
    assert s.turns["t"].status == ev.GRANTED and s.turns["t"].suspected          # the call stays open
    # A stall teaches nothing of the start, is no start miss, and is no outage evidence.
    assert s.model_starts["chat"].samples == learned
    assert s.agents["a"].start_misses == 0 and s.silent_reaps == 0
    # Once a suspect, always: later keepalives and a late chunk do not take the lane back.
    first_chunk(s, "next", now + 21.0)
    out = keepalive_idle(s, "t", now + 30.0, 22.0)
    assert not any(isinstance(d, ev.TurnSuspected) for d in out)
    first_chunk(s, "t", now + 31.0)
    assert s.lanes == ["next"]
    for alive in range(40, 140, 10):             # its holder keeps it open until its idle cut
        keepalive_idle(s, "t", now + alive, alive - 31.0)
        keepalive_idle(s, "next", now + alive, 0.1)
    out = decide(s, ev.COMPLETION_REPORTED, {"turn_id": "t", "outcome": ev.ERROR, "prompt_tokens": 5,
                                             "completion_tokens": 0}, now + 140.0)   # the gateway's idle cut
    assert [d["turn_id"] for k, d in out if k == ev.TURN_COMPLETED] == ["t"] and s.lanes == ["next"]


def test_no_stall_suspicion_before_the_first_chunk_without_a_stall_timeout_or_from_bad_input():
    s = pool()
    register(s, "a")
    held(s, "t", "a", 0.0)                       # cold model: no first-chunk suspicion either
    for now, idle in ((10.0, 60.0), (20.0, 60.0)):
        assert not any(isinstance(d, ev.TurnSuspected) for d in keepalive_idle(s, "t", now, idle))
    first_chunk(s, "t", 21.0)
    for now, idle in ((30.0, "60"), (40.0, True), (50.0, float("nan")), (60.0, None), (70.0, 5.9)):
        assert not any(isinstance(d, ev.TurnSuspected) for d in keepalive_idle(s, "t", now, idle))
    legacy = pool(stall_timeout_seconds=None)
    register(legacy, "a")
    held(legacy, "t", "a", 0.0)
    first_chunk(legacy, "t", 1.0)
    assert not any(isinstance(d, ev.TurnSuspected) for d in keepalive_idle(legacy, "t", 10.0, 9.0))
    assert not legacy.turns["t"].suspected


def test_a_keepalive_without_idle_s_is_logged_as_before():
    s = pool()
    register(s, "a")
    held(s, "t", "a", 0.0)
    event = ev.HeartbeatSent(turn_id="t", at=10.0, keepalive=True)
    assert "idle_s" not in event.to_dict()
    [extended] = decide_events(s, ev.HEARTBEAT_SENT, event.to_dict(), 10.0)
    assert isinstance(extended, ev.LeaseExtended) and "stalled_s" not in ev.TurnSuspected(
        turn_id="t", agent_id="a", lane=0, waited_s=1.0, lane_freed=True, at=1.0).to_dict()


# -- slowness that belongs to one agent (deadlines.teaches_model) -------------------------

def suspect_in(s, turn_id, agent_id, now):
    return dict(held(s, turn_id, agent_id, now))[ev.TURN_GRANTED]["suspect_at"] - now


def late_call(s, turn_id, agent_id, now, *, first_chunk_after=30.0, outcome=ev.OK):
    """A held stream suspected at its deadline whose first chunk comes `first_chunk_after` s in."""
    after = suspect_in(s, turn_id, agent_id, now)
    out = decide_events(s, None, None, now + after)
    assert [d.turn_id for d in out if isinstance(d, ev.TurnSuspected)] == [turn_id]
    for alive in range(10, int(first_chunk_after), 10):
        keepalive(s, turn_id, now + alive)
    first_chunk(s, turn_id, now + first_chunk_after)
    decide(s, ev.COMPLETION_REPORTED, {"turn_id": turn_id, "outcome": outcome, "prompt_tokens": 0,
                                       "completion_tokens": 1}, now + first_chunk_after + 1.0)
    return after, now + first_chunk_after + 5.0


def test_a_persistently_slow_agent_does_not_widen_its_models_deadline_for_the_others():
    s = pool(lanes=8, adaptive_lanes=False)
    register(s, "a")
    register(s, "slow")
    now = warm_model(s, "a", 0.0)               # first chunks at 1 s: a deadline of 1.5 s
    before = suspect_in(s, "a0", "a", now)
    first_chunk(s, "a0", now + 1.0)
    complete(s, "a0", now + 1.5)
    now += 5.0
    waits = []
    for i in range(5):                          # its every call starts 30 s in
        after, now = late_call(s, f"s{i}", "slow", now)
        waits.append(after)
    assert suspect_in(s, "a1", "a", now) < 1.6 and before == 1.5   # the others' deadline stays
    # The slow agent's own deadline backs off, doubled per miss (its late answers do not end it).
    base = waits[1] / 2    # the model's deadline after the first miss's censored sample: it moves no more
    assert [w / base for w in waits[1:]] == pytest.approx([2, 4, 8, 16])
    assert s.agents["slow"].start_misses == 5


def test_a_held_calls_backoff_outlives_an_error_completion_and_ends_with_a_call_in_time():
    s = pool(lanes=8, adaptive_lanes=False)
    register(s, "a")
    now = warm_model(s, "a", 0.0)
    _after, now = late_call(s, "cut", "a", now, outcome=ev.ERROR)   # the gateway cut it (idle limit)
    assert s.agents["a"].start_misses == 1
    backed_off = suspect_in(s, "next", "a", now)
    assert backed_off == pytest.approx(2 * suspicion_after(s, s.turns["next"], 0))
    assert s.turns["next"].start_backoff == 1
    first_chunk(s, "next", now + 1.0)            # in time: the backoff ends
    complete(s, "next", now + 1.5)
    assert s.agents["a"].start_misses == 0 and suspect_in(s, "after", "a", now + 5.0) == pytest.approx(backed_off / 2)

"""The capacity and failure rules: the stall deadline, outage detection, adaptive lanes,
the settings that guard them, and what a pool recorded before them keeps. Rules as
examples (values worked out in the comments), invariants as properties."""
from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain import events as ev
from app.domain.apply import apply, new_pool
from app.domain.concurrency import INITIAL, MINIMUM, LaneLimit
from app.domain.decide import REAP_GRACE_S, decide, decide_events, next_deadline
from app.domain.settings import LEGACY, PoolSettings
from tests.unit.limits import TRUSTED_BUCKET

from .examples import examples


def pool(**kw):
    s = PoolSettings(**{"lanes": 4, "rpm": 6000, "tpm": 10_000_000, "lease_seconds": 30.0,
                        "start_timeout_floor_seconds": 0.5, **kw})
    return new_pool({"settings": s.validate().to_dict(), "at": 0.0})


def register(s, agent_id, now=0.0):
    decide(s, ev.AGENT_REGISTERED, {"agent_id": agent_id, "name": agent_id, "priority_class": ev.INTERACTIVE}, now)


def request(s, turn_id, agent_id, now, est=0, streams=True):
    return decide(s, ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": agent_id, "estimated_tokens": est,
                                         "max_output_tokens": 0, "at": now, "streams": streams}, now)


def beat(s, turn_id, now):
    return decide(s, ev.HEARTBEAT_SENT, {"turn_id": turn_id, "at": now}, now)


def complete(s, turn_id, now):
    return decide(s, ev.COMPLETION_REPORTED, {"turn_id": turn_id, "outcome": ev.OK, "prompt_tokens": 0,
                                              "completion_tokens": 10}, now)


def kinds(out):
    return [t for t, _ in out]


def warm(s, agent_id, now, samples=8, first_chunk_s=1.0):
    """Streaming turns whose first chunk comes after `first_chunk_s`: the start estimator is
    warm after 8 (its deadline: max(floor, e^(ln 1 + max(4 x rttvar, ln 1.5))) = 1.5 s here,
    as every sample is the same)."""
    for i in range(samples):
        request(s, f"{agent_id}w{i}", agent_id, now)
        beat(s, f"{agent_id}w{i}", now + first_chunk_s)
        complete(s, f"{agent_id}w{i}", now + first_chunk_s + 0.5)
        now += 10.0
    return now


# -- settings -------------------------------------------------------------------------

@pytest.mark.parametrize("field, value, message", [
    ("aimd_floor", 0.0, "aimdFloor must be greater than 0"),
    ("aimd_floor", 1.5, "aimdFloor must be greater than 0"),
    ("aimd_decrease", 0.0, "aimdDecrease must be greater than 0"),
    ("stall_timeout_seconds", 0.1, "stallTimeoutSeconds must be between 0.5 and 3600"),
    ("outage_after_silent_reaps", -1, "outageAfterSilentReaps must be between 0 (off) and 1000"),
])
def test_settings_that_would_wedge_a_pool_are_refused_with_a_clear_error(field, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        PoolSettings(**{field: value}).validate()


def test_a_pool_recorded_before_the_rules_reads_them_as_off_and_stores_what_it_stored():
    old = PoolSettings().legacy().to_dict()
    assert not set(LEGACY) & set(old)                      # nothing new in the stored form
    read = PoolSettings.from_dict(old)
    assert (read.stall_timeout_seconds, read.outage_after_silent_reaps, read.adaptive_lanes) == (None, 0, False)
    new = PoolSettings().to_dict()
    assert PoolSettings.from_dict(new) == PoolSettings()   # today's defaults round-trip
    assert {"stall_timeout_seconds", "outage_after_silent_reaps", "adaptive_lanes"} <= set(new)
    s = new_pool({"settings": old, "at": 0.0})
    assert s.lanes_in_use() == s.settings.lanes
    assert not {"lane_limit", "silent_reaps", "outage_since", "limit_in_use"} & set(s.to_dict())


# -- stall deadline -------------------------------------------------------------------

def test_a_stream_that_goes_silent_is_reaped_at_its_stall_deadline_and_not_held_against_its_agent():
    s = pool(lanes=1)
    register(s, "a")
    request(s, "t", "a", 0.0)
    assert beat(s, "t", 1.0)[0][1]["lease_expires_at"] == 7.0       # first chunk: 1 + 6 s
    assert beat(s, "t", 3.0)[0][1]["lease_expires_at"] == 9.0       # chunks flow: 3 + 6 s
    assert next_deadline(s, 3.0) == 9.0 + REAP_GRACE_S
    out = decide(s, None, None, 9.0 + REAP_GRACE_S)
    assert kinds(out) == [ev.TURN_REAPED] and out[0][1]["stalled"] is True
    assert "no_first_chunk" not in out[0][1]
    agent = s.agents["a"]
    assert agent.consecutive_reaps == 0 and agent.start_misses == 0 and agent.reaps == 1
    assert s.start.samples == 1                                     # no censored sample from a stall


def test_a_stream_that_keeps_sending_chunks_is_never_reaped():
    s = pool(lanes=1)
    register(s, "a")
    request(s, "t", "a", 0.0)
    now = 0.5
    while now < 120.0:                      # a 2-minute answer, a heartbeat every 2 s (boosts between)
        assert ev.LEASE_EXTENDED in kinds(beat(s, "t", now))
        assert ev.TURN_REAPED not in kinds(decide(s, None, None, now + 1.0))
        now += 2.0
    assert ev.TURN_COMPLETED in kinds(complete(s, "t", now))


def test_without_streaming_a_heartbeat_gives_the_whole_lease():
    s = pool(lanes=1)
    register(s, "a")
    request(s, "t", "a", 0.0, streams=False)
    assert beat(s, "t", 1.0)[0][1]["lease_expires_at"] == 31.0


# -- outage detection -----------------------------------------------------------------

def _hung_outage(s, now, lanes):
    """Every lane granted (each to an agent of its own, so Karn's backoff is not in play),
    none ever answers: reap them all at their start deadline."""
    for i in range(lanes):
        register(s, f"o{i}", now)
        request(s, f"o{i}", f"o{i}", now)
    return decide(s, None, None, now + 1.5 + REAP_GRACE_S)


def test_three_silent_reaps_in_a_row_suspect_an_outage_and_only_one_probe_goes_at_a_time():
    s = pool(lanes=4)
    register(s, "a")
    now = warm(s, "a", 0.0)
    out = _hung_outage(s, now, 4)
    assert kinds(out).count(ev.TURN_REAPED) == 4 and ev.PROVIDER_OUTAGE_SUSPECTED in kinds(out)
    suspected = dict(out)[ev.PROVIDER_OUTAGE_SUSPECTED]
    assert suspected["silent_reaps"] == 4 and s.outage_since     # all four in one pass == now + 1.5 + REAP_GRACE_S
    # The four calls are asked for again: one probe is granted, the rest wait, lanes free.
    later = now + 2.0
    for i in range(4):
        register(s, f"r{i}", later)
        request(s, f"r{i}", f"r{i}", later)
    granted = [t for t in s.turns.values() if t.status == ev.GRANTED]
    assert [t.turn_id for t in granted] == ["r0"] and s.queued_count() == 3
    # The probe hangs too: reaped; the next probe's deadline is doubled (Karn, per probe).
    probe_lease = granted[0].lease_expires_at - later
    out = decide(s, None, None, granted[0].lease_expires_at + REAP_GRACE_S)
    assert kinds(out)[0] == ev.TURN_REAPED and s.failed_probes == 1
    second = next(t for t in s.turns.values() if t.status == ev.GRANTED)
    assert dict(out)[ev.TURN_GRANTED]["probe"] is True
    assert probe_lease == pytest.approx(s.start.timeout(0, 0.5, 30.0, 0))
    assert second.lease_expires_at - second.granted_at == pytest.approx(s.start.timeout(0, 0.5, 30.0, 1))
    # Its first chunk shows the provider is back: recovered, and every lane is granted again.
    out = beat(s, second.turn_id, second.granted_at + 0.5)
    assert kinds(out)[:2] == [ev.LEASE_EXTENDED, ev.PROVIDER_RECOVERED]
    assert s.outage_since is None and kinds(out).count(ev.TURN_GRANTED) == 2
    assert sum(1 for lane in s.lanes if lane is not None) == 3


def test_a_first_chunk_of_a_call_sent_before_the_silence_does_not_end_it():
    s = pool(lanes=5)
    register(s, "a")
    now = warm(s, "a", 0.0)
    request(s, "old", "a", now, streams=True)         # sent before; slow but alive
    _hung_outage(s, now + 0.1, 4)
    assert s.outage_since is not None
    beat(s, "old", now + 5.0)                          # its first chunk comes late
    assert s.outage_since is not None                  # new calls still hang


def test_reaps_with_first_chunks_in_between_are_no_outage():
    s = pool(lanes=2)
    register(s, "a")
    now = warm(s, "a", 0.0)
    for i in range(6):                                 # a hang, then a healthy call, and again
        request(s, f"h{i}", "a", now)
        request(s, f"ok{i}", "a", now)
        beat(s, f"ok{i}", now + 0.5)
        complete(s, f"ok{i}", now + 1.0)
        decide(s, None, None, now + 20.0)
        now += 40.0
    assert s.outage_since is None and s.silent_reaps <= 1


# -- adaptive lanes -------------------------------------------------------------------

def test_the_limit_grows_to_the_configured_lanes_while_first_chunks_keep_their_time():
    limit = LaneLimit()
    assert limit.lanes_in_use(64) == INITIAL
    for _ in range(200):
        limit.observe(math.log(0.5), in_use=limit.lanes_in_use(64), lanes=64)
    # Gradient 1: +0.2 x 4 = 0.8 lanes per sample, from 16 to the ceiling of 64 in 60 samples.
    assert limit.lanes_in_use(64) == 64


def test_the_limit_shrinks_when_first_chunks_queue_and_never_leaves_its_bounds():
    limit = LaneLimit()
    for _ in range(200):
        limit.observe(math.log(0.5), in_use=64, lanes=64)
    for _ in range(30):                       # calls start 8x later: they queue at the provider
        limit.observe(math.log(4.0), in_use=64, lanes=64)
    assert limit.lanes_in_use(64) < 40
    for _ in range(500):
        limit.observe(math.log(50.0), in_use=64, lanes=64)
    assert limit.lanes_in_use(64) >= MINIMUM


def test_a_queued_sample_cuts_the_limit_by_at_most_four_percent_so_a_late_signal_cannot_halve_it():
    """The first chunk reports a queue only after the call waited in it, so the samples that
    say "queue" keep coming for a round trip after the limit was already cut. Each may cut
    by at most SMOOTHING x (1 - GRADIENT_FLOOR) = 4% (then + 0.8 lanes of headroom): a
    round trip's worth of late samples (20 at the knee's rate) takes 64 lanes to no fewer
    than 30, where a floor of 0.5 (10% a sample) took them to 15."""
    from app.domain.concurrency import GRADIENT_FLOOR, SMOOTHING
    assert SMOOTHING * (1 - GRADIENT_FLOOR) == pytest.approx(0.04)
    limit = LaneLimit()
    for _ in range(200):
        limit.observe(math.log(0.5), in_use=64, lanes=64)
    before = limit.current(64)
    for _ in range(20):
        previous = limit.current(64)
        limit.observe(math.log(100.0), in_use=64, lanes=64)   # far past the tolerance
        assert limit.current(64) >= 0.96 * previous + 0.8 - 1e-9
    assert before == 64 and limit.lanes_in_use(64) >= 30


def test_an_idle_pool_learns_nothing_about_more_lanes():
    limit = LaneLimit()
    for _ in range(100):
        limit.observe(math.log(0.5), in_use=2, lanes=64)   # under half the limit in use
    assert limit.lanes_in_use(64) == INITIAL


def test_a_pool_of_clients_that_do_not_stream_still_reaches_its_configured_lanes():
    s = pool(lanes=32)
    register(s, "a")
    for i in range(400):                   # 20 calls outstanding, each 20 s long
        request(s, f"t{i}", "a", float(i), streams=False)
        if i >= 20:
            complete(s, f"t{i - 20}", float(i) + 0.5)
    # Each completion with at least half the limit in use adds 0.8 lanes: 16 -> 32.
    assert s.lanes_in_use() == 32 and sum(1 for lane in s.lanes if lane is not None) == 20


def test_one_slow_call_does_not_move_the_limit():
    limit = LaneLimit()
    for _ in range(200):
        limit.observe(math.log(0.5), in_use=64, lanes=64)
    limit.observe(math.log(60.0), in_use=64, lanes=64)      # a long reasoning prefill
    assert limit.lanes_in_use(64) == 64


def test_the_pool_grants_within_the_learned_limit_and_says_when_it_moves():
    s = pool(lanes=32)
    register(s, "a")
    for i in range(40):
        request(s, f"t{i}", "a", 0.0)
    assert sum(1 for lane in s.lanes if lane is not None) == INITIAL     # 16 of 32 at first
    out = beat(s, "t0", 0.5)
    # 16 x 0.8 + 0.2 x (16 + 4) = 16.8: the whole part is still 16, so no change yet.
    assert ev.LANE_LIMIT_CHANGED not in kinds(out) and s.lane_limit.limit == pytest.approx(16.8)
    out = beat(s, "t1", 0.51)                                    # 17.6: one more lane
    assert dict(out)[ev.LANE_LIMIT_CHANGED]["lanes_in_use"] == 17 and ev.TURN_GRANTED in kinds(out)
    for i in range(2, 16):
        beat(s, f"t{i}", 0.5 + 0.01 * i)
    assert s.lanes_in_use() > 17
    assert sum(1 for lane in s.lanes if lane is not None) == s.lanes_in_use()


# -- every later decision round-trips its JSON ------------------------------------------

def test_every_later_decision_type_round_trips_to_the_same_json():
    out = []

    def run(state, type_, data, now):
        out.extend(decide_events(state, type_, data, now))

    def ask(state, turn_id, agent_id, now, est=0):
        run(state, ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": agent_id, "estimated_tokens": est,
                                       "max_output_tokens": 0, "streams": True, "at": now}, now)

    s = pool(lanes=32)
    register(s, "a")
    for i in range(20):
        ask(s, f"t{i}", "a", 0.0)
    for i in range(16):
        run(s, ev.HEARTBEAT_SENT, {"turn_id": f"t{i}"}, 0.5)            # LaneLimitChanged
    for i in range(20):
        run(s, ev.HEARTBEAT_SENT, {"turn_id": f"t{i}"}, 0.6)
        run(s, ev.COMPLETION_REPORTED, {"turn_id": f"t{i}", "outcome": ev.OK}, 0.7)
    now = warm(s, "a", 1.0)
    for i in range(4):
        register(s, f"o{i}", now)
        ask(s, f"h{i}", f"o{i}", now)
    run(s, None, None, now + 35.0)                                       # ProviderOutageSuspected
    ask(s, "p", "a", now + 36.0)
    run(s, ev.HEARTBEAT_SENT, {"turn_id": "p"}, now + 36.5)               # ProviderRecovered
    q = pool(lanes=2, tpm=1_000, aimd_increase_per_minute=0.5, **TRUSTED_BUCKET)   # 0.6 by 13 s, before the boost
    register(q, "b")
    decide(q, ev.TURN_REQUESTED, {"turn_id": "x", "agent_id": "b", "estimated_tokens": 100}, 0.0)
    decide(q, ev.COMPLETION_REPORTED, {"turn_id": "x", "outcome": ev.RATE_LIMITED}, 1.0)
    decide(q, ev.TURN_REQUESTED, {"turn_id": "y", "agent_id": "b", "estimated_tokens": 600}, 2.0)
    decide(q, None, None, 4.0)                                            # the pause ends
    run(q, None, None, 30.0)                                              # RateRecovered
    m = pool(lanes=2)
    for agent_id in ("c", "g"):
        register(m, agent_id)
    run(m, ev.TURN_REQUESTED, {"turn_id": "own", "agent_id": "c", "estimated_tokens": 10}, 0.0)
    run(m, ev.COMPLETION_REPORTED, {"turn_id": "own", "outcome": ev.RATE_LIMITED}, 1.0)   # AgentPaused
    run(m, ev.TURN_REQUESTED, {"turn_id": "held", "agent_id": "g", "estimated_tokens": 10, "holder": "gateway",
                               "model": "m1"}, 2.0)
    run(m, ev.COMPLETION_REPORTED, {"turn_id": "held", "outcome": ev.RATE_LIMITED, "rate_limit_headers": {
        "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "5s"}}, 3.0)  # ModelPaused, a hold
    seen = set()
    for d in out:
        logged = json.loads(json.dumps(d.to_dict()))
        assert ev.parse(d.TYPE, logged).to_dict() == logged
        seen.add(d.TYPE)
    assert {ev.LANE_LIMIT_CHANGED, ev.PROVIDER_OUTAGE_SUSPECTED, ev.PROVIDER_RECOVERED, ev.RATE_RECOVERED,
            ev.AGENT_PAUSED, ev.MODEL_PAUSED} <= seen
    assert any(d.TYPE == ev.RATE_OBSERVED and d.hold_until is not None for d in out)


# -- properties -----------------------------------------------------------------------

AGENTS = ("a0", "a1", "a2")
action = st.one_of(
    st.tuples(st.just("request"), st.integers(0, 2), st.integers(0, 20_000)),
    st.tuples(st.just("beat"), st.integers(0, 80)),
    st.tuples(st.just("complete"), st.integers(0, 80)),
    st.tuples(st.just("wait"), st.sampled_from([0.1, 0.5, 1.0, 3.0, 7.0, 20.0, 45.0])),
)


def _run(actions, lanes=6):
    s = pool(lanes=lanes, rpm=600, tpm=2_000_000)
    log = []
    for a in AGENTS:
        log += decide(s, ev.AGENT_REGISTERED, {"agent_id": a, "name": a, "priority_class": ev.INTERACTIVE}, 0.0)
    now, issued, granted = 0.0, [], set()
    for act in actions:
        if act[0] == "request":
            tid = f"t{len(issued)}"
            issued.append(tid)
            out = request(s, tid, AGENTS[act[1]], now, est=act[2])
        elif act[0] == "wait":
            now += act[1]
            out = decide(s, None, None, now)
        elif not issued:
            out = []
        elif act[0] == "beat":
            out = beat(s, issued[act[1] % len(issued)], now)
        else:
            out = complete(s, issued[act[1] % len(issued)], now)
        busy = sum(1 for lane in s.lanes if lane is not None)
        grants = [d["turn_id"] for t, d in out if t == ev.TURN_GRANTED]
        assert not set(grants) & granted, "a turn was granted twice"
        granted |= set(grants)
        if grants:
            # Lanes within capacity, the learned limit included; during a suspected outage,
            # at most one probe waits for its first chunk.
            assert busy <= s.lanes_in_use() <= lanes
            if s.outage_since is not None:
                probes = [t for t in s.turns.values() if t.status == ev.GRANTED and not t.progressed
                          and t.granted_at >= s.outage_since]
                assert len(probes) <= 1
        assert MINIMUM <= s.lanes_in_use() <= lanes or s.lanes_in_use() == lanes
        log += out
    return s, log, now


@settings(max_examples=examples(120), deadline=None)
@given(st.lists(action, max_size=80))
def test_grants_stay_within_the_learned_limit_and_replay_equals_live(actions):
    live, log, _now = _run(actions)
    replayed = pool(lanes=6, rpm=600, tpm=2_000_000)
    for t, d in json.loads(json.dumps(log, allow_nan=False)):
        apply(replayed, t, d)
    assert replayed.canonical_json() == live.canonical_json()


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(action, max_size=60))
def test_after_any_history_every_queued_turn_is_granted_once_the_provider_answers(actions):
    """Nothing starves behind the new rules: after a random history (hangs, silences,
    outages, a limit driven down), a provider that answers every call within 0.5 s and
    completes it 1 s later serves every queued turn within 15 minutes."""
    s, _log, now = _run(actions)
    end = now + 900.0
    while s.turns and now <= end:
        for t in sorted(s.turns.values(), key=lambda t: t.turn_id):
            if t.status != ev.GRANTED:
                continue
            if not t.progressed and now >= t.granted_at + 0.5:
                beat(s, t.turn_id, now)
            elif t.progressed and t.turn_id in s.turns:
                complete(s, t.turn_id, now)
        deadline = next_deadline(s, now)
        now = min(now + 0.5, deadline) if deadline is not None else now + 0.5
        decide(s, None, None, now)
    assert not s.turns, f"turns left: {[(t.turn_id, t.status) for t in s.turns.values()]}"

"""The pure scheduling core: rules as examples, invariants as properties."""
from __future__ import annotations

import json
import math
from datetime import UTC

from hypothesis import given, settings
from hypothesis import strategies as st

from app.audit.rate_oracle import first_violation
from app.domain import events as ev
from app.domain.admission import parse_duration, parse_rate_headers
from app.domain.apply import apply, new_pool
from app.domain.decide import REAP_GRACE_S, decide, decide_many, next_deadline
from app.domain.settings import PoolSettings
from tests.unit.limits import TRUSTED_BUCKET

from .examples import examples
from .workload import Ledger


def pool(**kw):
    s = PoolSettings(**{"lanes": 2, "rpm": 600, "tpm": 100_000, "policy": "mlfq", **TRUSTED_BUCKET, **kw})
    return new_pool({"settings": s.to_dict(), "at": 0.0})


def register(state, agent_id, cls=ev.INTERACTIVE, now=0.0):
    return decide(state, ev.AGENT_REGISTERED, {"agent_id": agent_id, "name": agent_id, "priority_class": cls}, now)


def request(state, turn_id, agent_id, now, est=100, out=100, streams=False):
    return decide(state, ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": agent_id, "streams": streams,
                                             "estimated_tokens": est, "max_output_tokens": out, "at": now}, now)


def complete(state, turn_id, now, outcome=ev.OK, p=100, c=50, **extra):
    return decide(state, ev.COMPLETION_REPORTED, {"turn_id": turn_id, "outcome": outcome,
                                                  "prompt_tokens": p, "completion_tokens": c, **extra}, now)


def types(decisions):
    return [t for t, _ in decisions]


def test_higher_level_runs_first_and_fifo_within_a_level():
    s = pool(lanes=1)
    register(s, "bg", ev.BACKGROUND)
    register(s, "i1")
    register(s, "i2")
    register(s, "b", ev.BATCH)
    request(s, "t-hold", "i1", 1.0)          # takes the only lane
    request(s, "t-bg", "bg", 2.0)
    request(s, "t-b", "b", 3.0)
    request(s, "t-i2", "i2", 4.0)
    assert s.queues == [["t-i2"], ["t-b"], ["t-bg"]]
    out = complete(s, "t-hold", 5.0)
    granted = [d["turn_id"] for t, d in out if t == ev.TURN_GRANTED]
    assert granted == ["t-i2"]


def test_agent_that_uses_its_allotment_is_demoted_and_boost_lifts_it_back():
    s = pool(lanes=1, allotment_seconds=(10.0, 20.0, math.inf), boost_seconds=100.0)
    register(s, "a")
    request(s, "t1", "a", 1.0)
    out = complete(s, "t1", 12.0)            # 11 lane-seconds > 10 at level 0
    demoted = [d for t, d in out if t == ev.AGENT_DEMOTED]
    assert demoted and demoted[0]["from_level"] == 0 and demoted[0]["to_level"] == 1
    assert s.agents["a"].level == 1
    out = decide(s, None, None, 101.0)
    assert ev.LEVELS_BOOSTED in types(out)
    assert s.agents["a"].level == 0


def test_boost_lifts_long_waiting_turns_to_the_top_so_nothing_starves():
    s = pool(lanes=1, boost_seconds=50.0)
    register(s, "hog")
    register(s, "bg", ev.BACKGROUND)
    request(s, "h0", "hog", 0.0)
    request(s, "b0", "bg", 1.0)
    t = 0.0
    granted_bg = False
    for i in range(1, 200):                  # an interactive agent that never stops asking
        t += 0.5
        out = complete(s, f"h{i-1}", t) + request(s, f"h{i}", "hog", t)
        granted_bg |= any(d["turn_id"] == "b0" for ty, d in out if ty == ev.TURN_GRANTED)
        if granted_bg:
            break
        out = decide(s, None, None, t)
        granted_bg |= any(d["turn_id"] == "b0" for ty, d in out if ty == ev.TURN_GRANTED)
        if granted_bg:
            break
    assert granted_bg, "the background turn starved"
    assert t <= 2 * 50.0 + 1


def test_expired_lease_is_reaped_and_repeat_offender_quarantined():
    s = pool(lanes=1, lease_seconds=5.0, quarantine_after_reaps=2)
    register(s, "z")
    request(s, "t1", "z", 0.0)
    assert next_deadline(s, 0.0) == 5.0 + REAP_GRACE_S   # enforced a little after the expiry
    assert decide(s, None, None, 5.0) == []
    out = decide(s, None, None, 5.0 + REAP_GRACE_S)
    assert types(out)[0] == ev.TURN_REAPED and s.lanes == [None]
    request(s, "t2", "z", 6.0)
    request(s, "t3", "z", 6.0)               # queued behind t2
    out = decide(s, None, None, 11.0 + REAP_GRACE_S)
    assert ev.TURN_REAPED in types(out) and ev.AGENT_QUARANTINED in types(out)
    assert s.agents["z"].state == ev.QUARANTINED
    assert "t3" not in s.turns               # its queued turn was cancelled with it
    out = request(s, "t4", "z", 12.0)
    assert types(out) == [ev.TURN_CANCELLED]


def test_heartbeat_extends_the_lease():
    s = pool(lease_seconds=5.0)
    register(s, "a")
    request(s, "t", "a", 0.0)
    out = decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t"}, 4.0)
    assert out[0][0] == ev.LEASE_EXTENDED and out[0][1]["lease_expires_at"] == 9.0
    assert ev.TURN_REAPED not in types(decide(s, None, None, 8.0))


def warm_start_estimator(s, agent_id, samples=8, first_chunk_s=1.0, est=100):
    """Streaming turns whose first chunk comes `first_chunk_s` after the grant."""
    now = 100.0
    for i in range(samples):
        request(s, f"w{i}", agent_id, now, est=est, streams=True)
        decide(s, ev.HEARTBEAT_SENT, {"turn_id": f"w{i}"}, now + first_chunk_s)
        complete(s, f"w{i}", now + first_chunk_s + 1.0)
        now += 10.0
    return now


def test_streaming_turn_without_a_first_chunk_is_reaped_at_its_start_deadline():
    s = pool(lanes=1, lease_seconds=30.0, start_timeout_floor_seconds=0.5)
    register(s, "a")
    # Cold: a streaming turn gets the whole lease until 8 samples are in.
    request(s, "cold", "a", 0.0, streams=True)
    assert s.turns["cold"].lease_expires_at == 30.0
    out = decide(s, ev.HEARTBEAT_SENT, {"turn_id": "cold"}, 0.5)
    assert out[0][1]["first_chunk_s"] == 0.5 and s.start.samples == 1
    assert s.start.srtt == math.log(0.5 / s.start.size(100)) and s.start.rttvar == s.start.FIRST_RTTVAR
    complete(s, "cold", 3.0)
    now = warm_start_estimator(s, "a")
    srtt = s.start.srtt
    deadline = math.exp(srtt + max(4 * s.start.rttvar, math.log(1.5))) * s.start.size(100)
    out = request(s, "hung", "a", now, streams=True)
    granted = dict(out)[ev.TURN_GRANTED]
    assert granted["start_deadline"] is True
    assert abs(granted["lease_expires_at"] - (now + deadline)) < 1e-9 and deadline < 10.0
    reaped = decide(s, None, None, now + deadline + REAP_GRACE_S)
    assert types(reaped)[0] == ev.TURN_REAPED and reaped[0][1]["no_first_chunk"] is True
    assert reaped[0][1]["full_lease"] is False
    # Too short is not proof of a zombie: no quarantine count, and the estimate learns from
    # the censored sample (the first chunk would have come no sooner than the deadline).
    assert s.agents["a"].consecutive_reaps == 0 and s.agents["a"].start_misses == 1
    assert s.start.srtt > srtt
    # Karn: after a reap the agent's next streaming grant waits twice as long.
    later = now + deadline + REAP_GRACE_S + 1.0
    out = request(s, "retry", "a", later, streams=True)
    retry_deadline = dict(out)[ev.TURN_GRANTED]["lease_expires_at"] - later
    assert abs(retry_deadline - min(30.0, 2 * s.start.timeout(100, 0.5, 30.0, 0))) < 1e-9
    assert retry_deadline > 2 * deadline
    # Its first chunk gives it the stall deadline: 6 s from each heartbeat while it streams.
    out = decide(s, ev.HEARTBEAT_SENT, {"turn_id": "retry"}, later + 0.5)
    assert out[0][1]["lease_expires_at"] == later + 6.5 and out[0][1]["stall_deadline"] is True


def test_a_slow_starter_backs_off_instead_of_being_quarantined():
    s = pool(lanes=1, lease_seconds=30.0, start_timeout_floor_seconds=0.5)
    register(s, "slow")
    now = warm_start_estimator(s, "slow", first_chunk_s=0.1)
    deadlines = []
    for i in range(8):                       # its calls need 9 s to start: reaped, retried
        out = dict(request(s, f"s{i}", "slow", now, streams=True))
        deadline = out[ev.TURN_GRANTED]["lease_expires_at"] - now
        deadlines.append(deadline)
        if deadline >= 9.0:
            decide(s, ev.HEARTBEAT_SENT, {"turn_id": f"s{i}", "at": now + 9.0}, now + 9.0)
            complete(s, f"s{i}", now + 12.0)
            break
        decide(s, None, None, now + deadline + REAP_GRACE_S)
        now += deadline + 1.0
    assert s.agents["slow"].state == ev.ACTIVE and s.agents["slow"].consecutive_reaps == 0
    assert all(b > 2 * a - 1e-9 for a, b in zip(deadlines, deadlines[1:]))   # each at least doubled
    assert deadlines[-1] >= 9.0 and s.agents["slow"].start_misses == 0       # served, backoff reset


def test_a_heartbeat_stamped_before_the_deadline_wins_over_the_reap():
    s = pool(lanes=1, lease_seconds=30.0, start_timeout_floor_seconds=0.5)
    register(s, "a")
    now = warm_start_estimator(s, "a", first_chunk_s=0.1)
    granted = dict(request(s, "t", "a", now, streams=True))[ev.TURN_GRANTED]
    expiry = granted["lease_expires_at"]
    # The scheduler gets to the heartbeat late (well past expiry and grace), in one pass.
    late = expiry + 5.0
    out = decide(s, ev.HEARTBEAT_SENT, {"turn_id": "t", "at": expiry - 0.01}, late)
    assert types(out) == [ev.LEASE_EXTENDED]
    assert abs(out[0][1]["first_chunk_s"] - (expiry - 0.01 - now)) < 1e-9   # measured at its stamp
    complete(s, "t", late)
    # A heartbeat stamped after the deadline does not.
    granted = dict(request(s, "u", "a", late, streams=True))[ev.TURN_GRANTED]
    out = decide(s, ev.HEARTBEAT_SENT, {"turn_id": "u", "at": granted["lease_expires_at"] + 0.5},
                 granted["lease_expires_at"] + 1.0)
    assert types(out)[0] == ev.TURN_REAPED


def test_start_deadline_scales_with_the_prompt_and_spares_non_streaming_turns():
    s = pool(lanes=2, lease_seconds=30.0, tpm=1_000_000, start_timeout_floor_seconds=0.5)
    register(s, "a")
    now = warm_start_estimator(s, "a", est=1_000)
    small = dict(request(s, "small", "a", now, est=1_000, streams=True))[ev.TURN_GRANTED]
    big = dict(request(s, "big", "a", now, est=40_000, streams=True))[ev.TURN_GRANTED]
    ratio = (big["lease_expires_at"] - now) / (small["lease_expires_at"] - now)
    assert abs(ratio - s.start.size(40_000) / s.start.size(1_000)) < 1e-9
    complete(s, "small", now + 1.0)
    complete(s, "big", now + 1.0)
    plain = dict(request(s, "plain", "a", now + 2.0, est=40_000))[ev.TURN_GRANTED]
    assert plain["lease_expires_at"] == now + 32.0 and "start_deadline" not in plain
    # The floor: never below start_timeout_floor_seconds, never above the lease.
    t = s.start.timeout(0, 5.0, 30.0, 0)
    assert t == 5.0 and s.start.timeout(0, 5.0, 30.0, 10) == 30.0


def test_rate_limited_outcome_pauses_the_pool_and_halves_the_rate():
    s = pool(lanes=2)
    register(s, "a")
    register(s, "b")
    request(s, "t1", "a", 0.0)
    out = complete(s, "t1", 1.0, outcome=ev.RATE_LIMITED, retry_after_seconds=3.0)
    paused = [d for t, d in out if t == ev.POOL_PAUSED][0]
    assert 4.0 <= paused["until"] < 4.0 + s.settings.jitter_seconds
    assert paused["rate_factor"] == 0.5
    out = request(s, "t2", "b", 2.0)
    assert types(out) == [ev.TURN_QUEUED]    # nobody goes while paused: no 429 cascade
    out = decide(s, None, None, paused["until"] + 0.5)
    assert ev.POOL_RESUMED in types(out)
    # the request bucket restarts empty and refills at the halved rate: 5 req/s * 0.5s
    assert ev.TURN_GRANTED in types(out)


def test_request_larger_than_the_pool_can_ever_admit_is_refused():
    s = pool(tpm=1000)
    register(s, "a")
    out = request(s, "t", "a", 0.0, est=900, out=200)
    assert types(out) == [ev.TURN_CANCELLED] and "exceeds" in out[0][1]["reason"]


def test_provider_headers_lower_the_bucket():
    s = pool()
    register(s, "a")
    request(s, "t", "a", 0.0)
    complete(s, "t", 1.0, rate_limit_headers={"x-ratelimit-remaining-requests": "3",
                                             "x-ratelimit-remaining-tokens": "50"})
    # The provider counted `remaining` when it admitted the call, granted at 0.0; one second
    # of refill (600 rpm, 100k tpm) has passed since.
    assert s.requests.level <= 3 + 600 / 60 + 1e-9 and s.tokens.level <= 50 + 100_000 / 60 + 1e-6
    assert s.requests.level < 600 - 1 and s.tokens.level < 100_000 - 200


def test_header_parsing_both_providers():
    now = 1_700_000_000.0
    o = parse_rate_headers({"x-ratelimit-remaining-requests": "59", "x-ratelimit-remaining-tokens": "149000",
                            "x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s",
                            "retry-after": "2"}, now)
    assert (o.remaining_requests, o.remaining_tokens, o.reset_requests_s, o.reset_tokens_s, o.retry_after_s) \
        == (59, 149000, 1.0, 360.0, 2.0)
    a = parse_rate_headers({"anthropic-ratelimit-requests-remaining": "10",
                            "anthropic-ratelimit-input-tokens-remaining": "4000",
                            "anthropic-ratelimit-output-tokens-remaining": "900",
                            "anthropic-ratelimit-tokens-reset": "2023-11-14T22:13:30Z"}, now)
    assert a.remaining_requests == 10 and a.remaining_tokens == 900 and a.reset_tokens_s == 10.0
    assert parse_duration("120ms") == 0.12 and parse_duration("garbage") is None
    assert parse_rate_headers({"x-ratelimit-remaining-requests": "-4"}, now).empty()


# -- properties ---------------------------------------------------------------------

AGENTS = [("a0", ev.INTERACTIVE), ("a1", ev.INTERACTIVE), ("a2", ev.BATCH), ("a3", ev.BACKGROUND)]

action = st.one_of(
    st.tuples(st.just("request"), st.integers(0, 3), st.integers(0, 30_000), st.integers(0, 5_000),
              st.booleans()),
    st.tuples(st.just("complete"), st.integers(0, 50), st.sampled_from([ev.OK, ev.OK, ev.RATE_LIMITED, ev.ERROR]),
              st.integers(0, 40_000)),
    st.tuples(st.just("heartbeat"), st.integers(0, 50)),
    st.tuples(st.just("cancel"), st.integers(0, 50)),
    st.tuples(st.just("wait"), st.floats(0.0, 40.0)),
)


def run_actions(actions):
    s = fresh_pool()
    log = []
    for agent_id, cls in AGENTS:
        log += register(s, agent_id, cls)
    now, n = 0.0, 0
    issued: list[str] = []
    granted_once: set[str] = set()
    for act in actions:
        kind = act[0]
        if kind == "wait":
            now += act[1]
            out = decide(s, None, None, now)
        elif kind == "request":
            tid = f"t{n}"
            n += 1
            issued.append(tid)
            out = request(s, tid, AGENTS[act[1]][0], now, est=act[2], out=act[3], streams=act[4])
        elif issued:
            tid = issued[act[1] % len(issued)]
            if kind == "complete":
                out = complete(s, tid, now, outcome=act[2], p=act[3], c=0)
            elif kind == "heartbeat":
                out = decide(s, ev.HEARTBEAT_SENT, {"turn_id": tid}, now)
            else:
                out = decide(s, ev.CANCEL_REQUESTED, {"turn_id": tid}, now)
        else:
            out = []
        for t, d in out:
            if t == ev.TURN_GRANTED:
                assert d["turn_id"] not in granted_once, "a turn was granted twice"
                granted_once.add(d["turn_id"])
        log += out
        # invariants after every step
        busy = [x for x in s.lanes if x is not None]
        assert len(busy) <= s.settings.lanes and len(busy) == len(set(busy))
        for tid in busy:
            assert s.turns[tid].status == ev.GRANTED
        assert all(s.turns[t].status == ev.QUEUED for q in s.queues for t in q)
    return s, log, issued, now


def fresh_pool():
    return pool(lanes=3, tpm=60_000, rpm=120, lease_seconds=20.0, boost_seconds=30.0)


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(action, max_size=60))
def test_invariants_hold_and_the_stored_log_rebuilds_what_an_independent_ledger_says(actions):
    live, log, _issued, _now = run_actions(actions)
    # Not circular: the ledger folds the decisions with its own code (refusing illegal
    # transitions), and the log is rebuilt from its stored form (JSON as jsonb takes it).
    ledger = Ledger(live.settings)
    for t, d in log:
        ledger.fold(t, d)
    ledger.matches(live)
    replayed = fresh_pool()
    for t, d in json.loads(json.dumps(log, allow_nan=False)):
        apply(replayed, t, d)
    assert replayed.canonical_json() == live.canonical_json()


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(action, max_size=60))
def test_grants_stay_within_the_rate_budget_by_an_independent_oracle(actions):
    _live, log, _issued, _now = run_actions(actions)
    assert first_violation({"settings": fresh_pool().settings.to_dict(), "at": 0.0}, log) is None


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(action, max_size=40))
def test_every_queued_turn_is_granted_while_a_hog_keeps_the_pool_busy(actions):
    """Arrivals never stop here: after the random prefix, interactive hogs keep every lane
    busy and their queue full, and every call completes a few seconds after its grant.
    Each turn of the prefix must still settle within a bound: aging lifts it within one
    boost period (30 s); a reservation larger than the AIMD-reduced capacity waits for
    the factor to recover (from the 10% floor, 9 minutes), then for the bucket to refill
    (one minute); the hog's work ahead of it is a few calls. 15 minutes covers all."""
    s, _log, issued, now = run_actions(actions)
    hogs = [f"hog{i}" for i in range(8)]   # 3 lanes x 30 s over 8 agents: none is demoted
    for h in hogs:
        register(s, h, now=now)
    call_s, depth, n = 5.0, 6, 0
    finishes = {tid: now for tid, t in s.turns.items() if t.status == ev.GRANTED}
    prefix = {tid for tid in s.turns}
    end = now + 900.0
    while prefix & set(s.turns) and now <= end:
        inputs = []
        for tid in [t for t, at in finishes.items() if at <= now]:
            del finishes[tid]
            turn = s.turns.get(tid)
            if turn is not None and turn.status == ev.GRANTED:
                inputs.append((ev.COMPLETION_REPORTED, {"turn_id": tid, "outcome": ev.OK,
                                                        "prompt_tokens": turn.estimated_tokens,
                                                        "completion_tokens": 0, "at": now}, None))
        waiting = sum(1 for t in s.turns.values() if t.status == ev.QUEUED and t.agent_id in hogs)
        for _ in range(depth - waiting):
            inputs.append((ev.TURN_REQUESTED, {"turn_id": f"h{n}", "agent_id": hogs[n % len(hogs)],
                                               "estimated_tokens": 50, "max_output_tokens": 50, "at": now}, None))
            n += 1
        out = decide_many(s, inputs, now)
        for t, d in out:
            if t == ev.TURN_GRANTED:
                finishes[d["turn_id"]] = now + call_s
        deadline = next_deadline(s, now)
        assert deadline is None or deadline > now
        now = min([*finishes.values(), deadline if deadline is not None else now + call_s])
    left = [(t.turn_id, t.status, t.level) for tid, t in s.turns.items() if tid in prefix]
    assert not left, f"turns left waiting under load: {left}"
    assert n > 0 or not prefix   # the hogs did run while prefix turns waited


def test_non_finite_or_huge_provider_values_cannot_wedge_a_pool():
    o = parse_rate_headers({"x-ratelimit-remaining-tokens": "inf", "x-ratelimit-remaining-requests": "nan",
                            "retry-after": "1e300", "x-ratelimit-reset-tokens": "1e999"}, 0.0)
    assert o.remaining_tokens is None and o.remaining_requests is None and o.reset_tokens_s is None
    assert o.retry_after_s == 3600.0
    s = pool()
    register(s, "a")
    request(s, "t", "a", 0.0)
    out = complete(s, "t", 1.0, outcome=ev.RATE_LIMITED, retry_after_seconds=1e300,
                   rate_limit_headers={"retry-after": "inf"})
    paused = [d for t, d in out if t == ev.POOL_PAUSED][0]
    assert paused["until"] <= 1.0 + 3600.0 + s.settings.jitter_seconds


def test_cancelling_a_granted_turn_is_charged_like_completing_it():
    s = pool(lanes=1, allotment_seconds=(10.0, 20.0, math.inf))
    register(s, "dodger")
    request(s, "t1", "dodger", 0.0)
    out = decide(s, ev.CANCEL_REQUESTED, {"turn_id": "t1"}, 12.0)
    assert [t for t, _ in out][:2] == [ev.TURN_CANCELLED, ev.AGENT_DEMOTED]
    assert s.agents["dodger"].level == 1


def test_start_estimator_is_a_plain_mean_at_first_and_a_slow_moving_one_after():
    from app.domain.state import StartEstimator
    e = StartEstimator()
    samples = [8.0] + [1.0] * 9                    # an outlier first, then a steady provider
    for x in samples:
        e.observe(x, 0)
    mean_log = sum(math.log(x) for x in samples) / len(samples)
    assert abs(e.srtt - mean_log) < 1e-9           # 1/n gains: the first sample does not linger
    for _ in range(200):
        e.observe(1.0, 0)
    assert abs(e.srtt) < 0.01 and e.rttvar < 0.05
    # A single slow start moves a warm estimate by a small step (gain 1/32), not a big one.
    before = e.timeout(0, 0.1, 30.0, 0)
    e.observe(20.0, 0)
    assert before < e.timeout(0, 0.1, 30.0, 0) < before * 2


def test_a_zombie_agents_backed_off_reaps_do_not_inflate_the_pool_estimate():
    s = pool(lanes=1, lease_seconds=300.0, start_timeout_floor_seconds=0.5)
    register(s, "ok")
    register(s, "z")
    now = warm_start_estimator(s, "ok", first_chunk_s=0.5)
    srtts = []
    for i in range(4):                       # z never sends a first chunk
        granted = dict(request(s, f"z{i}", "z", now, streams=True))[ev.TURN_GRANTED]
        now = granted["lease_expires_at"] + REAP_GRACE_S
        decide(s, None, None, now)
        srtts.append(s.start.srtt)
    # Only the first reap (no backoff yet) is a censored sample; the backed-off ones are not
    # (Karn), so one broken agent cannot drag every other agent's deadline up.
    assert srtts[1] == srtts[2] == srtts[3] and s.agents["z"].start_misses == 4
    assert s.start.timeout(100, 0.5, 300.0, 0) < 10.0


def test_a_reset_instant_without_an_offset_is_utc_whatever_the_host_zone(monkeypatch):
    import time as _time
    from datetime import datetime
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    seen = []
    for zone in ("UTC", "America/New_York", "Asia/Tokyo"):
        monkeypatch.setenv("TZ", zone)
        _time.tzset()
        obs = parse_rate_headers({"anthropic-ratelimit-tokens-remaining": "10",
                                  "anthropic-ratelimit-tokens-reset": "2026-01-01T12:00:30"}, now)
        seen.append(obs.to_dict())
    monkeypatch.delenv("TZ")
    _time.tzset()
    assert seen[0] == seen[1] == seen[2]
    assert 30.0 in [v for v in seen[0].values() if isinstance(v, float)]


def test_an_agent_is_demoted_level_by_level_down_to_the_last():
    s = pool(lanes=1, allotment_seconds=(10.0, 20.0, math.inf), boost_seconds=1000.0)
    register(s, "a")
    request(s, "t1", "a", 0.0)
    out = complete(s, "t1", 10.0)                   # exactly 10 lane-seconds: level 0 used up
    assert [(d["from_level"], d["to_level"], d["reason"]) for t, d in out if t == ev.AGENT_DEMOTED] == \
        [(0, 1, "lane-seconds")]
    request(s, "t2", "a", 10.0)
    out = complete(s, "t2", 30.0)                   # 20 at level 1: used up too
    assert [(d["from_level"], d["to_level"]) for t, d in out if t == ev.AGENT_DEMOTED] == [(1, 2)]
    request(s, "t3", "a", 30.0)
    assert not [t for t, _ in complete(s, "t3", 500.0) if t == ev.AGENT_DEMOTED]   # nowhere lower
    assert s.agents["a"].level == 2


def test_a_token_allotment_demotes_with_its_reason():
    s = pool(lanes=1, allotment_tokens=(1_000, 128_000, math.inf))
    register(s, "a")
    request(s, "t1", "a", 0.0)
    out = complete(s, "t1", 1.0, p=600, c=400)     # exactly 1,000 tokens
    demoted = [d for t, d in out if t == ev.AGENT_DEMOTED]
    assert [(d["reason"], d["used_tokens"], d["allotment_tokens"]) for d in demoted] == [("tokens", 1000, 1000)]
    assert demoted[0]["used_seconds"] == 1.0 and demoted[0]["allotment_seconds"] == 30.0

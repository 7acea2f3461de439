"""The rate oracle: it catches forged over-admission, and the scheduler's batched path
(decide_many) never trips it on random workloads.

The forged logs are built by hand, with their numbers, so that each of the oracle's
bounds (the cap, the refill, a refund, a 429, a provider report, the AIMD factor) is
shown to bite; the properties then hold the real scheduler to the same bounds."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from app.audit.rate_oracle import first_violation
from app.domain import events as ev
from app.domain.apply import apply, new_pool
from app.domain.settings import PoolSettings
from tests.unit.limits import TRUSTED_BUCKET

from .examples import examples
from .workload import SETTINGS, Ledger, drive, workload


def created(**kw) -> dict:
    return {"settings": PoolSettings(**{"rpm": 6, "tpm": 6_000, **TRUSTED_BUCKET, **kw}).to_dict(), "at": 0.0}


def queued(turn_id: str, at: float, est: int = 100, out: int = 0) -> tuple[str, dict]:
    return ev.TURN_QUEUED, {"turn_id": turn_id, "agent_id": "a", "level": 0, "seq": 0, "estimated_tokens": est,
                            "max_output_tokens": out, "requested_at": at, "at": at}


def granted(turn_id: str, at: float, reserved: int = 100) -> tuple[str, dict]:
    return ev.TURN_GRANTED, {"turn_id": turn_id, "agent_id": "a", "lane": 0, "level": 0,
                             "lease_expires_at": at + 30, "reserved_tokens": reserved, "at": at}


def completed(turn_id: str, at: float, used: int, reserved: int = 100) -> tuple[str, dict]:
    return ev.TURN_COMPLETED, {"turn_id": turn_id, "agent_id": "a", "lane": 0, "outcome": ev.OK,
                               "prompt_tokens": used, "completion_tokens": 0, "lane_seconds": 0.0,
                               "reserved_tokens": reserved, "level": 0, "queued_at": at, "granted_at": at, "at": at}


def grants(n: int, at: float, start: int = 0, est: int = 100):
    out = []
    for i in range(start, start + n):
        out += [queued(f"t{i}", at, est), granted(f"t{i}", at, est)]
    return out


# -- forged logs the oracle must refuse ---------------------------------------------------

def test_a_full_bucket_admits_one_minutes_worth():
    # rpm 6: six grants at t=0 fit, a seventh does not.
    assert first_violation(created(), grants(6, 0.0)) is None
    problem = first_violation(created(), grants(7, 0.0))
    assert "t6 granted beyond the rate budget" in problem and "requests" in problem


def test_the_refill_is_a_sixtieth_of_the_limit_per_second():
    # Six at t=0 empty it; 0.1 request/s brings one more at t=10, not at t=9.
    assert first_violation(created(), grants(6, 0.0) + grants(1, 10.0, start=6)) is None
    assert "t6 granted beyond" in first_violation(created(), grants(6, 0.0) + grants(1, 9.0, start=6))


def test_an_idle_hour_still_holds_only_one_minutes_worth():
    # The cap: after an hour idle, 6 fit at once, not 6 + 360.
    assert "t6 granted beyond" in first_violation(created(), grants(7, 3600.0))


def test_a_refund_is_credited_once_and_from_the_grants_reservation():
    # tpm 6,000: t0 reserves 6,000 and uses 1,000, so 5,000 come back: t1 may take 5,000.
    log = [queued("t0", 0.0, 6_000), granted("t0", 0.0, 6_000), completed("t0", 0.0, 1_000, 6_000)]
    assert first_violation(created(rpm=600), log + [queued("t1", 0.0, 5_000), granted("t1", 0.0, 5_000)]) is None
    assert "tokens" in first_violation(created(rpm=600), log + [queued("t1", 0.0, 5_001), granted("t1", 0.0, 5_001)])
    # A second completion of t0, or one claiming a bigger reservation, refunds nothing more.
    twice = log + [completed("t0", 0.0, 1_000, 6_000), queued("t1", 0.0, 5_001), granted("t1", 0.0, 5_001)]
    assert "t1 granted beyond" in first_violation(created(rpm=600), twice)
    inflated = [queued("t0", 0.0, 6_000), granted("t0", 0.0, 6_000), completed("t0", 0.0, 1_000, 60_000),
                queued("t1", 0.0, 5_001), granted("t1", 0.0, 5_001)]
    assert "t1 granted beyond" in first_violation(created(rpm=600), inflated)


def test_a_reaped_turns_reservation_stays_spent():
    log = [queued("t0", 0.0, 6_000), granted("t0", 0.0, 6_000),
           (ev.TURN_REAPED, {"turn_id": "t0", "agent_id": "a", "lane": 0, "at": 0.0}),
           queued("t1", 0.0, 1), granted("t1", 0.0, 1)]
    assert "t1 granted beyond" in first_violation(created(rpm=600), log)


def test_a_grant_must_reserve_what_the_turn_asked_for():
    log = [queued("t0", 0.0, 100, 50), granted("t0", 0.0, 100)]
    assert "reserved 100 tokens, but it asked for 150" in first_violation(created(), log)


def paused(at: float, factor: float, until: float) -> tuple[str, dict]:
    return ev.POOL_PAUSED, {"turn_id": "x", "until": until, "retry_after": until - at, "jitter": 0.0,
                            "rate_factor": factor, "at": at}


def test_a_429_empties_the_request_bucket_and_halves_the_refill():
    # rpm 60, a 429 at t=0: empty, then 60 x 0.5 / 60 = 0.5 request/s: one by t=2, not t=1.
    c = created(rpm=60)
    after = [paused(0.0, 0.5, 0.5), (ev.POOL_RESUMED, {"at": 0.5})]
    assert first_violation(c, after + grants(1, 2.0)) is None
    assert "t0 granted beyond" in first_violation(c, after + grants(1, 1.0))


def test_nothing_is_granted_during_a_pause():
    assert "while the pool was paused until 3.000" in first_violation(created(), [paused(0.0, 0.5, 3.0)]
                                                                      + grants(1, 2.0))


def test_the_aimd_factor_is_halved_from_what_the_log_implies():
    # 1.0 -> 0.5 at t=0; +0.1/min: 0.7 at t=120, so the next 429 must record 0.35.
    c = created()
    first = paused(0.0, 0.5, 0.0)
    assert first_violation(c, [first, paused(120.0, 0.35, 120.0)]) is None
    assert "AIMD gives" in first_violation(c, [first, paused(120.0, 0.25, 120.0)])   # no recovery
    assert "AIMD gives" in first_violation(c, [paused(0.0, 0.05, 0.0)])            # below the floor
    assert first_violation(c, [paused(0.0, 0.5, 0.0), paused(0.0, 0.25, 0.0), paused(0.0, 0.125, 0.0),
                               paused(0.0, 0.1, 0.0)]) is None


def test_the_recovering_factor_bounds_the_refill():
    # rpm 60 after a 429 at t=0 (factor 0.5, empty): by t=60 the factor has grown to 0.6,
    # so the refill over the minute is 60/60 x (0.5 + 0.6)/2 x 60 = 33 requests.
    c = created(rpm=60)
    log = [paused(0.0, 0.5, 0.0), (ev.POOL_RESUMED, {"at": 0.0})]
    assert first_violation(c, log + grants(33, 60.0)) is None
    assert "t33 granted beyond" in first_violation(c, log + grants(34, 60.0))


def test_a_provider_report_lowers_the_bound():
    # rpm 600 at t=0: the provider says 2 requests remain, so a third grant is too many.
    c = created(rpm=600)
    report = (ev.RATE_OBSERVED, {"turn_id": "x", "remaining_requests": 2, "at": 0.0})
    assert first_violation(c, [report] + grants(2, 0.0)) is None
    assert "provider's report" in first_violation(c, [report] + grants(3, 0.0))


def test_time_running_backwards_is_refused():
    assert "before an earlier decision" in first_violation(created(), grants(1, 5.0) + grants(1, 4.0, start=1))


# -- the scheduler's batched path against the oracle and the ledger ----------------------

@settings(max_examples=examples(200), deadline=None)
@given(workload)
def test_batched_decisions_stay_within_the_rate_budget_in_every_window(batches):
    run = drive(batches)
    assert first_violation(run.created, run.log) is None


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.one_of(st.floats(0.0, 3.0), st.floats(0.0, 120.0)), st.integers(1, 6),
                          st.integers(0, 6_000)), max_size=60))
def test_a_saturating_workload_stays_within_the_budget(bursts):
    """Every batch asks for more than the buckets hold and completes what was granted,
    with usage from nothing to twice the reservation and now and then a 429: the bound is
    tight here."""
    from .workload import start
    run = start(PoolSettings(name="p", lanes=6, rpm=20, tpm=12_000, lease_seconds=20.0, boost_seconds=30.0,
                             policy="mlfq"))
    granted_now: list[tuple[str, int]] = []
    for i, (wait, n, est) in enumerate(bursts):
        # Every seventh completion is a 429, so the AIMD factor moves and recovers too.
        inputs = [(ev.COMPLETION_REPORTED, {"turn_id": tid, "outcome": ev.RATE_LIMITED if (i + j) % 7 == 6 else ev.OK,
                                            "prompt_tokens": (i * 7919) % (2 * r + 1), "completion_tokens": 0})
                  for j, (tid, r) in enumerate(granted_now)]
        inputs += [(ev.TURN_REQUESTED, {"turn_id": f"b{i}.{k}", "agent_id": "a0", "estimated_tokens": est,
                                        "max_output_tokens": 500}) for k in range(n)]
        out = run.step(run.now + wait, inputs)
        granted_now = [(d["turn_id"], d["reserved_tokens"]) for t, d in out if t == ev.TURN_GRANTED]
    assert first_violation(run.created, run.log) is None
    assert sum(1 for t, _ in run.log if t == ev.TURN_GRANTED) > 0 or not bursts


@settings(max_examples=examples(150), deadline=None)
@given(workload)
def test_the_log_alone_rebuilds_the_state_and_an_independent_ledger_agrees(batches):
    run = drive(batches)
    # What the scheduler state says matches a fold of the decisions by other code, after
    # every batch (the ledger also refuses illegal transitions as it folds).
    ledger = Ledger(SETTINGS)
    shadow = new_pool(run.created)
    for inputs, out in zip(run.inputs, run.outputs):
        for type_, data in out:
            ledger.fold(type_, data)
        answered = {d["turn_id"] for t, d in out if t in (ev.TURN_QUEUED, ev.TURN_CANCELLED)}
        for type_, data, _cause in inputs:
            if type_ == ev.TURN_REQUESTED:
                assert data["turn_id"] in answered, "a turn request went unanswered"
    ledger.matches(run.state)
    # The log as it is stored (JSON, no NaN or infinity: what jsonb accepts) rebuilds the
    # state exactly: decisions carry everything the fold needs, and nothing in them
    # was changed after it was emitted.
    stored = json.loads(json.dumps(run.log, allow_nan=False))
    for type_, data in stored:
        apply(shadow, type_, data)
    assert shadow.canonical_json() == run.state.canonical_json()


def test_a_state_saved_mid_run_and_resumed_decides_the_same():
    """Failover: a new leader folds the stored log and carries on; the decisions it makes
    from there are the ones the old leader would have made."""
    batches = [(1.0, [("request", i % 4, 3_000, 1_000, False) for i in range(6)]),
               (2.0, [("complete", 0, ev.OK, 2_000, 100, None), ("complete", 1, ev.RATE_LIMITED, 100, 0, None)]),
               (5.0, [("request", 3, 100, 0, False), ("heartbeat", 2)]),
               (40.0, [("complete", 2, ev.OK, 10, 10, {"x-ratelimit-remaining-tokens": "100"})]),
               (1.0, [("request", 0, 500, 0, False)])]
    whole = drive(batches)
    first = drive(batches[:3])
    resumed = new_pool(first.created)
    for type_, data in json.loads(json.dumps(first.log)):
        apply(resumed, type_, data)
    first.state = resumed
    from .workload import to_inputs
    for wait, actions in batches[3:]:
        first.step(first.now + wait, to_inputs(first, actions))
    assert json.dumps(first.log) == json.dumps(whole.log)
    assert first.state.canonical_json() == whole.state.canonical_json()

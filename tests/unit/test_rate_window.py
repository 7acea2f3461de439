"""Window admission (limiter "sliding-window" and "fixed-window"), rule by rule with its
numbers worked out in the comments, then the promise as a property: every window of
W + 1 s, and every fixed window of W whatever its phase, holds at most limit x W/60.

Every example drives decide_many, the production path."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain import events as ev
from app.domain.apply import apply, new_pool
from app.domain.decide import decide_many, next_deadline
from app.domain.rate_window import MARGIN_S, SLICES_PER_SECOND, RateWindow
from app.domain.settings import FIXED_WINDOW, SLIDING_WINDOW, PoolSettings
from app.domain.state import PoolState

from .examples import examples


class Pool:
    def __init__(self, **settings):
        s = PoolSettings(**{"lanes": 64, "rpm": 600, "tpm": 600_000, "jitter_seconds": 0.0, "lease_seconds": 3600.0,
                            "boost_seconds": 3600.0,
                            "agent_retry_after_cap_seconds": None, **settings}).validate()
        self.created = {"settings": s.to_dict(), "at": 0.0}
        self.state = new_pool(self.created)
        self.log: list[tuple[str, dict]] = []
        self.position = 0
        self.batch(0.0, (ev.AGENT_REGISTERED, {"agent_id": "a", "name": "a", "priority_class": ev.INTERACTIVE}))

    def batch(self, now: float, *inputs: tuple[str, dict]) -> list[str]:
        numbered = []
        for type_, data in inputs:
            self.position += 1
            numbered.append((type_, {**data, "at": now}, self.position))
        out = decide_many(self.state, numbered, now)
        self.log += out
        return [d["turn_id"] for t, d in out if t == ev.TURN_GRANTED]

    def tick(self, now: float) -> list[str]:
        return self.batch(now)

    @staticmethod
    def request(turn_id: str, est: int = 10, out: int = 0) -> tuple[str, dict]:
        return ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": "a", "estimated_tokens": est,
                                   "max_output_tokens": out}

    @staticmethod
    def complete(turn_id: str, used: int = 0, outcome: str = ev.OK) -> tuple[str, dict]:
        return ev.COMPLETION_REPORTED, {"turn_id": turn_id, "outcome": outcome, "prompt_tokens": used,
                                        "completion_tokens": 0}


def test_a_sliding_minute_admits_the_limit_then_nothing_until_the_first_grant_leaves_it():
    # rpm 6, W 60: six grants at t=0 fill the window; it is counted as 61 s (the margin),
    # so the 7th waits until 0 + 61 = 61 s, where a bucket would refill one every 10 s.
    p = Pool(rpm=6)
    assert p.batch(0.0, *[p.request(f"t{i}") for i in range(7)]) == [f"t{i}" for i in range(6)]
    assert next_deadline(p.state, 0.0) == pytest.approx(61.0)
    assert p.tick(10.0) == [] and p.tick(60.99) == []
    assert p.tick(61.0) == ["t6"]


def test_a_grant_counts_until_the_end_of_its_tenth_of_a_second_plus_the_window():
    # A grant at 0.05 s is in the slice that ends at 0.1 s: counted until 0.1 + 61 = 61.1 s.
    p = Pool(rpm=1)
    p.tick(0.05)
    assert p.batch(0.05, p.request("first"), p.request("second")) == ["first"]
    assert next_deadline(p.state, 0.05) == pytest.approx(61.1)
    assert p.tick(61.05) == [] and p.tick(61.1) == ["second"]


def test_the_token_window_holds_a_minute_of_tokens_and_refunds_on_completion():
    # tpm 6,000: a 5,000 + 1,000 reservation fills the window; a 250-token turn waits.
    # The big call used 1,000: 5,000 go back to the window at once, and the small is granted.
    p = Pool(tpm=6_000)
    assert p.batch(0.0, p.request("big", est=5_000, out=1_000), p.request("small", est=250)) == ["big"]
    assert p.tick(30.0) == []
    assert p.batch(31.0, p.complete("big", used=1_000)) == ["small"]
    assert p.state.window.used(31.0, 61.0) == (2.0, 1_250.0)


def test_azure_slices_of_ten_seconds_admit_a_sixth_of_the_minute_per_eleven_seconds():
    # rpm 60, W 10: 60 x 10/60 = 10 per window, counted as 11 s.
    p = Pool(rpm=60, limiter_window_seconds=10.0)
    assert len(p.batch(0.0, *[p.request(f"t{i}") for i in range(12)])) == 10
    assert p.tick(10.9) == [] and p.tick(11.0) == ["t10", "t11"]


def test_a_reservation_over_a_short_window_is_refused_on_arrival():
    # tpm 6,000 over 10 s windows: a window holds 1,000 tokens; 1,001 could never be admitted.
    p = Pool(tpm=6_000, limiter_window_seconds=10.0)
    p.batch(0.0, p.request("fits", est=1_000), p.request("never", est=1_001))
    cancelled = [d for t, d in p.log if t == ev.TURN_CANCELLED]
    assert [d["turn_id"] for d in cancelled] == ["never"]
    assert cancelled[0]["reason"] == "reservation of 1001 tokens exceeds the pool's tokens per 10-second window of 1000"


def test_the_aimd_factor_scales_the_window():
    # rpm 10: a 429 at 1 s halves the factor to 0.5, so after the 2 s pause the window holds
    # 5.03, of which x (granted at 0) uses one: 4 more. x leaves at 0 + 61 s, when the factor
    # is 0.5 + 0.1/min x 60 s = 0.6: 6 in the window, 2 more.
    p = Pool(rpm=10, retry_after_default=2.0)
    assert p.batch(0.0, p.request("x")) == ["x"]
    p.batch(1.0, p.complete("x", outcome=ev.RATE_LIMITED))
    assert p.batch(3.0, *[p.request(f"t{i}") for i in range(8)]) == [f"t{i}" for i in range(4)]
    assert p.tick(60.9) == []
    assert p.tick(61.0) == ["t4", "t5"]


def test_fixed_windows_use_the_sliding_rule():
    sliding, fixed = Pool(rpm=6, limiter=SLIDING_WINDOW), Pool(rpm=6, limiter=FIXED_WINDOW)
    for p in (sliding, fixed):
        for t in range(0, 200, 7):
            p.batch(float(t), p.request(f"t{t}"))
    assert [d for t, d in sliding.log if t == ev.TURN_GRANTED] == [d for t, d in fixed.log if t == ev.TURN_GRANTED]


def test_the_window_stays_bounded_and_replays_from_its_json():
    # 30 grants a second for 200 s through rpm 100,000: the window keeps one slice per
    # tenth of a second of the last 61 s, never more, and the logged decisions rebuild it.
    p = Pool(rpm=100_000, tpm=10_000_000, lanes=64)
    n = 0
    for step in range(2_000):
        now = step / 10.0
        requests = [p.request(f"t{n + i}") for i in range(3)]
        done = [p.complete(t) for t in list(p.state.turns) if p.state.turns[t].status == ev.GRANTED]
        n += 3
        p.batch(now, *done, *requests)
    assert len(p.state.window.slices) <= (60 + MARGIN_S) * SLICES_PER_SECOND + 1
    replayed = new_pool(p.created)
    for type_, data in json.loads(json.dumps(p.log)):
        apply(replayed, type_, data)
    assert replayed.window == p.state.window
    assert PoolState.from_dict(json.loads(p.state.canonical_json())).canonical_json() == p.state.canonical_json()


def test_window_arithmetic():
    w = RateWindow()
    w.add(0.01, 100)
    w.add(0.09, 50)             # the same slice (ends at 0.1)
    w.add(0.31, 10)
    assert w.slices == [[1, 2, 150], [4, 1, 10]]
    assert w.used(61.0, 61.0) == (3.0, 160.0)
    assert w.used(61.1, 61.0) == (1.0, 10.0)   # the first slice left at 0.1 + 61
    w.refund(0.05, 120)
    assert w.slices[0][2] == 30
    w.refund(9.0, 5)                            # no such slice: nothing happens
    assert w.seconds_until(1.0, 61.0, 1, 0, 3, 1e9) == pytest.approx(60.1)   # 3 in use, cap 3
    assert w.seconds_until(1.0, 61.0, 1, 0, 4, 1e9) == 0.0
    assert math.isinf(w.seconds_until(1.0, 61.0, 5, 0, 4, 1e9))
    w.prune(61.2, 61.0)
    assert w.slices == [[4, 1, 10]]


def _summed(w: RateWindow, now: float, span: float) -> tuple[float, float]:
    """used() as its definition reads: every slice still counted at `now`, summed."""
    live = [entry for entry in w.slices if now < entry[0] / SLICES_PER_SECOND + span]
    return float(sum(entry[1] for entry in live)), float(sum(entry[2] for entry in live))


_change = st.one_of(st.tuples(st.just("add"), st.floats(0.0, 30.0), st.integers(0, 900)),
                    st.tuples(st.just("refund"), st.floats(0.0, 30.0), st.integers(-50, 900)),
                    st.tuples(st.just("prune"), st.floats(0.0, 40.0), st.just(0)),
                    st.tuples(st.just("used"), st.floats(0.0, 40.0), st.just(0)))


@settings(max_examples=examples(80), deadline=None)
@given(st.lists(_change, max_size=60), st.sampled_from([11.0, 61.0]), st.floats(0.0, 40.0))
def test_a_remembered_use_is_the_sum_of_the_counted_slices_after_every_change(changes, span, probe):
    # `used` answers a moment asked before from memory: no change in between may be missed.
    w, clock = RateWindow(), 0.0
    for op, at, tokens in changes:
        if op == "add":
            clock = max(clock, at)   # a pool's grants come in time order
            w.add(clock, tokens)
        elif op == "refund":
            w.refund(at, tokens)
        elif op == "prune":
            w.prune(at, span)
        assert w.used(probe, span) == _summed(w, probe, span)
        assert w.used(probe, span) == _summed(w, probe, span)
        assert w.used(at, span) == _summed(w, at, span)


# -- the promise, as a property -------------------------------------------------------

_batch = st.tuples(st.floats(0.0, 20.0), st.integers(0, 6), st.integers(0, 6), st.booleans())


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(_batch, max_size=40), st.sampled_from([(12, 60.0), (60, 10.0), (30, 60.0), (120, 30.0)]),
       st.floats(0.0, 60.0))
def test_no_window_of_w_plus_the_margin_and_no_fixed_window_of_w_holds_more_than_its_share(batches, shape, phase):
    rpm, window = shape
    p = Pool(rpm=rpm, tpm=10_000_000, limiter_window_seconds=window)
    now, n = 0.0, 0
    for wait, asks, dones, limited in batches:
        now += wait
        granted = [t for t in p.state.turns if p.state.turns[t].status == ev.GRANTED][:dones]
        outcome = ev.RATE_LIMITED if limited else ev.OK
        p.batch(now, *[p.complete(t, outcome=outcome) for t in granted], *[p.request(f"t{n + i}") for i in range(asks)])
        n += asks
    times = sorted(d["at"] for t, d in p.log if t == ev.TURN_GRANTED)
    cap = rpm * window / 60.0
    for i, t in enumerate(times):   # every sliding window that ends at a grant
        assert sum(1 for u in times[: i + 1] if u > t - window - MARGIN_S) <= cap + 1e-9
    if times:                       # every fixed window of W, at this phase
        first = math.floor((times[0] - phase) / window)
        counts: dict[int, int] = {}
        for t in times:
            k = math.floor((t - phase) / window) - first
            counts[k] = counts.get(k, 0) + 1
        assert max(counts.values()) <= cap + 1e-9

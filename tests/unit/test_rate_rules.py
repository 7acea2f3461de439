"""Worked examples, one per rate-control rule, each with its numbers.

Every example drives the production path (decide_many, as the scheduler loop does) and
states the expected values as numbers worked out by hand in the comments, not as a call
back into the bucket code."""
from __future__ import annotations

import pytest

from app.domain import events as ev
from app.domain.admission import jitter
from app.domain.apply import new_pool
from app.domain.decide import decide_many, next_deadline
from app.domain.settings import PoolSettings
from tests.unit.limits import TRUSTED_BUCKET


class Pool:
    """One pool driven through decide_many, keeping every decision it made."""

    def __init__(self, **settings):
        # The token bucket, and agents' reports trusted: the rules these examples state
        # (the window limiter and agents' claims: test_rate_window.py, test_rate_scopes.py;
        # the light-agent reserve: test_light_agent_reserve.py).
        s = PoolSettings(**{"lanes": 8, "rpm": 600, "tpm": 60_000, "jitter_seconds": 1.0, **TRUSTED_BUCKET,
                            "light_agent_reserve": 0.0, **settings})
        self.state = new_pool({"settings": s.to_dict(), "at": 0.0})
        self.log: list[tuple[str, dict]] = []
        self.position = 0
        self.batch(0.0, *[(ev.AGENT_REGISTERED, {"agent_id": a, "name": a, "priority_class": ev.INTERACTIVE})
                          for a in ("a", "b")])

    def batch(self, now: float, *inputs: tuple[str, dict]) -> list[tuple[str, dict]]:
        numbered = []
        for type_, data in inputs:
            self.position += 1
            numbered.append((type_, {**data, "at": now}, self.position))
        out = decide_many(self.state, numbered, now)
        self.log += out
        return out

    def tick(self, now: float) -> list[tuple[str, dict]]:
        return self.batch(now)

    @staticmethod
    def request(turn_id: str, est: int = 100, out: int = 0, agent: str = "a") -> tuple[str, dict]:
        return ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": agent, "estimated_tokens": est,
                                   "max_output_tokens": out}

    @staticmethod
    def complete(turn_id: str, p: int = 0, c: int = 0, outcome: str = ev.OK, **extra) -> tuple[str, dict]:
        return ev.COMPLETION_REPORTED, {"turn_id": turn_id, "outcome": outcome, "prompt_tokens": p,
                                        "completion_tokens": c, **extra}

    def granted(self, out) -> list[str]:
        return [d["turn_id"] for t, d in out if t == ev.TURN_GRANTED]


def only(out, type_: str) -> dict:
    found = [d for t, d in out if t == type_]
    assert len(found) == 1, out
    return found[0]


# -- the bucket refills at limit/60 per second ------------------------------------------

def test_the_request_bucket_refills_at_a_sixtieth_of_the_limit_per_second():
    # rpm 6: the bucket starts with 6 requests and refills 6/60 = 0.1 request per second,
    # so after 6 grants at t=0 the 7th waits exactly 10 s.
    p = Pool(rpm=6)
    out = p.batch(0.0, *[p.request(f"t{i}") for i in range(7)])
    assert p.granted(out) == [f"t{i}" for i in range(6)]
    assert next_deadline(p.state, 0.0) == pytest.approx(10.0)
    assert p.granted(p.tick(9.9)) == []          # 0.99 of a request
    assert p.granted(p.tick(10.0)) == ["t6"]     # 1.00


def test_the_token_bucket_refills_at_a_sixtieth_of_the_limit_per_second():
    # tpm 6,000 refills 100 tokens a second. A 6,000-token reservation empties the bucket;
    # a 250-token one then waits 2.5 s.
    p = Pool(tpm=6_000)
    assert p.granted(p.batch(0.0, p.request("big", est=5_000, out=1_000), p.request("small", est=250))) == ["big"]
    assert p.granted(p.tick(2.49)) == []         # 249 tokens
    assert p.granted(p.tick(2.5)) == ["small"]   # 250


# -- the bucket is capped at one minute's worth ------------------------------------------

def test_an_idle_bucket_holds_one_minutes_worth_and_no_more():
    # rpm 6, idle for ten minutes: the bucket holds 6 requests (not 6 + 10 x 6 = 66), so a
    # burst of 8 at t=600 gets 6 grants and the 7th waits the usual 10 s.
    p = Pool(rpm=6)
    p.tick(600.0)
    out = p.batch(600.0, *[p.request(f"t{i}") for i in range(8)])
    assert len(p.granted(out)) == 6
    assert next_deadline(p.state, 600.0) == pytest.approx(610.0)


def test_an_idle_token_bucket_holds_the_tpm_and_no_more():
    # tpm 6,000 after an hour idle: two 3,000-token turns fit, a third 1-token turn does not.
    p = Pool(tpm=6_000)
    out = p.batch(3600.0, p.request("x", est=3_000), p.request("y", est=3_000), p.request("z", est=1))
    assert p.granted(out) == ["x", "y"]


# -- completion refunds the reservation minus the real usage, once ----------------------

def test_completion_refunds_the_reservation_minus_real_usage():
    # tpm 6,000. t reserves 1,000 + 3,000 = 4,000 tokens and uses 1,000 + 500 = 1,500 at the
    # same instant: the bucket holds 6,000 - 4,000 + 2,500 = 4,500 tokens after it.
    p = Pool(tpm=6_000)
    p.batch(0.0, p.request("t", est=1_000, out=3_000))
    assert p.state.tokens.level == 2_000
    done = only(p.batch(0.0, p.complete("t", p=1_000, c=500)), ev.TURN_COMPLETED)
    assert done["reserved_tokens"] == 4_000
    assert p.state.tokens.level == 4_500
    # What the refund buys: a 4,500-token turn is granted at once, a further one waits.
    out = p.batch(0.0, p.request("fits", est=4_500), p.request("waits", est=1))
    assert p.granted(out) == ["fits"]


def test_a_refund_is_made_once_even_if_the_completion_is_reported_twice():
    p = Pool(tpm=6_000)
    p.batch(0.0, p.request("t", est=1_000, out=3_000))
    p.batch(0.0, p.complete("t", p=1_000, c=500))
    assert p.batch(0.0, p.complete("t", p=1_000, c=500)) == []     # the second report: no decision
    assert p.state.tokens.level == 4_500


def test_usage_beyond_the_reservation_is_charged():
    # Reserved 1,000, used 1,600: the bucket ends 600 below the reservation's hole.
    p = Pool(tpm=6_000)
    p.batch(0.0, p.request("t", est=1_000))
    p.batch(0.0, p.complete("t", p=1_200, c=400))
    assert p.state.tokens.level == 6_000 - 1_600


def test_a_refund_never_lifts_the_bucket_over_its_cap():
    # Reserved 3,000 at t=0; by t=60 the bucket has refilled to its cap of 6,000, so the
    # refund of 3,000 (nothing used) cannot take it to 9,000.
    p = Pool(tpm=6_000)
    p.batch(0.0, p.request("t", est=3_000))
    p.batch(60.0, p.complete("t"))
    assert p.state.tokens.level == 6_000


# -- a 429 empties the request bucket; retry-after defaults to 2 s -----------------------

def test_a_429_empties_the_request_bucket_and_pauses_for_the_default_2_seconds():
    # rpm 600 at factor 1: after one grant the bucket holds 599 requests. A 429 at t=1
    # with no retry-after anywhere pauses for 2 s plus the turn's jitter, halves the factor
    # and empties the request bucket: it then refills at 600 x 0.5 / 60 = 5 requests/s.
    p = Pool()
    p.batch(0.0, p.request("t"))
    out = p.batch(1.0, p.complete("t", outcome=ev.RATE_LIMITED))
    paused = only(out, ev.POOL_PAUSED)
    assert paused["retry_after"] == 2.0
    assert paused["jitter"] == jitter("t", 1.0) and 0 <= paused["jitter"] < 1.0
    assert paused["until"] == 1.0 + 2.0 + paused["jitter"]
    assert paused["rate_factor"] == 0.5
    assert p.state.requests.level == 0.0
    # At the end of the pause the bucket holds 5 x (until - 1) requests: with 20 queued
    # and 20 lanes' worth of room that many are granted, not 20.
    p.batch(2.0, *[p.request(f"q{i}", agent="b") for i in range(20)])
    until = paused["until"]
    expected = int(5 * (until - 1.0) + 1e-9)
    granted = p.granted(p.tick(until))
    assert len(granted) == min(expected, 8) and expected < 20


def test_a_429_waits_the_retry_after_it_was_given():
    p = Pool()
    p.batch(0.0, p.request("s"), p.request("h"))
    out = p.batch(1.0, p.complete("s", outcome=ev.RATE_LIMITED, retry_after_seconds=7.0))
    assert only(out, ev.POOL_PAUSED)["retry_after"] == 7.0
    out = p.batch(1.0, p.complete("h", outcome=ev.RATE_LIMITED, rate_limit_headers={"retry-after": "5"}))
    paused = only(out, ev.POOL_PAUSED)
    assert paused["retry_after"] == 5.0
    # The earlier, longer pause is kept: 1 + 7 + its jitter.
    assert paused["until"] == 1.0 + 7.0 + jitter("s", 1.0)


# -- AIMD: halve on a 429, +10% of the limit per minute, floor 10% -----------------------

def test_aimd_halves_on_a_429_and_recovers_a_tenth_per_minute():
    # A 429 at t=0 takes the factor from 1.0 to 0.5. Two quiet minutes add 2 x 0.1: 0.7 at
    # t=120, so a second 429 then halves 0.7 to 0.35.
    p = Pool()
    p.batch(0.0, p.request("t1"))
    assert only(p.batch(0.0, p.complete("t1", outcome=ev.RATE_LIMITED)), ev.POOL_PAUSED)["rate_factor"] == 0.5
    p.tick(120.0)
    assert p.state.rate_factor == pytest.approx(0.7)
    p.batch(120.0, p.request("t2"))
    out = p.batch(120.0, p.complete("t2", outcome=ev.RATE_LIMITED))
    assert only(out, ev.POOL_PAUSED)["rate_factor"] == pytest.approx(0.35)
    # Recovery stops at 1.0: 0.35 + 0.1 x 10 minutes would be 1.35.
    p.tick(720.0)
    assert p.state.rate_factor == 1.0


def test_aimd_never_goes_below_a_tenth():
    # Four 429s in one pass: 1.0 -> 0.5 -> 0.25 -> 0.125 -> 0.1 (not 0.0625).
    p = Pool()
    p.batch(0.0, *[p.request(f"t{i}") for i in range(4)])
    out = p.batch(1.0, *[p.complete(f"t{i}", outcome=ev.RATE_LIMITED) for i in range(4)])
    assert [d["rate_factor"] for t, d in out if t == ev.POOL_PAUSED] == [0.5, 0.25, 0.125, 0.1]


def test_the_factor_scales_the_refill():
    # rpm 60 after one 429 at t=1: factor 0.5, so the empty request bucket refills at
    # 60 x 0.5 / 60 = 0.5 request per second: 1 request by t=3. With the factor ignored it
    # would be 2.
    p = Pool(rpm=60, retry_after_default=0.0, jitter_seconds=0.001)
    p.batch(0.0, p.request("t"))
    p.batch(1.0, p.complete("t", outcome=ev.RATE_LIMITED))
    assert p.state.requests.level == 0.0
    p.tick(3.0)
    assert p.state.requests.level == pytest.approx(1.0)


# -- provider headers may only lower the buckets -----------------------------------------

def test_provider_headers_lower_the_buckets():
    # At t=0 (no refill, no age): t reserves 100 tokens and uses 0. The provider says 3
    # requests and 50 tokens remain: both buckets drop to those numbers.
    p = Pool()
    p.batch(0.0, p.request("t"))
    out = p.batch(0.0, p.complete("t", rate_limit_headers={"x-ratelimit-remaining-requests": "3",
                                                          "x-ratelimit-remaining-tokens": "50"}))
    seen = only(out, ev.RATE_OBSERVED)
    assert (seen["remaining_requests"], seen["remaining_tokens"]) == (3, 50)
    assert (p.state.requests.level, p.state.tokens.level) == (3, 50)


def test_provider_headers_never_raise_the_buckets():
    # After 2 grants at t=0 the buckets hold 598 requests and 60,000 - 2 x 100 tokens;
    # t1 completes using nothing (refund 100): 59,900. The provider reports far more
    # remaining than that: our buckets stay where they were.
    p = Pool()
    p.batch(0.0, p.request("t1"), p.request("t2"))
    out = p.batch(0.0, p.complete("t1", rate_limit_headers={"x-ratelimit-remaining-requests": "5000",
                                                           "x-ratelimit-remaining-tokens": "900000"}))
    assert ev.RATE_OBSERVED in [t for t, _ in out]
    assert (p.state.requests.level, p.state.tokens.level) == (598, 59_900)


def test_a_late_report_is_aged_before_it_lowers_the_bucket():
    # Granted at t=0, reported at t=6 with 10 requests remaining: in 6 s the provider
    # refilled 600/60 x 6 = 60, and we granted one more call after it (at t=3): 10 + 60 - 1.
    p = Pool()
    p.batch(0.0, p.request("t"))
    p.batch(3.0, p.request("u"))
    out = p.batch(6.0, p.complete("t", rate_limit_headers={"x-ratelimit-remaining-requests": "10"}))
    seen = only(out, ev.RATE_OBSERVED)
    assert seen["observed_remaining_requests"] == 10 and seen["remaining_requests"] == pytest.approx(69.0)
    assert p.state.requests.level == pytest.approx(69.0)


def test_a_pause_ends_exactly_at_its_deadline():
    p = Pool(retry_after_default=3.0)
    p.batch(0.0, p.request("t"))
    until = only(p.batch(1.0, p.complete("t", outcome=ev.RATE_LIMITED)), ev.POOL_PAUSED)["until"]
    assert next_deadline(p.state, 1.0) == until
    assert p.tick(until - 1e-6) == []
    assert [t for t, _ in p.tick(until)] == [ev.POOL_RESUMED]
    assert p.state.paused_until is None


def test_an_empty_pool_has_nothing_to_wait_for():
    state = new_pool({"settings": PoolSettings().to_dict(), "at": 0.0})
    assert next_deadline(state, 0.0) is None

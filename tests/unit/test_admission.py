"""Provider rate-limit headers and the small pure helpers of admission, header by header."""
from __future__ import annotations

import math

import pytest

from app.domain.admission import (
    MAX_RETRY_AFTER_S,
    Bucket,
    RateObservation,
    aimd_factor,
    jitter,
    parse_duration,
    parse_rate_headers,
)

NOW = 1_700_000_000.0   # 2023-11-14T22:13:20Z


@pytest.mark.parametrize("headers, field, value", [
    ({"x-ratelimit-remaining-requests": "59"}, "remaining_requests", 59.0),
    ({"x-ratelimit-remaining-tokens": "149000"}, "remaining_tokens", 149_000.0),
    ({"x-ratelimit-limit-requests": "60"}, "limit_requests", 60.0),
    ({"x-ratelimit-limit-tokens": "150000"}, "limit_tokens", 150_000.0),
    ({"x-ratelimit-reset-requests": "1s"}, "reset_requests_s", 1.0),
    ({"x-ratelimit-reset-tokens": "6m0s"}, "reset_tokens_s", 360.0),
    ({"anthropic-ratelimit-requests-remaining": "10"}, "remaining_requests", 10.0),
    ({"anthropic-ratelimit-tokens-remaining": "4000"}, "remaining_tokens", 4_000.0),
    ({"anthropic-ratelimit-input-tokens-remaining": "700"}, "remaining_tokens", 700.0),
    ({"anthropic-ratelimit-output-tokens-remaining": "300"}, "remaining_tokens", 300.0),
    ({"anthropic-ratelimit-input-tokens-remaining": "700",
      "anthropic-ratelimit-output-tokens-remaining": "300"}, "remaining_tokens", 300.0),   # the tighter binds
    ({"anthropic-ratelimit-tokens-remaining": "4000",
      "anthropic-ratelimit-output-tokens-remaining": "300"}, "remaining_tokens", 4_000.0),  # the total wins
    ({"anthropic-ratelimit-requests-limit": "50"}, "limit_requests", 50.0),
    ({"anthropic-ratelimit-tokens-limit": "40000"}, "limit_tokens", 40_000.0),
    ({"anthropic-ratelimit-requests-reset": "2023-11-14T22:13:30Z"}, "reset_requests_s", 10.0),
    ({"anthropic-ratelimit-tokens-reset": "2023-11-14T22:13:25+00:00"}, "reset_tokens_s", 5.0),
    ({"anthropic-ratelimit-tokens-reset": "2023-11-14T22:13:00Z"}, "reset_tokens_s", 0.0),   # already past
    ({"retry-after": "2"}, "retry_after_s", 2.0),
    ({"retry-after-ms": "1500"}, "retry_after_s", 1.5),
    ({"retry-after-ms": "1500", "retry-after": "9"}, "retry_after_s", 1.5),     # the precise one first
    ({"retry-after": "99999"}, "retry_after_s", MAX_RETRY_AFTER_S),
    ({"x-ratelimit-reset-tokens": "2h"}, "reset_tokens_s", MAX_RETRY_AFTER_S),
    ({"x-ratelimit-reset-requests": "2h"}, "reset_requests_s", MAX_RETRY_AFTER_S),
    ({"X-RateLimit-Remaining-Requests": "7"}, "remaining_requests", 7.0),        # names are case-insensitive
    ({"x-ratelimit-remaining-requests": "3", "anthropic-ratelimit-requests-remaining": "8"},
     "remaining_requests", 3.0),                                                 # the first found is kept
])
def test_each_header_is_read(headers, field, value):
    observation = parse_rate_headers(headers, NOW)
    assert getattr(observation, field) == value
    others = {k: v for k, v in observation.to_dict().items() if k != field}
    assert all(v is not None for v in others.values())
    assert not observation.empty()


@pytest.mark.parametrize("headers", [
    {}, None, {"x-ratelimit-remaining-requests": "-1"}, {"x-ratelimit-remaining-tokens": "many"},
    {"x-ratelimit-reset-tokens": "soon"}, {"anthropic-ratelimit-tokens-reset": "tomorrow"},
    {"retry-after-ms": "x"}, {"retry-after": "nan"}, {"x-ratelimit-limit-tokens": "inf"},
    {"content-type": "application/json"},
])
def test_malformed_or_absent_headers_are_ignored(headers):
    observation = parse_rate_headers(headers, NOW)
    assert observation.empty() and observation.to_dict() == {}


def test_an_observation_lists_only_what_it_saw():
    o = RateObservation(remaining_tokens=5.0)
    assert o.to_dict() == {"remaining_tokens": 5.0} and not o.empty()
    assert RateObservation().empty()


@pytest.mark.parametrize("text, seconds", [
    ("1s", 1.0), ("120ms", 0.12), ("6m0s", 360.0), ("1h2m3.5s", 3723.5), ("2.5", 2.5), ("0", 0.0),
    (" 3s ", 3.0), ("1m 30s", 90.0),
])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "-1", "1x", "1s2", "inf", "nan", "3 days", "1m30"])
def test_bad_durations(text):
    assert parse_duration(text) is None


def test_jitter_is_deterministic_and_within_its_range():
    values = [jitter(f"turn-{i}", 1.0) for i in range(200)]
    assert values == [jitter(f"turn-{i}", 1.0) for i in range(200)]
    assert all(0.0 <= v < 1.0 for v in values) and len(set(values)) == 200
    assert 0.3 < sum(values) / len(values) < 0.7            # spread over the range, not bunched
    assert jitter("turn-1", 4.0) == 4 * jitter("turn-1", 1.0)
    assert jitter("x", 0.0) == 0.0


def test_aimd_increase_is_linear_in_time_and_capped():
    assert aimd_factor(0.5, 100.0, 130.0, 0.1) == pytest.approx(0.55)     # half a minute: +0.05
    assert aimd_factor(0.5, 100.0, 100.0, 0.1) == 0.5
    assert aimd_factor(0.5, 100.0, 90.0, 0.1) == 0.5                      # no time, no growth
    assert aimd_factor(0.9, 0.0, 600.0, 0.1) == 1.0


def test_bucket_waits_and_never_for_what_cannot_fit():
    # 60/min at factor 0.5 refills 0.5/s and holds 30.
    b = Bucket(60, 0.0, 10.0)
    assert b.capacity(0.5) == 30.0
    assert b.available(14.0, 0.5) == 2.0
    assert b.available(5.0, 0.5) == 0.0                                   # no refill backwards
    assert b.available(1000.0, 0.5) == 30.0
    assert b.seconds_until(3.0, 10.0, 0.5) == pytest.approx(6.0)
    assert b.seconds_until(0.0, 10.0, 0.5) == 0.0
    assert b.seconds_until(30.0, 10.0, 0.5) == pytest.approx(60.0)
    assert math.isinf(b.seconds_until(31.0, 10.0, 0.5))                   # beyond the capacity
    assert math.isinf(Bucket(60, 0.0, 0.0).seconds_until(1.0, 0.0, 0.0))
    b.advance(14.0, 0.5)
    assert (b.level, b.updated_at) == (2.0, 14.0)
    b.advance(12.0, 0.5)                                                  # time never runs backwards
    assert (b.level, b.updated_at) == (2.0, 14.0)
    assert b.to_dict() == {"limit_per_minute": 60, "level": 2.0, "updated_at": 14.0}

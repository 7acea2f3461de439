"""The limiter settings: the provider's limiter shape, its window, and the cap on an agent's
own retry-after. Their defaults, their bounds, and how a pool recorded before them reads."""
from __future__ import annotations

import pytest

from app.api.pool_input import settings_of
from app.api.types import PoolInput, RateLimiter
from app.domain.settings import FIXED_WINDOW, SLIDING_WINDOW, TOKEN_BUCKET, PoolSettings


def test_a_new_pool_admits_against_a_sliding_minute_and_caps_agent_claims():
    s = PoolSettings()
    assert (s.limiter, s.limiter_window_seconds, s.agent_retry_after_cap_seconds) == (SLIDING_WINDOW, 60.0, 30.0)
    assert s.windowed and s.rate_rules
    d = s.to_dict()
    assert d["limiter"] == SLIDING_WINDOW and d["agent_retry_after_cap_seconds"] == 30.0
    assert "limiter_window_seconds" not in d            # written only when not the default
    assert PoolSettings.from_dict(d) == s


def test_a_pool_recorded_before_the_limiter_reads_as_the_old_token_bucket():
    old = PoolSettings().to_dict()
    for key in ("limiter", "agent_retry_after_cap_seconds"):
        del old[key]
    s = PoolSettings.from_dict(old)
    assert s.limiter is None and s.agent_retry_after_cap_seconds is None
    assert not s.windowed and not s.rate_rules
    assert s.to_dict() == old                           # its stored settings stay byte for byte
    assert PoolSettings().legacy().limiter is None


@pytest.mark.parametrize("limiter, windowed", [(TOKEN_BUCKET, False), (SLIDING_WINDOW, True), (FIXED_WINDOW, True)])
def test_each_limiter_round_trips(limiter, windowed):
    s = PoolSettings(limiter=limiter, limiter_window_seconds=10.0).validate()
    assert s.windowed is windowed and s.rate_rules
    assert PoolSettings.from_dict(s.to_dict()) == s


@pytest.mark.parametrize("change, message", [
    ({"limiter": "leaky"}, "limiter must be"),
    ({"limiter_window_seconds": 0.5}, "limiterWindowSeconds must be between 1 and 3600"),
    ({"limiter_window_seconds": 3601}, "limiterWindowSeconds must be between 1 and 3600"),
    ({"rpm": 5, "limiter_window_seconds": 10.0}, "at least 1 request"),   # 5 x 10/60 < 1
    ({"agent_retry_after_cap_seconds": 61}, "agentRetryAfterCapSeconds must be between 0 and 60"),
    ({"agent_retry_after_cap_seconds": -1}, "agentRetryAfterCapSeconds must be between 0 and 60"),
])
def test_bad_limiter_settings_are_refused_with_their_reason(change, message):
    with pytest.raises(ValueError, match=message):
        PoolSettings(**change).validate()


def test_bounds_are_inclusive():
    PoolSettings(limiter_window_seconds=1, rpm=60, agent_retry_after_cap_seconds=60).validate()
    PoolSettings(limiter_window_seconds=3600, agent_retry_after_cap_seconds=0).validate()
    PoolSettings(limiter=TOKEN_BUCKET, rpm=1).validate()   # a bucket has no window to fill


def test_pool_input_carries_the_limiter():
    given = PoolInput(name="p", lanes=1, rpm=60, tpm=1000, limiter=RateLimiter.FIXED_WINDOW,
                      limiter_window_seconds=10.0, agent_retry_after_cap_seconds=5.0)
    s = settings_of(given)
    assert (s.limiter, s.limiter_window_seconds, s.agent_retry_after_cap_seconds) == (FIXED_WINDOW, 10.0, 5.0)
    assert settings_of(PoolInput(name="p", lanes=1, rpm=60, tpm=1000)).limiter == SLIDING_WINDOW

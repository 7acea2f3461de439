"""The simulated provider's three limiter shapes (agentrm_bench.sim), and the scheduler against
each: the issue's case (a pool that models a token bucket draws 429s from a sliding-window
provider at the first refill after its burst) and the default (a sliding window draws none
from any shape)."""
from __future__ import annotations

import pytest

from agentrm_bench.sim import FixedWindowProvider, Provider, SlidingWindowProvider, provider_of
from app.domain import events as ev
from app.domain.admission import parse_rate_headers
from app.domain.apply import new_pool
from app.domain.decide import decide_many
from app.domain.settings import PoolSettings


def test_a_sliding_window_admits_the_limit_per_window_and_says_when_the_next_frees():
    p = SlidingWindowProvider(12, 1_000_000)
    assert all(p.submit(float(i), 10, 10).admitted for i in range(12))
    refused = p.submit(15.0, 10, 10)
    assert not refused.admitted and refused.retry_after_s == 45.0          # t=0 leaves at 60
    seen = parse_rate_headers(refused.headers, 15.0)
    assert seen.remaining_requests == 0 and seen.reset_requests_s == pytest.approx(45.0)
    assert p.submit(60.0, 10, 10).admitted and not p.submit(60.5, 10, 10).admitted
    assert p.submit(61.0, 10, 10).admitted                                  # t=1 left at 61


def test_fixed_windows_start_again_at_each_window_and_say_when_it_ends():
    p = FixedWindowProvider(60, 1_000_000, window_s=10.0, phase_s=3.0)    # 10 per slice of 10 s
    assert all(p.submit(3.0 + i * 0.9, 10, 10).admitted for i in range(10))
    refused = p.submit(12.5, 10, 10)
    assert not refused.admitted and parse_rate_headers(refused.headers, 12.5).reset_requests_s == pytest.approx(0.5)
    assert p.submit(13.0, 10, 10).admitted


def test_settling_corrects_a_windows_charge_to_the_real_usage():
    p = SlidingWindowProvider(60, 1_000)
    assert p.submit(0.0, 400, 400).admitted and not p.submit(0.0, 100, 200).admitted
    p.settle(1.0, 800, 100)
    assert p.submit(1.0, 100, 200).admitted
    f = FixedWindowProvider(60, 1_000)
    assert f.submit(0.0, 400, 400).admitted
    f.settle(1.0, 800, 100)
    assert f.submit(1.0, 400, 400).admitted


def test_the_shapes_are_chosen_by_the_pool_settings_names():
    assert type(provider_of("token-bucket", 10, 10)) is Provider
    assert provider_of("sliding-window", 10, 10, window_s=10.0).window_s == 10.0
    assert isinstance(provider_of("fixed-window", 10, 10), FixedWindowProvider)


def run(limiter: str, provider: Provider, seconds: float = 300.0, agents: int = 12) -> tuple[int, int]:
    """Gateway calls of `agents` agents, one at a time each, through a pool of rpm 12 to
    `provider`, every call answered a second after its grant: (successes, 429s)."""
    s = PoolSettings(lanes=agents, rpm=12, tpm=1_000_000, limiter=limiter, lease_seconds=600.0,
                     boost_seconds=600.0).validate()
    state = new_pool({"settings": s.to_dict(), "at": 0.0})
    names = [f"a{i}" for i in range(agents)]
    decide_many(state, [(ev.AGENT_REGISTERED, {"agent_id": a, "name": a, "priority_class": ev.INTERACTIVE}, None)
                        for a in names], 0.0)
    answers: dict[str, tuple[float, dict]] = {}
    ok = limited = n = 0
    inputs = []
    for a in names:
        inputs.append((ev.TURN_REQUESTED, {"turn_id": f"t{n}", "agent_id": a, "estimated_tokens": 10,
                                           "max_output_tokens": 10, "holder": "gateway", "model": "m"}, None))
        n += 1
    for step in range(int(seconds * 10)):
        now = step / 10.0
        for turn_id, (due, report) in list(answers.items()):
            if due <= now:
                del answers[turn_id]
                inputs.append((ev.COMPLETION_REPORTED, report, None))
                agent = report["agent_id"]
                inputs.append((ev.TURN_REQUESTED, {"turn_id": f"t{n}", "agent_id": agent, "estimated_tokens": 10,
                                                   "max_output_tokens": 10, "holder": "gateway", "model": "m"}, None))
                n += 1
        out = decide_many(state, [(t, {**d, "at": now}, c) for t, d, c in inputs], now)
        inputs = []
        for type_, d in out:
            if type_ != ev.TURN_GRANTED:
                continue
            answer = provider.submit(now, 10, 10)
            if answer.admitted:
                ok += 1
                provider.settle(now + 1.0, 20, 15)
            else:
                limited += 1
            answers[d["turn_id"]] = (now + 1.0, {
                "turn_id": d["turn_id"], "agent_id": d["agent_id"],
                "outcome": ev.OK if answer.admitted else ev.RATE_LIMITED,
                "prompt_tokens": 10 if answer.admitted else 0, "completion_tokens": 5 if answer.admitted else 0,
                "rate_limit_headers": answer.headers})
    return ok, limited


def test_a_pool_that_models_a_bucket_draws_429s_from_a_sliding_window():
    ok, limited = run("token-bucket", SlidingWindowProvider(12, 1_000_000))
    assert limited > 0


@pytest.mark.parametrize("provider", [Provider(12, 1_000_000), SlidingWindowProvider(12, 1_000_000),
                                      FixedWindowProvider(12, 1_000_000, phase_s=17.0),
                                      FixedWindowProvider(12, 1_000_000, phase_s=59.5)],
                         ids=["token-bucket", "sliding-window", "fixed-window", "fixed-window, late phase"])
def test_the_default_sliding_window_draws_no_429_from_any_shape(provider):
    # 300 s at 12 a minute, counted over 61 s: 12 at 0, 61, 122, 183 and 244 s = 60.
    ok, limited = run("sliding-window", provider)
    assert limited == 0 and ok == 60

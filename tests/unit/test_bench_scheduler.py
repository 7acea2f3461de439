"""The scheduler benchmark on small, fast workloads: it runs, it is deterministic, its numbers
have the promised shape, and its simulated provider keeps its own limit."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.bench.policies import POLICY_NAMES
from app.bench.scheduler_bench import METRIC_KEYS, main, run, simulate
from app.bench.sim import Provider
from app.bench.workload import CLASSES, WorkloadParams, call_attempts, generate

SMALL = dict(agents=24, minutes=3.0, seed=7)


def _envelope_ok(times_and_amounts: list[tuple[float, float]], limit_per_minute: float) -> bool:
    """A token bucket of one minute's capacity admits at most limit + limit * (b - a) / 60 in
    any interval [a, b]; check every interval that starts and ends at an admission."""
    n = len(times_and_amounts)
    for i in range(n):
        total = 0.0
        for j in range(i, n):
            total += times_and_amounts[j][1]
            span = times_and_amounts[j][0] - times_and_amounts[i][0]
            if total > limit_per_minute + limit_per_minute * span / 60.0 + 1e-6:
                return False
    return True


def test_trace_is_seeded_and_flattens_for_a_live_check():
    params = WorkloadParams(**SMALL)
    assert generate(params) == generate(params)
    assert generate(params) != generate(WorkloadParams(**{**SMALL, "seed": 8}))
    attempts = call_attempts(generate(params))
    assert len(attempts) == SMALL["agents"]
    first = next(seq for seq in attempts.values() if seq)[0]
    assert {"prompt_tokens", "output_tokens", "max_output_tokens", "provider_latency_s",
            "tool_after_s", "hangs", "idle_before_s", "not_before_s"} <= set(first)
    assert sum(len(seq) for seq in attempts.values()) == generate(params).call_count()


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_every_policy_finishes_with_every_metric(policy):
    trace = generate(WorkloadParams(**SMALL))
    metrics, series = simulate(policy, trace, lanes=8, rpm=200, tpm=400_000, agentrm_overrides={"lease_seconds": 10.0})
    for key in METRIC_KEYS:
        assert key in metrics
    assert metrics["calls_completed"] > 0
    assert 0.0 <= metrics["lane_waste"] <= 1.0
    assert set(metrics["per_class"]) <= set(CLASSES)
    for cls in metrics["per_class"].values():
        assert {"p50_latency_s", "p95_latency_s", "p99_latency_s", "throughput_per_min", "max_wait_s",
                "jain_fairness"} <= set(cls)
    assert len(series["t"]) == len(series["occupancy"]) == len(series["hung_occupancy"])


def test_json_output_has_the_promised_keys(capsys):
    assert main(["--agents", "16", "--minutes", "2", "--seeds", "1", "--lanes", "6", "--rpm", "120",
                 "--tpm", "300000", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["workload"]["agents"] == 16
    assert set(result["policies"]) == set(POLICY_NAMES)
    for metrics in result["policies"].values():
        for key in METRIC_KEYS:
            assert key in metrics
        assert "per_class" in metrics


def test_same_seed_same_numbers():
    a = run(None, seeds=2, lanes=6, rpm=120, tpm=300_000, **SMALL)
    b = run(None, seeds=2, lanes=6, rpm=120, tpm=300_000, **SMALL)
    a.pop("elapsed_s"), b.pop("elapsed_s")
    assert a == b


def test_agentrm_leaves_no_zombies_where_lanes_fifo_does():
    trace = generate(WorkloadParams(agents=30, minutes=4.0, seed=3, hang_rate=0.15))
    agentrm, _ = simulate("agentrm", trace, lanes=8, rpm=400, tpm=2_000_000, agentrm_overrides={"lease_seconds": 10.0})
    fifo, _ = simulate("lanes-fifo", trace, lanes=8, rpm=400, tpm=2_000_000)
    assert agentrm["zombies"] == 0
    assert agentrm["reaps"] > 0
    assert fifo["zombies"] > 0


def test_report_files_are_written(tmp_path):
    run(tmp_path, seeds=1, lanes=6, rpm=120, tpm=300_000, agents=12, minutes=1.5, seed=2)
    for name in ("scheduler.md", "scheduler_latency_cdf.png", "scheduler_lanes.png", "scheduler_429s.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert "| agentrm |" in (tmp_path / "scheduler.md").read_text()


def test_provider_never_admits_above_its_limit_under_the_most_aggressive_policy():
    from app.bench.policies import Context, make_policy
    from app.bench.sim import ProviderLink, Recorder, Simulator
    trace = generate(WorkloadParams(agents=40, minutes=2.0, seed=5))
    sim, provider = Simulator(), Provider(rpm=60, tpm=200_000)
    recorder = Recorder(duration_s=trace.duration_s)
    policy = make_policy("aios-fifo", Context(sim, provider, recorder, ProviderLink(sim, provider, recorder),
                                              trace, lanes=8, seed=5))
    policy.start()
    sim.run(trace.duration_s)
    assert provider.rejections, "the workload should push the provider past its limit"
    assert _envelope_ok([(t, 1.0) for t, _ in provider.admitted_log], provider.rpm)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 30, allow_nan=False), st.integers(1, 40_000)), min_size=1, max_size=60))
def test_provider_token_bucket_holds_for_any_arrivals(arrivals):
    provider = Provider(rpm=20, tpm=50_000)
    for when, tokens in sorted(arrivals):
        answer = provider.submit(when, tokens, 0)
        if not answer.admitted:
            assert answer.retry_after_s is not None and answer.retry_after_s >= 1
            assert "retry-after" in answer.headers and "x-ratelimit-remaining-tokens" in answer.headers
    assert _envelope_ok([(t, 1.0) for t, _ in provider.admitted_log], provider.rpm)
    assert _envelope_ok([(t, float(c)) for t, c in provider.admitted_log], provider.tpm)

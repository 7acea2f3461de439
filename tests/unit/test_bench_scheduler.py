"""The scheduler benchmark on small, fast workloads: it runs, it is deterministic, its numbers
have the promised shape, its simulated provider keeps its own limit and faults as described,
and its metrics compute what their definitions say."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrm_bench.harness import run_policy
from agentrm_bench.metrics import envelope_excess, physical_limit
from agentrm_bench.scenarios import SCENARIOS
from agentrm_bench.scheduler_bench import REPORTED_KEYS, _param, main, run, simulate
from agentrm_bench.sim import Provider, Saturation
from agentrm_bench.workload import (
    BATCH,
    CLASSES,
    AgentScript,
    CallSpec,
    RunSpec,
    Trace,
    WorkloadParams,
    call_attempts,
    generate,
)

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


from agentrm_bench.policies import POLICY_NAMES as POLICIES  # noqa: E402


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_finishes_with_every_metric(policy):
    trace = generate(WorkloadParams(**SMALL, stall_rate=0.05, slow_rate=0.05))
    metrics, series = simulate(policy, trace, lanes=8, rpm=200, tpm=400_000, agentrm_overrides={"lease_seconds": 10.0})
    for key in REPORTED_KEYS:
        assert key in metrics
    assert metrics["calls_completed"] > 0
    assert 0.0 <= metrics["lane_waste"] <= 1.0
    assert set(metrics["per_class"]) <= set(CLASSES)
    assert set(metrics["p95_wait_s"]) == set(metrics["jain"]) == set(metrics["per_class"])
    for cls in metrics["per_class"].values():
        assert {"p50_latency_s", "p95_latency_s", "p99_latency_s", "p95_wait_s", "run_completion_mean_s",
                "throughput_per_min", "max_wait_s", "jain_fairness", "max_service_gap"} <= set(cls)
    assert len(series["t"]) == len(series["occupancy"]) == len(series["hung_occupancy"])



def _trace(calls: list[CallSpec], minutes: float = 5.0, cls: str = BATCH) -> Trace:
    agent = AgentScript("bat0000", cls, (RunSpec(idle_before_s=0.0, not_before_s=0.0, calls=tuple(calls)),))
    return Trace(params=WorkloadParams(agents=1, minutes=minutes), agents=(agent,))


def _call(i: int = 0, latency: float = 10.0, first: float = 0.5, tool: float = 0.0, **fault) -> CallSpec:
    return CallSpec(call_id=f"c{i}", prompt_tokens=1000, max_output_tokens=100, output_tokens=50,
                    provider_latency_s=latency, first_chunk_s=first, tool_after_s=tool, **fault)


def test_json_output_has_the_promised_keys_for_every_policy(capsys):
    assert main(["--scenario", "hangs", "--seed", "3", "--seed", "4", "--set", "agents=16", "--set", "minutes=2",
                 "--policies", "agentrm,agentrm-nodeadline,openclaw-lanes", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"scenario", "workload", "physical_limit_calls_per_min", "policies"} <= set(result)
    assert result["scenario"] == "hangs" and result["workload"]["seeds"] == [3, 4]
    assert result["workload"]["agents"] == 16 and result["workload"]["stall_rate"] == 0.02
    assert set(result["policies"]) == {"agentrm", "agentrm-nodeadline", "openclaw-lanes"}
    for metrics in result["policies"].values():
        for key in REPORTED_KEYS:
            assert key in metrics and len(metrics["per_seed"][key]) == 2
        for keyed in ("p95_wait_s", "p99_wait_s", "jain"):
            assert set(metrics[keyed]) <= set(CLASSES)
        values = metrics["per_seed"]["throughput_per_min"]
        assert metrics["throughput_per_min"] == pytest.approx(sum(values) / 2)


def test_unknown_policies_and_bad_settings_are_refused_with_a_clear_error(capsys):
    assert main(["--policies", "agentrm,fastest-ever", "--seeds", "1"]) == 2
    assert "unknown policies: fastest-ever" in capsys.readouterr().err
    assert main(["--lanes", "0", "--seeds", "1"]) == 2
    assert "--lanes must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--scenario", "no-such-scenario"])


def test_same_seed_same_numbers():
    a = run("mixed-lanes", (2,), ("agentrm", "openclaw-lanes", "vtc"), {"agents": 20, "minutes": 2.0})
    b = run("mixed-lanes", (2,), ("agentrm", "openclaw-lanes", "vtc"), {"agents": 20, "minutes": 2.0})
    a.pop("elapsed_s"), b.pop("elapsed_s")
    assert a == b


def test_every_scenario_is_defined_with_its_sources_and_runs():
    assert ({"mixed-lanes", "provider-bound", "hangs", "runs", "saturating-provider", "replicas", "paper"}
            <= set(SCENARIOS))
    for sc in SCENARIOS.values():
        assert sc.about and sc.sources, sc.name
        WorkloadParams(**sc.params)            # every preset names real workload parameters
    assert SCENARIOS["saturating-provider"].sweep_lanes and SCENARIOS["replicas"].replicas == 3


def test_a_hang_a_stall_and_a_slow_call_are_what_their_names_say():
    trace = _trace([_call(0, fault="hang"), _call(1, latency=20.0, fault="stall", stall_after_s=3.0),
                    _call(2, latency=10.0, first=0.5, fault="slow", slow_extra_s=40.0)], minutes=10)
    rec = run_policy("agentrm", trace, 1, 600, 1_000_000, {"lease_seconds": 30.0}).recorder
    hang, stall, slow = rec.calls
    # first attempts: the hang and the stall never answer; each is retried once (reaped)
    assert hang.attempts == 2 and stall.attempts == 2 and slow.attempts >= 1
    assert all(r.completed_at is not None for r in rec.calls)
    assert rec.hung_attempts_cut == 2


def test_watchdog_cuts_at_the_first_chunk_limit_and_after_a_stall_not_while_streaming():
    from agentrm_bench.sim import CallRecord, ProviderLink, Recorder, Simulator, Watchdog
    sim, provider = Simulator(), Provider(600, 1_000_000)
    recorder = Recorder(duration_s=1000)
    link = ProviderLink(sim, provider, recorder)
    fired: dict[str, float] = {}

    def send(name, call, first_s, idle_s):
        rec = CallRecord(call, "a", BATCH, 0.0)
        attempt = link.send(rec, lambda a: None)
        Watchdog(sim, attempt, first_s, idle_s, lambda a: (fired.__setitem__(name, sim.now), a.abandon(sim.now)))
        return attempt

    send("hang", _call(0, fault="hang"), 30.0, 30.0)
    send("stall", _call(1, latency=60.0, first=2.0, fault="stall", stall_after_s=5.0), 30.0, 10.0)
    send("long", _call(2, latency=100.0, first=2.0), 30.0, 10.0)         # streams for 98 s: never cut
    send("slow", _call(3, latency=10.0, first=0.5, fault="slow", slow_extra_s=40.0), 30.0, 10.0)
    sim.run(1000)
    assert fired == {"hang": 30.0, "stall": 17.0, "slow": 30.0}
    assert recorder.live_calls_cut == 1 and recorder.hung_attempts_cut == 2


def test_an_outage_hangs_every_attempt_sent_inside_it_retries_included():
    trace = _trace([_call(0), _call(1)], minutes=10)
    rec = run_policy("agentrm", trace, 1, 600, 1_000_000, {"lease_seconds": 30.0}, outages=((0.0, 50.0),)).recorder
    first = rec.calls[0]
    assert first.attempts >= 2 and first.completed_at is not None and first.completed_at > 50.0
    assert rec.hung_attempts_cut == first.attempts - 1


def test_saturation_model_reproduces_its_cited_fit_and_plateaus():
    sat = Saturation()
    for n, tok_s in ((4, 210), (16, 644), (32, 975), (48, 1190)):     # the published sweep
        assert sat.per_request_rate(n) * n == pytest.approx(tok_s, rel=0.03)
    for n, ttft_ms in ((8, 79), (32, 362), (48, 667)):
        assert sat.ttft(n) * 1000 == pytest.approx(ttft_ms, rel=0.12)
    # on the simulated provider: past max_running, throughput stops growing and latency grows
    def makespan(k):
        calls = [_call(i, latency=5.0) for i in range(k)]
        agents = tuple(AgentScript(f"bat{i:04d}", BATCH, (RunSpec(0.0, 0.0, (c,)),)) for i, c in enumerate(calls))
        trace = Trace(params=WorkloadParams(agents=k, minutes=10), agents=agents)
        rec = run_policy("gateway-fifo@120s", trace, 1000, 10_000_000, 10**10,
                         saturation=Saturation(max_running=8)).recorder
        return max(r.completed_at for r in rec.calls)
    assert makespan(16) == pytest.approx(2 * makespan(8), rel=0.1)


def test_envelope_excess_measures_what_a_bucket_would_have_refused():
    assert envelope_excess([(0.0, 1.0)] * 60, 60) == 0.0                 # a full bucket: one minute's worth
    assert envelope_excess([(0.0, 1.0)] * 61, 60) == pytest.approx(1.0)
    assert envelope_excess([(0.0, 1.0)] * 60 + [(2.0, 1.0)] * 2, 60) == pytest.approx(0.0)   # 2 s refill 2
    assert envelope_excess([(0.0, 1.0)] * 60 + [(1.0, 1.0)] * 3, 60) == pytest.approx(2.0)


def test_physical_limit_is_the_tightest_of_the_providers_concurrency_rpm_and_tpm():
    trace = _trace([_call(0, latency=6.0), _call(1, latency=6.0)])       # 6 s, 1050 tokens each, 5 minutes
    assert physical_limit(trace, 2, 10_000, 10**9, concurrency=2)["calls_per_min"] == pytest.approx(20.0)
    assert physical_limit(trace, 2, 15, 10**9, concurrency=2)["binding"] == "rpm"
    # lanes the provider does not enforce are no physical limit
    assert physical_limit(trace, 2, 15, 10**9)["binding"] == "rpm"
    lim = physical_limit(trace, 100, 10_000, 10_500)
    # the bucket's first full minute: (5 + 1) / 5 of the TPM's 10 calls a minute
    assert lim["binding"] == "tpm" and lim["calls_per_min"] == pytest.approx(12.0)


def test_agentrm_leaves_no_zombies_where_run_held_lanes_do():
    trace = generate(WorkloadParams(agents=30, minutes=4.0, seed=3, hang_rate=0.15))
    agentrm, _ = simulate("agentrm", trace, lanes=8, rpm=400, tpm=2_000_000, agentrm_overrides={"lease_seconds": 10.0})
    fifo, _ = simulate("aios", trace, lanes=8, rpm=400, tpm=2_000_000)
    assert agentrm["zombies"] == 0 and agentrm["reaps"] > 0 and fifo["zombies"] > 0
    assert agentrm["hung_lane_seconds"] < fifo["hung_lane_seconds"]


def test_a_call_still_streaming_at_the_end_counts_as_in_flight_for_every_policy():
    trace = _trace([_call(0, latency=100.0)], minutes=1.0)       # ends 40 s after the window
    for policy in POLICIES:
        m, _ = simulate(policy, trace, lanes=3, rpm=600, tpm=1_000_000)
        assert m["lane_waste"] < 0.05, (policy, m["lane_waste"])
        assert m["hung_lane_seconds"] == 0


def test_set_reads_any_workload_parameter_typed_like_its_default():
    assert _param("tool_median_s=2") == ("tool_median_s", 2.0)
    assert _param("interactive_calls_per_run=1,6") == ("interactive_calls_per_run", (1, 6))
    assert _param("calls_per_run_alpha=1.5") == ("calls_per_run_alpha", 1.5)
    for bad in ("no_such_param=1", "tool_median_s", "agents=many"):
        with pytest.raises(Exception) as err:
            _param(bad)
        assert "--set" in str(err.value)


def test_report_files_are_written(tmp_path):
    assert main(["--scenario", "saturating-provider", "--seeds", "1", "--set", "agents=12", "--set", "minutes=1.5",
                 "--policies", "agentrm,fixed-lanes@4,fixed-lanes@8", "--out", str(tmp_path)]) == 0
    for name in ("scheduler_saturating-provider.md", "scheduler_saturating-provider.json",
                 "scheduler_saturating-provider_latency_cdf.png", "scheduler_saturating-provider_runs_cdf.png",
                 "scheduler_saturating-provider_goodput.png", "scheduler_saturating-provider_curve.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert "| fixed-lanes@8 |" in (tmp_path / "scheduler_saturating-provider.md").read_text()


def test_provider_never_admits_above_its_limit_under_the_most_aggressive_policy():
    from agentrm_bench.policies import Context, make_policy
    from agentrm_bench.sim import ProviderLink, Recorder, Simulator
    trace = generate(WorkloadParams(agents=40, minutes=2.0, seed=5))
    sim, provider = Simulator(), Provider(rpm=60, tpm=200_000)
    recorder = Recorder(duration_s=trace.duration_s)
    policy = make_policy("no-gateway", Context(sim, provider, recorder, ProviderLink(sim, provider, recorder),
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


def test_queue_wait_runs_to_the_attempt_that_was_answered_wherever_the_call_waited():
    # one call, a provider that refuses it for the first 60 s (RPM 1, bucket emptied by a first call)
    trace = _trace([_call(0, latency=2.0), _call(1, latency=2.0)], minutes=5)
    m, _ = simulate("no-gateway", trace, lanes=3, rpm=1, tpm=1_000_000)
    # the second call is refused (429, retry-after up to 60 s) and waits in the client's retry loop
    assert m["rate_limited_count"] >= 1
    assert m["p99_wait_s"]["BATCH"] > 30.0


def test_service_gap_compares_backlogged_agents_of_one_class_per_minute():
    from agentrm_bench.metrics import service_gap
    from agentrm_bench.sim import CallRecord, Recorder
    rec = Recorder(duration_s=180.0)
    big, small = _call(0), _call(1)        # cost 1000 + 2 x 50 = 1100 each
    for i, (agent, t_done) in enumerate((("a", 70.0), ("a", 80.0), ("b", 150.0))):
        r = CallRecord(big if i < 2 else small, agent, BATCH, requested_at=10.0)
        r.completed_at = t_done
        rec.calls.append(r)
    # minute 1 (60-120 s): both a and b backlogged at 60 s; a got 2 x 1100, b nothing
    assert service_gap(rec, 180.0, BATCH, ["a", "b"]) == pytest.approx(2200.0)
    # an agent of another class is not compared
    assert service_gap(rec, 180.0, BATCH, ["a"]) == 0.0


def test_a_fault_belongs_to_the_first_attempt_the_provider_admits():
    # RPM 1: the second agent's first attempt is refused (429); its admitted retry still hangs
    calls = [_call(0, latency=1.0), _call(1, latency=1.0, fault="hang")]
    agents = tuple(AgentScript(f"bat{i:04d}", BATCH, (RunSpec(0.0, 0.0, (c,)),)) for i, c in enumerate(calls))
    trace = Trace(params=WorkloadParams(agents=2, minutes=5), agents=agents)
    rec = run_policy("no-gateway", trace, 3, 1, 1_000_000).recorder
    hung = rec.calls[1]
    # refused first, then admitted about a minute later: that admitted attempt hangs, and the
    # SDK's 600 s timeout has not come by the end
    assert hung.rate_limited >= 1 and hung.admitted_attempts == 1 and hung.completed_at is None


def test_a_quarantined_agent_counts_as_a_failed_call_and_a_stuck_agent():
    # an outage longer than three leases: three consecutive reaps quarantine the agent
    trace = _trace([_call(0), _call(1)], minutes=10)
    m, _ = simulate("agentrm", trace, lanes=1, rpm=600, tpm=1_000_000, agentrm_overrides={"lease_seconds": 30.0})
    assert m["stuck_agents"] == 0
    from agentrm_bench.scenarios import Scenario
    outage = Scenario(name="t", about="t", outages=((0.0, 200.0),))
    m, _ = simulate("agentrm", trace, lanes=1, rpm=600, tpm=1_000_000,
                    agentrm_overrides={"lease_seconds": 30.0}, scenario=outage)
    assert m["stuck_agents"] == 1 and m["failed_calls"] == 1 and m["calls_completed"] == 0

"""Persistent faults in the scheduler benchmark's trace and simulator: slowness that comes back
on a call's retries and on its agent's later calls (scope "agent"), or that belongs to a
window of a model or of the provider; seeded, the same for every policy, and absent (not a
single draw) when the persistence is 0."""
from __future__ import annotations

import pytest

from agentrm_bench.scenarios import SCENARIOS
from agentrm_bench.scheduler_bench import main
from agentrm_bench.sim import CallRecord, Provider, ProviderLink, Recorder, Simulator, SlowWindows
from agentrm_bench.workload import (
    BATCH,
    MAX_RETRY_FAULTS,
    AgentScript,
    CallSpec,
    RunSpec,
    SlowWindow,
    Trace,
    WorkloadParams,
    generate,
)

BASE = dict(agents=60, minutes=30.0, seed=5, hang_rate=0.02, stall_rate=0.02, slow_rate=0.05)


def _calls(trace: Trace) -> list[list[CallSpec]]:
    return [[c for r in a.runs for c in r.calls] for a in trace.agents]


def test_without_persistence_nothing_is_drawn_and_traces_are_unchanged():
    plain = generate(WorkloadParams(**BASE))
    for extra in ({"persistence_scope": "model", "models": 3}, {"persistence_scope": "window"},
                  {"persistent_faults": ("slow", "hang", "stall")}):
        assert generate(WorkloadParams(**BASE, **extra)).agents == plain.agents
    assert not plain.slow_windows
    assert not any(c.retry_faults for seq in _calls(plain) for c in seq)


def test_an_agent_slow_once_stays_slow_for_later_calls_and_retries_with_probability_p():
    p = 0.8
    trace = generate(WorkloadParams(**BASE, fault_persistence=p))
    after_slow = after_other = slow_after_slow = slow_after_other = 0
    chains = []
    for seq in _calls(trace):
        for prev, call in zip(seq, seq[1:]):
            if prev.fault == "slow":
                after_slow += 1
                slow_after_slow += call.fault == "slow"
            else:
                after_other += 1
                slow_after_other += call.fault == "slow"
        for call in seq:
            if call.fault == "slow":
                chains.append(len(call.retry_faults))
                assert all(kind == "slow" and 15.0 <= size <= 90.0 for kind, size in call.retry_faults)
            else:
                assert call.retry_faults == ()   # only slowness persists here
    # P(slow | slow before) = p + (1 - p) r = 0.81; P(slow | not) = r = 0.05
    assert after_slow > 500 and 0.77 <= slow_after_slow / after_slow <= 0.85
    assert 0.04 <= slow_after_other / after_other <= 0.06
    # retries: a geometric run of mean p / (1 - p) = 4, capped
    assert 3.5 <= sum(chains) / len(chains) <= 4.5 and max(chains) <= MAX_RETRY_FAULTS
    assert generate(WorkloadParams(**BASE, fault_persistence=p)) == trace          # seeded
    assert generate(WorkloadParams(**{**BASE, "seed": 6}, fault_persistence=p)) != trace


def test_with_persistence_one_an_agent_never_recovers():
    trace = generate(WorkloadParams(**{**BASE, "agents": 10}, fault_persistence=1.0))
    slowed = 0
    for seq in _calls(trace):
        first = next((i for i, c in enumerate(seq) if c.fault == "slow"), None)
        if first is None:
            continue
        slowed += 1
        assert all(c.fault == "slow" and len(c.retry_faults) == MAX_RETRY_FAULTS for c in seq[first:])
    assert slowed >= 5


def test_the_simulator_meets_a_retry_fault_on_that_admitted_attempt():
    call = CallSpec(call_id="c0", prompt_tokens=1000, max_output_tokens=100, output_tokens=50,
                    provider_latency_s=5.0, first_chunk_s=0.5, tool_after_s=0.0, fault="slow", slow_extra_s=40.0,
                    retry_faults=(("slow", 30.0), ("hang", 0.0)))
    sim, provider = Simulator(), Provider(600, 1_000_000)
    link = ProviderLink(sim, provider, Recorder(duration_s=1000))
    record = CallRecord(call, "a", BATCH, 0.0)
    first_chunks = []
    for _ in range(4):
        attempt = link.send(record, lambda a: None, on_first_chunk=lambda a: first_chunks.append(a.sent_at))
        sim.run(sim.now + 100.0)
        started = None if attempt.first_chunk_at is None else attempt.first_chunk_at - attempt.sent_at
        expected = {1: 40.5, 2: 30.5, 3: None, 4: 0.5}[record.admitted_attempts]
        assert started == (None if expected is None else pytest.approx(expected))
        attempt.abandon(sim.now)
    assert record.admitted_attempts == 4 and len(first_chunks) == 3   # the hang never starts


def _one_agent(model: str = "m0", windows: tuple[SlowWindow, ...] = ()) -> Trace:
    call = CallSpec(call_id="c0", prompt_tokens=1000, max_output_tokens=100, output_tokens=50,
                    provider_latency_s=5.0, first_chunk_s=0.5, tool_after_s=0.0)
    agent = AgentScript("bat0000", BATCH, (RunSpec(0.0, 0.0, (call,)),), model=model)
    return Trace(params=WorkloadParams(agents=1, minutes=10.0, seed=3), agents=(agent,), slow_windows=windows)


def test_an_attempt_sent_in_a_slow_window_of_its_model_is_slow_by_a_delay_fixed_by_the_trace():
    trace = _one_agent("m1", (SlowWindow("m1", 100.0, 200.0), SlowWindow("m0", 0.0, 600.0)))
    windows = SlowWindows(trace)
    assert not windows.slow(99.0, "bat0000") and windows.slow(100.0, "bat0000") and not windows.slow(200.0, "bat0000")
    assert windows.extra("c0", 2) == SlowWindows(trace).extra("c0", 2) != windows.extra("c0", 3)
    assert 15.0 <= windows.extra("c0", 2) <= 90.0
    provider_wide = SlowWindows(_one_agent("m1", (SlowWindow("*", 50.0, 60.0),)))
    assert provider_wide.slow(55.0, "bat0000") and not provider_wide.slow(60.0, "bat0000")

    sim, provider = Simulator(), Provider(600, 1_000_000)
    link = ProviderLink(sim, provider, Recorder(duration_s=1000), windows)
    record = CallRecord(trace.agents[0].runs[0].calls[0], "bat0000", BATCH, 0.0)
    sim.run(150.0)
    inside = link.send(record, lambda a: None)
    sim.run(400.0)
    outside = link.send(record, lambda a: None)
    sim.run(600.0)
    assert inside.first_chunk_at == pytest.approx(150.0 + 0.5 + windows.extra("c0", 1))
    assert outside.first_chunk_at == pytest.approx(400.5)


@pytest.mark.parametrize("scope", ["model", "window"])
def test_slow_windows_are_seeded_and_slow_for_the_slow_rate_in_the_long_run(scope):
    params = WorkloadParams(agents=8, minutes=600.0, seed=4, slow_rate=0.1, fault_persistence=0.7,
                            persistence_scope=scope, models=2, persistence_window_s=10.0)
    trace = generate(params)
    keys = {"m0", "m1"} if scope == "model" else {"*"}
    assert {w.model for w in trace.slow_windows} == keys
    assert [a.model for a in trace.agents[:4]] == (["m0", "m1", "m0", "m1"] if scope == "model" else ["m0"] * 4)
    for key in keys:
        slow_s = sum(w.end_s - w.start_s for w in trace.slow_windows if w.model == key)
        assert 0.07 <= slow_s / (600 * 60.0) <= 0.13
        episodes = [w for w in trace.slow_windows if w.model == key]
        # consecutive slow windows merge; a run of them lasts 1 / (1 - p) windows on average
        assert 2.5 <= sum(w.end_s - w.start_s for w in episodes) / len(episodes) / 10.0 <= 4.5
    assert generate(params).slow_windows == trace.slow_windows
    assert not any(c.retry_faults for seq in _calls(trace) for c in seq)   # windows carry the retries


def test_hangs_persist_is_hangs_with_persistence_only():
    hangs, persist = SCENARIOS["hangs"], SCENARIOS["hangs-persist"]
    extra = {k: v for k, v in persist.params.items() if k not in hangs.params}
    assert {k: persist.params[k] for k in hangs.params} == hangs.params
    assert extra == {"fault_persistence": 0.8, "persistence_scope": "agent", "persistent_faults": ("slow",)}
    assert (persist.lanes, persist.rpm, persist.tpm, persist.outages) == (hangs.lanes, hangs.rpm, hangs.tpm,
                                                                          hangs.outages)


def test_bad_persistence_settings_are_refused_with_a_clear_error(capsys):
    with pytest.raises(ValueError, match="persistence_scope must be one of agent, model, window"):
        generate(WorkloadParams(persistence_scope="tenant"))
    assert main(["--scenario", "hangs-persist", "--set", "fault_persistence=1.5", "--seeds", "1"]) == 2
    assert "fault_persistence must be between 0 and 1" in capsys.readouterr().err
    assert main(["--scenario", "hangs", "--set", "persistent_faults=slow,late", "--seeds", "1"]) == 2
    assert "unknown kinds late" in capsys.readouterr().err


def test_the_live_check_refuses_a_scenario_whose_faults_it_cannot_replay():
    from agentrm_bench.live_scenarios import ScenarioSettings
    with pytest.raises(ValueError, match="persistent faults, which the live check does not replay"):
        ScenarioSettings("hangs-persist").check()
    ScenarioSettings("hangs").check()

"""`agentrm-gateway`: the real core behind its gateway, which holds the turns. A slow call is
never reaped nor cut (keepalives, 120 s idle limit), a hung one is cut at the idle limit and
retried by the SDK while its lane was freed at suspicion, a stalled stream gives up its lane
at the stall timeout and its error reaches the agent, and no agent is ever quarantined,
where the client-held `agentrm` quarantines an agent whose calls are all slow."""
from __future__ import annotations

import pytest

from agentrm_bench.harness import run_policy
from agentrm_bench.workload import BATCH, AgentScript, CallSpec, RunSpec, Trace, WorkloadParams

IDLE_S = 120.0   # PoolSettings.stream_idle_timeout_seconds
STALL_S = 6.0    # PoolSettings.stall_timeout_seconds


def _trace(calls: list[CallSpec], minutes: float = 20.0) -> Trace:
    agent = AgentScript("bat0000", BATCH, (RunSpec(idle_before_s=0.0, not_before_s=0.0, calls=tuple(calls)),))
    return Trace(params=WorkloadParams(agents=1, minutes=minutes), agents=(agent,))


def _call(i: int, latency: float = 2.0, first: float = 0.5, **fault) -> CallSpec:
    return CallSpec(call_id=f"c{i}", prompt_tokens=1000, max_output_tokens=100, output_tokens=50,
                    provider_latency_s=latency, first_chunk_s=first, tool_after_s=0.0, **fault)


def _run(policy: str, calls: list[CallSpec], minutes: float = 20.0):
    return run_policy(policy, _trace(calls, minutes), 4, 600, 1_000_000, {"lease_seconds": 30.0})


def test_an_agent_whose_calls_are_all_slow_is_served_whole_and_never_quarantined():
    slow = [_call(i, latency=5.0, fault="slow", slow_extra_s=60.0, retry_faults=(("slow", 60.0),) * 4)
            for i in range(6)]
    run = _run("agentrm-gateway", slow)
    rec = run.recorder
    assert all(r.completed_at is not None and r.attempts == 1 for r in rec.calls)
    assert len(rec.calls) == 6 and rec.live_calls_cut == 0 and rec.quarantined_agents == 0
    assert run.policy.reaps == 0                       # keepalives renewed every lease of 30 s
    # the same agent as the client library's: a lease of silence, three times, is a zombie
    held = _run("agentrm", slow).recorder
    assert held.quarantined_agents == 1 and held.stuck_agents == 1


def _warm(n: int = 10) -> list[CallSpec]:
    """Healthy calls first: the model's suspicion deadline is learned from 8 first chunks."""
    return [_call(i) for i in range(n)]


def test_a_hung_call_frees_its_lane_at_suspicion_and_is_retried_by_the_sdk_after_the_idle_limit():
    run = _run("agentrm-gateway", _warm() + [_call(10, fault="hang")])
    rec = run.recorder
    hung = rec.calls[-1]
    assert hung.attempts == 2 and hung.failed == 0 and hung.completed_at is not None
    # cut IDLE_S after it was sent, the SDK's first backoff (0.5 s less up to 25%), then 2 s
    assert IDLE_S + 2.0 < hung.completed_at - hung.first_sent_at < IDLE_S + 2.6
    (hold,) = [h for h in rec.holds if h.hung_s > 0]
    assert hold.ended_at - hold.started_at < 10.0      # the lane went at suspicion, not at the cut
    assert hold.hung_s == pytest.approx(hold.ended_at - hold.hung_since)
    assert rec.hung_attempts_cut == 1 and rec.live_calls_cut == 0 and rec.quarantined_agents == 0
    assert rec.notes["agentrm_gateway_suspicions"] == 1 and rec.notes["agentrm_gateway_sdk_retries"] == 1


def test_a_call_that_hangs_on_every_sdk_retry_reaches_the_agent_which_asks_again():
    run = _run("agentrm-gateway", _warm() + [_call(10, fault="hang", retry_faults=(("hang", 0.0),) * 2)])
    call = run.recorder.calls[-1]
    assert call.attempts == 4 and call.failed == 1 and call.completed_at is not None
    assert call.completed_at - call.first_sent_at > 3 * IDLE_S
    assert run.recorder.notes["agentrm_gateway_errors_to_agent"] == 1


def test_a_stream_that_stalls_gives_up_its_lane_at_the_stall_timeout_and_its_error_reaches_the_agent():
    run = _run("agentrm-gateway", _warm() + [_call(10, latency=20.0, fault="stall", stall_after_s=3.0)])
    rec = run.recorder
    stalled = rec.calls[-1]
    assert stalled.attempts == 2 and stalled.failed == 1 and stalled.completed_at is not None
    (hold,) = [h for h in rec.holds if h.hung_s > 0]
    # a suspect once silent for the stall timeout (its lane freed); the call is cut at the idle limit
    assert hold.hung_s == pytest.approx(STALL_S, abs=0.1)
    assert rec.notes["agentrm_gateway_lanes_freed"] >= 1 and rec.notes["agentrm_gateway_gateway_cuts"] == 1
    assert rec.notes["agentrm_gateway_sdk_retries"] == 0      # an error inside a begun stream

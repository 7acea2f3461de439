"""Fairness that means what it says: Jain's index on service over each agent's zero-wait
demand beside the raw one, the service gap over 5-minute windows, and the gap against VTC's
own bound 2U."""
from __future__ import annotations

import pytest

from agentrm_bench.harness import run_policy
from agentrm_bench.metrics import SERVICE_GAP_LONG_WINDOW_S, service_gap, summarize, vtc_unit
from agentrm_bench.sim import Recorder
from agentrm_bench.workload import (
    BATCH,
    AgentScript,
    CallSpec,
    RunSpec,
    Trace,
    WorkloadParams,
    zero_wait_demand,
)


def call(cid: str, latency: float = 2.0, tool: float = 0.0, output: int = 100) -> CallSpec:
    return CallSpec(call_id=cid, prompt_tokens=100, max_output_tokens=1000, output_tokens=output,
                    provider_latency_s=latency, first_chunk_s=0.5, tool_after_s=tool)


def test_an_agent_that_asks_for_more_lowers_raw_jain_but_not_jain_on_demand():
    # a asks for 1 call, b for 4; with lanes to spare each gets all it asks for.
    agents = (AgentScript("a", BATCH, (RunSpec(0.0, 0.0, (call("a1"),)),)),
              AgentScript("b", BATCH, (RunSpec(0.0, 0.0, tuple(call(f"b{i}", tool=1.0) for i in range(4))),)))
    trace = Trace(WorkloadParams(agents=2, minutes=2.0), agents)
    demand = zero_wait_demand(trace)
    assert demand["a"].calls == 1 and demand["b"].calls == 4 and demand["b"].cost == 4 * 300
    run = run_policy("gateway-fifo@30s", trace, 4, 10_000, 10**9)
    m = summarize(run.recorder, {BATCH: ["a", "b"]}, trace=trace)
    assert m["jain"][BATCH] == pytest.approx(25 / 34)        # (1 + 4)^2 / (2 (1 + 16))
    assert m["jain_demand"][BATCH] == pytest.approx(1.0)


def test_the_service_gap_over_five_minutes_and_against_2u():
    recorder = Recorder(duration_s=600.0)
    big, small = call("x", output=1000), call("y", output=10)
    for agent, c in (("a", big), ("b", small)):
        r = recorder.request(10.0, c, agent, BATCH)   # both backlogged from 10 s
        r.completed_at = 400.0
    # one minute windows: at 400 s neither was backlogged at 360 s? both were (asked at 10)
    assert service_gap(recorder, 600.0, BATCH, ["a", "b"]) == pytest.approx(2100 - 120)
    assert SERVICE_GAP_LONG_WINDOW_S == 300.0
    assert service_gap(recorder, 600.0, BATCH, ["a", "b"], 300.0) == pytest.approx(2100 - 120)
    trace = Trace(WorkloadParams(agents=2, minutes=10.0),
                  (AgentScript("a", BATCH, (RunSpec(0.0, 0.0, (big,)),)),
                   AgentScript("b", BATCH, (RunSpec(0.0, 0.0, (small,)),))))
    assert vtc_unit(trace) == 100 + 2 * 1000
    m = summarize(recorder, {BATCH: ["a", "b"]}, trace=trace)
    assert m["service_gap_over_2u"] == pytest.approx((2100 - 120) / 4200)
    assert m["max_service_gap_5min"] == pytest.approx(2100 - 120)

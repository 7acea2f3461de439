"""The workload's v3 levers: a reasoning-model mix (slow first tokens on every attempt, alive),
answer lengths a scheduler can predict, and the fleet scaled to a load of its lanes."""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace

import pytest

from agentrm_bench.harness import run_policy
from agentrm_bench.scenarios import SCENARIOS
from agentrm_bench.scheduler_bench import agents_for_load, main
from agentrm_bench.workload import WorkloadParams, generate, zero_wait_load

BASE = WorkloadParams(agents=40, minutes=10.0, seed=3, hang_rate=0.0)


def _calls(trace):
    return [c for a in trace.agents for r in a.runs for c in r.calls]


def test_reasoning_calls_think_before_their_first_token_and_nothing_else_changes():
    # A slower call ends an agent's script sooner; the calls both traces hold are the same calls.
    plain = {c.call_id: c for c in _calls(generate(BASE))}
    mixed = _calls(generate(replace(BASE, reasoning_share=0.2)))
    pairs = [(plain[m.call_id], m) for m in mixed]
    slower = [m.first_chunk_s - p.first_chunk_s for p, m in pairs if m.first_chunk_s > p.first_chunk_s + 1e-6]
    assert 0.1 < len(slower) / len(pairs) < 0.3 and min(slower) >= 20.0 - 1e-3 and max(slower) <= 120.0 + 1e-3
    assert all((p.prompt_tokens, p.output_tokens, p.tool_after_s) == (m.prompt_tokens, m.output_tokens, m.tool_after_s)
               for p, m in pairs)
    assert all(m.fault is None for m in mixed)


def test_a_reasoning_call_is_slow_on_its_retry_too():
    trace = generate(replace(BASE, agents=10, minutes=3.0, reasoning_share=1.0))
    # gateway-fifo@10s cuts every call at 10 s; its retry thinks just as long and is cut again.
    run = run_policy("gateway-fifo@10s", trace, 16, 10_000, 10**9)
    assert run.recorder.live_calls_cut >= 2 * len(trace.agents)
    assert all(r.completed_at is None for r in run.recorder.calls)


def _between_agent_share(trace) -> float:
    """The share of the variance of log answer length that is between agents (same class)."""
    by_agent = {a.agent_id: [math.log(c.output_tokens) for r in a.runs for c in r.calls]
                for a in trace.agents if a.priority_class == "INTERACTIVE"}
    values = [v for vs in by_agent.values() for v in vs]
    means = [statistics.fmean(vs) for vs in by_agent.values() if vs]
    return statistics.pvariance(means) / statistics.pvariance(values)


def test_predictable_lengths_belong_to_the_agent():
    assert _between_agent_share(generate(BASE)) < 0.15
    assert _between_agent_share(generate(replace(BASE, length_predictability=0.8))) > 0.6


def test_bad_levers_are_refused():
    for bad in ({"reasoning_share": 1.5}, {"length_predictability": -0.1}):
        with pytest.raises(ValueError):
            replace(BASE, **bad).validate()


def test_the_fleet_is_scaled_to_the_load_asked_for():
    sc = SCENARIOS["mixed-lanes"]
    base = WorkloadParams(**{**sc.params, "minutes": 10.0})
    for load in (0.5, 1.2):
        agents = agents_for_load(base, sc.lanes, load)
        assert zero_wait_load(generate(replace(base, agents=agents)), sc.lanes) == pytest.approx(load, rel=0.1)


def test_the_load_flag_reports_the_load_it_ran(capsys):
    assert main(["--scenario", "runs", "--seed", "2", "--load", "0.8", "--set", "minutes=3",
                 "--policies", "gateway-fifo@30s", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["load"]["asked"] == 0.8 and result["load"]["agents"] > 0
    assert result["load"]["measured"][0] == pytest.approx(0.8, rel=0.15)
    assert main(["--scenario", "runs", "--load", "-1"]) == 2

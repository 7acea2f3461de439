"""The gap-minutes diagnostic recomputes the benchmark's service gap to say who sets it: its
worst minute must be exactly metrics.service_gap, for every policy and class it is used on."""
from __future__ import annotations

import pytest

from agentrm_bench.gap_minutes import gap_minutes, main
from agentrm_bench.harness import run_policy
from agentrm_bench.metrics import _cost, service_gap
from agentrm_bench.workload import CLASSES, WorkloadParams, generate

SMALL = dict(agents=30, minutes=4.0, seed=3, share_interactive=0.5, share_batch=0.5,
             calls_per_run_alpha=1.2, calls_per_run_min=2, hang_rate=0.0)


@pytest.mark.parametrize("policy", ["agentrm", "vtc", "gateway-fifo@30s"])
def test_worst_minute_is_the_benchmarks_service_gap(policy):
    trace = generate(WorkloadParams(**SMALL))
    run = run_policy(policy, trace, lanes=6, rpm=10_000, tpm=12_000_000, provider_concurrency=6)
    end = run.recorder.duration_s
    for cls in CLASSES:
        agents = [a.agent_id for a in trace.agents if a.priority_class == cls]
        if not agents:
            continue
        minutes = gap_minutes(run.recorder, end, cls, agents)
        expected = service_gap(run.recorder, end, cls, agents)
        assert (minutes[0].gap if minutes else 0.0) == pytest.approx(expected)
        for g in minutes:
            # the calls listed are the top agent's, finished in that minute, and sum to its service
            assert all(r.agent_id == g.agent_id and int(r.completed_at // 60) == g.minute for r in g.calls)
            assert sum(_cost(r.call) for r in g.calls) == pytest.approx(g.most)
            assert g.least <= g.most and g.backlogged >= 2


def test_command_line_prints_the_worst_minutes(capsys):
    assert main(["--scenario", "runs", "--seed", "1", "--policies", "vtc", "--top", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" minute ")[0] for line in lines if " minute " in line] == ["vtc INTERACTIVE", "vtc BATCH"]
    assert any(line.strip().startswith("asked ") for line in lines)

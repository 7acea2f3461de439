"""Where a policy's largest service gap comes from: the worst minutes of VTC's measure, the
agent served most in each, and the calls that agent finished in it.

    python -m agentrm_bench.gap_minutes --scenario runs --seed 9 [--policies agentrm,vtc] [--top 5]

The gap itself is metrics.service_gap (the benchmark's definition, unchanged): in each minute,
among the agents of one class with a call asked for and not yet answered at the minute's
start, the most service (prompt + 2 x completion tokens) finished in the minute minus the
least. This tool reads the same per-minute table (metrics.service_table) to say who and what sets
its maximum; its top row equals service_gap (tests/unit/test_bench_gap_minutes.py checks it).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

import numpy as np

from .harness import run_policy
from .metrics import SERVICE_GAP_WINDOW_S, _cost, service_table
from .scenarios import SCENARIOS
from .sim import Recorder
from .workload import CLASSES, WorkloadParams, generate


@dataclass
class GapMinute:
    priority_class: str
    minute: int
    gap: float
    agent_id: str              # the backlogged agent served most in the minute
    most: float
    least: float
    backlogged: int
    calls: list                # that agent's call records finished in the minute, in order


def gap_minutes(recorder: Recorder, end: float, priority_class: str, agents: list[str]) -> list[GapMinute]:
    """Every minute with at least two backlogged agents of the class, largest gap first."""
    served, backlogged = service_table(recorder, end, priority_class, agents)
    windows = served.shape[0]
    finished: dict[tuple[int, str], list] = {}
    members = set(agents)
    for r in recorder.calls:
        if (r.priority_class == priority_class and r.agent_id in members and r.completed_at is not None
                and r.completed_at < windows * SERVICE_GAP_WINDOW_S):
            finished.setdefault((int(r.completed_at // SERVICE_GAP_WINDOW_S), r.agent_id), []).append(r)
    out = []
    for w in range(windows):
        ids = np.flatnonzero(backlogged[w])
        if len(ids) < 2:
            continue
        row = served[w, ids]
        top = agents[int(ids[int(np.argmax(row))])]
        out.append(GapMinute(priority_class, w, float(row.max() - row.min()), top, float(row.max()),
                             float(row.min()), len(ids),
                             sorted(finished.get((w, top), []), key=lambda r: r.completed_at)))
    out.sort(key=lambda g: (-g.gap, g.minute))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrm_bench.gap_minutes", description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="runs", choices=sorted(SCENARIOS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policies", default="agentrm,vtc")
    ap.add_argument("--top", type=int, default=3)
    args = ap.parse_args(argv)
    sc = SCENARIOS[args.scenario]
    trace = generate(replace(WorkloadParams(**sc.params), seed=args.seed))
    by_class = {c: [a.agent_id for a in trace.agents if a.priority_class == c] for c in CLASSES}
    for name in (p.strip() for p in args.policies.split(",") if p.strip()):
        run = run_policy(name, trace, sc.lanes, sc.rpm, sc.tpm, outages=sc.outages, saturation=sc.saturation,
                         replicas=sc.replicas,
                         provider_concurrency=sc.lanes if sc.provider_concurrency_is_lanes else None)
        end = run.recorder.duration_s
        for cls, agents in by_class.items():
            if not agents:
                continue
            for g in gap_minutes(run.recorder, end, cls, agents)[:args.top]:
                print(f"{name} {cls} minute {g.minute}: gap {g.gap / 1000:.1f}k = {g.agent_id} "
                      f"{g.most / 1000:.1f}k - {g.least / 1000:.1f}k, {g.backlogged} backlogged")
                for r in g.calls:
                    c = r.call
                    sent = "-" if r.answered_sent_at is None else f"{r.answered_sent_at:.1f}"
                    print(f"    asked {r.requested_at:.1f} sent {sent} done {r.completed_at:.1f} "
                          f"prompt {c.prompt_tokens} output {c.output_tokens} cost {_cost(c)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`agentrm bench scheduler`: the four policies on the same seeded traces.

    agentrm bench scheduler [--agents 200] [--minutes 10] [--lanes 64] [--rpm 1000]
        [--tpm 3000000] [--hang-rate 0.01] [--seed 1] [--seeds 5] [--out DIR] [--json]

With --seeds N the seeds are seed, seed+1, ... seed+N-1; the JSON and the table give the mean
over seeds, and the report shows min and max beside it. --json prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from .metrics import series, summarize
from .policies import POLICY_NAMES, Context, make_policy
from .sim import Provider, ProviderLink, Recorder, Simulator
from .workload import CLASSES, Trace, WorkloadParams, generate

# The provider and pool of the default workload: a busy fleet on one model budget. The
# lanes and limits are the same for every policy.
DEFAULT_LANES = 64
DEFAULT_RPM = 1_000
DEFAULT_TPM = 3_000_000

# PoolSettings the benchmark passes to the core; everything else is the core's default.
# lease_seconds 10 (core default 30): the simulated client heartbeats every lease/3 from the
# stream it reads, so a healthy call never misses a lease, and a hung call frees its lane
# after 10 s instead of 30 s: lane waste from hangs is the lease times the hang count.
AGENTRM_DEFAULTS: dict = {"lease_seconds": 10.0}

METRIC_KEYS = ("p50_latency_s", "p95_latency_s", "p99_latency_s", "lane_waste", "throughput_per_min",
               "zombies", "rate_limited", "max_wait_s", "jain_fairness")


def simulate(policy_name: str, trace: Trace, lanes: int, rpm: int, tpm: int,
             agentrm_overrides: dict | None = None, options: dict | None = None) -> tuple[dict, dict]:
    """Run one policy over one trace; returns (metrics, series)."""
    sim = Simulator()
    provider = Provider(rpm, tpm)
    recorder = Recorder(duration_s=trace.duration_s)
    ctx = Context(sim=sim, provider=provider, recorder=recorder, link=ProviderLink(sim, provider, recorder),
                  trace=trace, lanes=lanes, seed=trace.params.seed, options=dict(options or {}))
    policy = make_policy(policy_name, ctx, agentrm_overrides)
    policy.start()
    sim.run(trace.duration_s)
    policy.finish()
    by_class = {c: [a.agent_id for a in trace.agents if a.priority_class == c] for c in CLASSES}
    return summarize(recorder, by_class), series(recorder)


def _aggregate(values: list) -> dict:
    numbers = [v for v in values if v is not None]
    if not numbers:
        return {"mean": None, "min": None, "max": None}
    return {"mean": sum(numbers) / len(numbers), "min": min(numbers), "max": max(numbers)}


def _mean_dict(runs: list[dict]) -> dict:
    """Mean over seeds of every numeric metric, recursing into per_class."""
    out: dict = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = _mean_dict([r[key] for r in runs])
        elif isinstance(value, (int, float)) or value is None:
            agg = _aggregate([r.get(key) for r in runs])
            out[key] = agg["mean"]
    return out


def run(out_dir: str | Path | None = None, seeds: int = 5, policies: tuple[str, ...] = POLICY_NAMES,
        lanes: int = DEFAULT_LANES, rpm: int = DEFAULT_RPM, tpm: int = DEFAULT_TPM,
        agentrm_overrides: dict | None = None, options: dict | None = None, **params) -> dict:
    """Run every policy over `seeds` traces. `params` are WorkloadParams fields (agents,
    minutes, seed, hang_rate, ...). Writes scheduler.md and the PNGs when out_dir is given."""
    base = WorkloadParams(**params)
    overrides = dict(AGENTRM_DEFAULTS if agentrm_overrides is None else agentrm_overrides)
    per_seed: dict[str, list[dict]] = {p: [] for p in policies}
    plot_series: dict[str, dict] = {}
    started = time.perf_counter()
    for i in range(seeds):
        trace = generate(replace(base, seed=base.seed + i))
        for name in policies:
            metrics, s = simulate(name, trace, lanes, rpm, tpm, overrides, options)
            per_seed[name].append(metrics)
            if i == 0:
                plot_series[name] = s
    result = {
        "workload": {**base.to_dict(), "seeds": [base.seed + i for i in range(seeds)], "lanes": lanes,
                     "rpm": rpm, "tpm": tpm, "agentrm_settings": overrides,
                     "calls_in_trace_seed0": generate(base).call_count()},
        "policies": {name: _mean_dict(runs) for name, runs in per_seed.items()},
        "spread": {name: {k: _aggregate([r[k] for r in runs]) for k in METRIC_KEYS}
                   for name, runs in per_seed.items()},
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    if out_dir is not None:
        from .report import write_scheduler_report
        write_scheduler_report(Path(out_dir), result, plot_series)
    return result


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentrm bench scheduler", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    d = WorkloadParams()
    p.add_argument("--agents", type=int, default=d.agents)
    p.add_argument("--minutes", type=float, default=d.minutes)
    p.add_argument("--lanes", type=int, default=DEFAULT_LANES)
    p.add_argument("--rpm", type=int, default=DEFAULT_RPM)
    p.add_argument("--tpm", type=int, default=DEFAULT_TPM)
    p.add_argument("--hang-rate", type=float, default=d.hang_rate)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--seeds", type=int, default=5, help="number of seeds (default 5)")
    p.add_argument("--policies", default=",".join(POLICY_NAMES))
    p.add_argument("--lease-seconds", type=float, default=None, help="agentrm lease (overrides the default)")
    p.add_argument("--out", default=None, help="write scheduler.md and PNG plots here")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    overrides = dict(AGENTRM_DEFAULTS)
    if args.lease_seconds is not None:
        overrides["lease_seconds"] = args.lease_seconds
    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown:
        print(f"unknown policies: {', '.join(unknown)}", file=sys.stderr)
        return 2
    result = run(args.out, seeds=args.seeds, policies=policies, lanes=args.lanes, rpm=args.rpm,
                 tpm=args.tpm, agentrm_overrides=overrides, agents=args.agents, minutes=args.minutes,
                 seed=args.seed, hang_rate=args.hang_rate)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        from .report import markdown_table
        print(markdown_table(result))
        if args.out:
            print(f"\nreport written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

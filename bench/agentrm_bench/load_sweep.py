"""The load sweep: every lane-bound scenario at 50%, 80%, 100%, 120% and 150% of its lanes'
zero-wait capacity (`agentrm bench scheduler --scenario NAME --load X --seed N`), every policy,
per seed.

    python -m agentrm_bench.load_sweep [--scenario NAME]... [--load X]... [--seed N]...
        [--policies a,b] [--out DIR] [--json]

Writes load_sweep[_NAME].md and .json: per scenario, load and policy, each seed's goodput,
fraction of its physical limit, interactive P95 wait, run completion and P95 latency, and each
seed's per-class values (P95 and longest wait, run completion, Jain, Jain on demand) that the
targets read (targets.py).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .scheduler_bench import run

LANE_BOUND = ("mixed-lanes", "runs")
LOADS = (0.5, 0.8, 1.0, 1.2, 1.5)
KEYS = (("throughput_per_min", "calls/min", 1), ("fraction_of_limit", "of limit", 2),
        ("p95_wait_s:INTERACTIVE", "int. P95 wait s", 1), ("run_completion_mean_s", "run mean s", 1),
        ("p95_latency_s", "P95 s", 1))


def _seed_values(policy: dict, key: str) -> list[float | None]:
    name, _, cls = key.partition(":")
    values = policy["per_seed"][name]
    return [v.get(cls) if isinstance(v, dict) else v for v in values] if cls else values


def sweep(scenarios: tuple[str, ...], loads: tuple[float, ...], seeds: tuple[int, ...],
          policies: tuple[str, ...] | None = None) -> dict:
    out: dict = {"loads": list(loads), "seeds": list(seeds), "policies": list(policies or ()), "scenarios": {}}
    for name in scenarios:
        out["scenarios"][name] = {}
        for load in loads:
            result = run(name, seeds, policies=policies, load=load)
            out["scenarios"][name][f"{load:g}"] = {
                "agents": result["load"]["agents"], "measured_load": result["load"]["measured"],
                "policies": {p: {**{k: _seed_values(m, k) for k, _, _ in KEYS},
                                 "per_class": m["per_seed"]["per_class"]} for p, m in result["policies"].items()}}
    return out


def _cell(values: list, digits: int) -> str:
    return "/".join("-" if v is None else f"{v:.{digits}f}" for v in values)


def to_markdown(result: dict) -> str:
    lines = ["# Load sweep", "",
             f"Each lane-bound scenario at {', '.join(f'{x:g}' for x in result['loads'])} x its lanes' zero-wait "
             f"capacity; seeds {', '.join(map(str, result['seeds']))}, one value per seed (a/b/c).", ""]
    for name, by_load in result["scenarios"].items():
        for load, row in by_load.items():
            measured = ", ".join(f"{m:.2f}" for m in row["measured_load"])
            lines += [f"## `{name}` at {load} x capacity ({row['agents']} agents; measured {measured})", "",
                      "| policy | " + " | ".join(h for _, h, _ in KEYS) + " |", "|---" * (len(KEYS) + 1) + "|"]
            for policy, values in row["policies"].items():
                lines.append(f"| {policy} | " + " | ".join(_cell(values[k], d) for k, _, d in KEYS) + " |")
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrm_bench.load_sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", action="append", default=[])
    ap.add_argument("--load", type=float, action="append", default=[])
    ap.add_argument("--seed", type=int, action="append", default=[])
    ap.add_argument("--policies", default=None, help="comma-separated (default: every policy)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--name", default=None, help="a suffix for the output files (load_sweep_NAME.md/.json)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip()) if args.policies else None
    result = sweep(tuple(args.scenario) or LANE_BOUND, tuple(args.load) or LOADS, tuple(args.seed) or (1, 2, 3),
                   policies)
    text = to_markdown(result)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = "load_sweep" + (f"_{args.name}" if args.name else "")
        (args.out / f"{stem}.md").write_text(text + "\n")
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, sort_keys=True) if args.json else text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

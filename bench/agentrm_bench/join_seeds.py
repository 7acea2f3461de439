"""Join `agentrm bench scheduler --json` results of one scenario run on disjoint seeds into one.

    python -m agentrm_bench.join_seeds OUT.json PART.json... [--report DIR]

The machine shares two cores, so a scenario is often run one process a seed; the targets
(`agentrm_bench.targets`) judge every seed, so the parts are joined into the one result the
benchmark would have printed for all their seeds. Every part must be the same scenario, load,
workload (but for its seeds), AgentRM settings and policies: a part that differs is refused,
since a join must not mix two experiments. A workload parameter one part lacks was added to
the benchmark after that part ran; the parts are compared on the parameters they all have, and
`merged_from` names the ones a part lacks (whether they change its seeds is for a rerun of one
of them to show, not for the join). Per-seed lists are concatenated in seed order and
each reported mean is recomputed from them; a mean kept without its per-seed values (the
detail keys, the per-class means) is the parts' means weighted by their seed counts, which is
the mean over all seeds wherever a value is known on every seed. `merged_from` says how the
parts were run. `--report DIR` also writes `scheduler_<scenario>.md` and its goodput plot.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .scheduler_bench import _mean

_PER_SEED_LISTS = ("per_seed",)


def _seeds(result: dict) -> list[int]:
    return list(result["workload"]["seeds"])


def _named(seeds: list[int]) -> str:
    return ("seeds " if len(seeds) > 1 else "seed ") + ",".join(map(str, seeds))


def _weighted(values: list, weights: list[int]):
    """Mean of the parts' means, each counted once per seed it covers; dicts key by key."""
    pairs = [(v, w) for v, w in zip(values, weights) if v is not None]
    if not pairs:
        return None
    if isinstance(pairs[0][0], dict):
        keys = sorted({k for v, _ in pairs for k in v})
        return {k: _weighted([v.get(k) for v, _ in pairs], [w for _, w in pairs]) for k in keys}
    return sum(v * w for v, w in pairs) / sum(w for _, w in pairs)


def _same(parts: list[dict], what: str, pick) -> None:
    first = pick(parts[0])
    for part in parts[1:]:
        if pick(part) != first:
            raise ValueError(f"the parts differ in {what}: refusing to join two experiments")


def _command(scenario: str, load: dict | None, seeds: list[int]) -> str:
    load_flag = "" if load is None else f" --load {load['asked']}"
    seed_flags = " ".join(f"--seed {s}" for s in seeds)
    return f"agentrm bench scheduler --scenario {scenario}{load_flag} {seed_flags} --json"


def merged_from(parts: list[dict]) -> str:
    """How the parts were run, in the words the earlier joins use."""
    scenario, load = parts[0]["scenario"], parts[0]["load"]
    if all(len(_seeds(p)) == 1 for p in parts):
        load_flag = "" if load is None else f" --load {load['asked']}"
        return (f"one run per seed (agentrm bench scheduler --scenario {scenario}{load_flag} --seed N --json), "
                f"joined{_predates(parts)}")
    runs = "; ".join(f"{_named(_seeds(p))}: {_command(scenario, load, _seeds(p))}" for p in parts)
    return f"one run per part ({runs}), joined{_predates(parts)}"


def _predates(parts: list[dict]) -> str:
    """The workload parameters each part lacks, named so that no reader takes them as run."""
    every = set().union(*(p["workload"] for p in parts))
    notes = [f"{_named(_seeds(p))} ran before the parameters "
             + ", ".join(sorted(every - set(p["workload"]))) for p in parts if every - set(p["workload"])]
    return "; " + "; ".join(notes) if notes else ""


def join(parts: list[dict]) -> dict:
    if not parts:
        raise ValueError("nothing to join")
    parts = sorted(parts, key=lambda p: _seeds(p)[0])
    seeds = [s for p in parts for s in _seeds(p)]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"the parts share seeds: {seeds}")
    _same(parts, "scenario", lambda p: p["scenario"])
    common = set.intersection(*(set(p["workload"]) for p in parts)) - {"seeds"}
    _same(parts, "workload", lambda p: {k: v for k, v in p["workload"].items() if k in common})
    _same(parts, "load asked", lambda p: p["load"] and {k: v for k, v in p["load"].items() if k != "measured"})
    _same(parts, "policies", lambda p: sorted(p["policies"]))
    weights = [len(_seeds(p)) for p in parts]
    first = parts[0]
    limits = [lim for p in parts for lim in p["physical_limit"]["per_seed"]]
    policies = {}
    for name in first["policies"]:
        runs = [p["policies"][name] for p in parts]
        per_seed = {k: [v for r in runs for v in r["per_seed"][k]] for k in runs[0]["per_seed"]}
        out = {k: _weighted([r.get(k) for r in runs], weights) for k in runs[0] if k not in _PER_SEED_LISTS}
        # A key kept per seed is the plain mean over its seeds, exactly as one run computes it.
        out.update({k: _mean(v) for k, v in per_seed.items() if k in out and k != "per_class"})
        out["per_seed"] = per_seed
        policies[name] = out
    result = {
        **{k: v for k, v in first.items() if k not in ("policies", "series")},
        "workload": {**{k: v for p in parts for k, v in p["workload"].items()}, "seeds": seeds},
        "physical_limit": {"binding": first["physical_limit"]["binding"], "per_seed": limits},
        "physical_limit_calls_per_min": _mean([lim["calls_per_min"] for lim in limits]),
        "policies": policies,
        "elapsed_s": round(sum(p.get("elapsed_s") or 0.0 for p in parts), 1),
        "merged_from": merged_from(parts),
    }
    if first["load"] is not None:
        result["load"] = {**first["load"], "measured": [m for p in parts for m in p["load"]["measured"]]}
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrm_bench.join_seeds", description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("parts", type=Path, nargs="+")
    ap.add_argument("--report", type=Path, default=None, help="also write scheduler_<scenario>.md here")
    args = ap.parse_args(argv)
    result = join([json.loads(p.read_text()) for p in args.parts])
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    if args.report is not None:
        from .report import write_scheduler_report
        write_scheduler_report(args.report, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

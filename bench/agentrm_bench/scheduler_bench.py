"""`agentrm bench scheduler`: every policy on the same seeded traces of a named scenario.

    agentrm bench scheduler --scenario NAME [--seed N]... [--seeds K] [--set NAME=VALUE]...
        [--policies a,b,...] [--lanes N] [--rpm N] [--tpm N] [--load X] [--out DIR] [--json]

Scenarios are presets (scenarios.py, each choice with its source); `--set` changes any workload
parameter, `--lanes/--rpm/--tpm` the pool. Seeds: every `--seed` given, else `--seeds K`
seeds from 1 (default 5). Each metric is the mean over the seeds, with `per_seed` beside it.
`--json` prints one object: {scenario, workload, physical_limit_calls_per_min, policies}.

`--load X` (the load sweep) scales the fleet so that its zero-wait demand for lanes is X times
the lanes (`workload.zero_wait_load`: calls in flight on average if no call ever waited, over
the lanes): the agent count is the scenario's times X / the load it has, measured on the
first seed's trace and kept for every seed, so the classes' shares and every other parameter
stay the scenario's. The result says the load asked for, the agent count and each seed's
measured load. A trace-driven scenario (`mooncake-trace`) keeps its recorded requests and plays
their arrivals X times as fast as its 1x instead (mooncake_trace.py).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from .harness import run_policy
from .metrics import physical_limit, series, summarize
from .policies import POLICY_NAMES, known
from .policies.agentrm import MEASURED_CLIENT_DELAY_S, MEASURED_REPORT_DELAY_S
from .scenarios import AGENTRM_DEFAULTS, SCENARIOS, Scenario
from .workload import CLASSES, Trace, WorkloadParams, generate, zero_wait_load

# The `paper` scenario's pool; the live check scales its own pool from it.
DEFAULT_LANES = 64
DEFAULT_RPM = 10_000
DEFAULT_TPM = 12_000_000

# The keys every policy reports (issue 10), each a mean over seeds with per_seed beside it.
REPORTED_KEYS = ("throughput_per_min", "goodput_tokens_per_min", "fraction_of_limit", "p95_latency_s",
                 "p99_latency_s", "p95_wait_s", "p99_wait_s", "run_completion_mean_s", "run_completion_p95_s",
                 "run_completion_p99_s", "rate_limited", "failed_calls", "hung_lane_seconds", "live_calls_cut",
                 "jain", "jain_demand", "max_service_gap", "max_service_gap_5min", "service_gap_over_2u",
                 "lane_waste", "zombies", "stuck_agents", "quarantined_agents",
                 "over_admission")
DETAIL_KEYS = ("lane_utilization", "p50_latency_s", "rate_limited_count", "hung_attempts_cut", "calls_requested",
               "calls_completed", "nominal_fraction_of_limit", "runs_started", "runs_completed", "provider_attempts",
               "max_wait_s", "prefix_cached_tokens", "prefix_prompt_tokens")


# What a per-seed, per-class target reads (mixed-lanes judges interactive waits and batch runs).
PER_CLASS_SEED_KEYS = ("p95_wait_s", "run_completion_mean_s", "jain_fairness", "jain_demand", "throughput_per_min",
                       "max_wait_s")


def simulate(policy_name: str, trace: Trace, lanes: int, rpm: int, tpm: int,
             agentrm_overrides: dict | None = None, options: dict | None = None,
             scenario: Scenario | None = None) -> tuple[dict, dict]:
    """Run one policy over one trace; returns (metrics, series)."""
    sc = scenario
    run = run_policy(policy_name, trace, lanes, rpm, tpm, agentrm_overrides, options,
                     outages=sc.outages if sc else (), saturation=sc.saturation if sc else None,
                     replicas=sc.replicas if sc else 1,
                     provider_concurrency=lanes if sc and sc.provider_concurrency_is_lanes else None)
    by_class = {c: [a.agent_id for a in trace.agents if a.priority_class == c] for c in CLASSES}
    limit = physical_limit(trace, lanes, rpm, tpm, sc.saturation if sc else None,
                           lanes if sc and sc.provider_concurrency_is_lanes else None)
    return summarize(run.recorder, by_class, limit, rpm, tpm, lanes, trace), series(run.recorder)


def _mean(values: list):
    """Mean over seeds; dicts (per class) key by key; None where nothing is known."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    if isinstance(present[0], dict):
        keys = sorted({k for v in present for k in v})
        return {k: _mean([v.get(k) for v in present]) for k in keys}
    return sum(present) / len(present)


def aggregate(runs: list[dict]) -> dict:
    out = {k: _mean([r.get(k) for r in runs]) for k in REPORTED_KEYS + DETAIL_KEYS}
    out["per_class"] = {c: {k: _mean([r["per_class"].get(c, {}).get(k) for r in runs])
                            for k in ("p50_wait_s", "p95_wait_s", "p99_wait_s", "p50_latency_s", "p95_latency_s",
                                      "p99_latency_s", "run_completion_mean_s", "run_completion_p99_s",
                                      "throughput_per_min", "jain_fairness", "jain_demand", "max_service_gap",
                                      "max_service_gap_5min")}
                        for c in CLASSES if any(c in r["per_class"] for r in runs)}
    # Per seed: every reported key, and the counts a per-seed ratio needs (calls completed).
    out["per_seed"] = {k: [r.get(k) for r in runs] for k in REPORTED_KEYS + ("calls_completed",)}
    out["per_seed"]["per_class"] = [{c: {k: v.get(k) for k in PER_CLASS_SEED_KEYS} for c, v in r["per_class"].items()}
                                    for r in runs]
    return out


def policies_for(scenario: Scenario, requested: tuple[str, ...] | None) -> tuple[str, ...]:
    if requested:
        return requested
    names = scenario.policies or POLICY_NAMES
    return tuple(names) + tuple(f"fixed-lanes@{n}" for n in scenario.sweep_lanes)


def agents_for_load(base: WorkloadParams, lanes: int, load: float) -> int:
    """The agent count whose zero-wait lane demand is `load` x the lanes (on base's seed)."""
    measured = zero_wait_load(generate(base), lanes)
    if measured <= 0:
        raise ValueError("the scenario's trace asks for no lane time: no load to scale")
    return max(1, round(base.agents * load / measured))


def run(scenario: str | Scenario = "paper", seeds: tuple[int, ...] = (1, 2, 3, 4, 5),
        policies: tuple[str, ...] | None = None, params: dict | None = None, lanes: int | None = None,
        rpm: int | None = None, tpm: int | None = None, agentrm_overrides: dict | None = None,
        keep_series: bool = False, progress=None, load: float | None = None) -> dict:
    """Every policy of a scenario over each seed's trace; the benchmark's one JSON object."""
    sc = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
    sc = replace(sc, lanes=lanes or sc.lanes, rpm=rpm or sc.rpm, tpm=tpm or sc.tpm)
    base = WorkloadParams(**{**sc.params, **(params or {})})
    if base.trace_file is not None:
        # A recorded trace keeps its requests: the load speeds its arrivals up instead.
        base = replace(base, trace_lanes=sc.lanes, trace_load=base.trace_load if load is None else load)
    elif load is not None:
        base = replace(base, agents=agents_for_load(replace(base, seed=seeds[0]), sc.lanes, load))
    overrides = dict(AGENTRM_DEFAULTS if agentrm_overrides is None else agentrm_overrides)
    names = policies_for(sc, policies)
    per_seed: dict[str, list[dict]] = {p: [] for p in names}
    plot_series: dict[str, dict] = {}
    limits = []
    started = time.perf_counter()
    for i, seed in enumerate(seeds):
        trace = generate(replace(base, seed=seed))
        limits.append(physical_limit(trace, sc.lanes, sc.rpm, sc.tpm, sc.saturation,
                                     sc.lanes if sc.provider_concurrency_is_lanes else None))
        for name in names:
            metrics, s = simulate(name, trace, sc.lanes, sc.rpm, sc.tpm, overrides, None, sc)
            per_seed[name].append(metrics)
            if i == 0 and keep_series:
                plot_series[name] = s
            if progress is not None:
                progress(seed, name)
    result = {
        "scenario": sc.name,
        "about": sc.about,
        "workload": {**base.to_dict(), **sc.describe(), "seeds": list(seeds), "agentrm_settings": overrides,
                     "agentrm_client": {"client_delay_s": MEASURED_CLIENT_DELAY_S,
                                        "report_delay_s": MEASURED_REPORT_DELAY_S}},
        "load": None if load is None else {"asked": load,
                                           "agents": len(trace.agents) if base.trace_file else base.agents,
                                           "measured": [lim["zero_wait_lane_load"] for lim in limits]},
        "physical_limit_calls_per_min": _mean([lim["calls_per_min"] for lim in limits]),
        "physical_limit": {"binding": limits[0]["binding"], "per_seed": limits},
        "policies": {name: aggregate(runs) for name, runs in per_seed.items()},
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    if keep_series:
        result["series"] = plot_series
    return result


def _param(text: str) -> tuple[str, object]:
    """--set name=value for any WorkloadParams field, typed like its default."""
    name, sep, raw = text.partition("=")
    defaults = WorkloadParams().to_dict()
    if not sep or name not in defaults:
        raise argparse.ArgumentTypeError(f"--set takes name=value with name one of: {', '.join(sorted(defaults))}")
    default = defaults[name]
    kind = float if default is None else type(default)       # None: an optional number
    try:
        if isinstance(default, tuple):
            value: object = tuple(type(default[0])(x) for x in raw.split(","))
        else:
            value = kind(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--set {name}: cannot read {raw!r} as {kind.__name__}") from None
    return name, value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentrm bench scheduler", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", default="paper", choices=sorted(SCENARIOS), help="a preset (default: paper)")
    p.add_argument("--seed", type=int, action="append", default=[], help="a seed (repeatable)")
    p.add_argument("--seeds", type=int, default=5, help="without --seed: this many seeds from 1 (default 5)")
    p.add_argument("--policies", default=None, help="comma-separated, e.g. agentrm,gateway-fifo@30s "
                                                   "(default: every policy of the scenario)")
    p.add_argument("--lanes", type=int, default=None)
    p.add_argument("--rpm", type=int, default=None)
    p.add_argument("--tpm", type=int, default=None)
    p.add_argument("--set", type=_param, action="append", default=[], metavar="NAME=VALUE",
                   help="any workload parameter, e.g. agents=50 or tool_median_s=2")
    p.add_argument("--load", type=float, default=None,
                   help="scale the fleet to this multiple of the lanes' zero-wait capacity (e.g. 0.5, 1.2)")
    p.add_argument("--out", default=None, help="write <scenario>.md, .json and PNG plots here")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    policies = None
    if args.policies:
        policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
        unknown = [p for p in policies if not known(p)]
        if unknown:
            print(f"agentrm bench scheduler: unknown policies: {', '.join(unknown)} "
                  f"(known: {', '.join(POLICY_NAMES)}, fixed-lanes@N, gateway-fifo@<seconds>s)", file=sys.stderr)
            return 2
    if args.load is not None and not 0 < args.load < 100:
        print("agentrm bench scheduler: --load must be a positive multiple of the lanes (e.g. 0.5, 1.5)",
              file=sys.stderr)
        return 2
    for name, value in (("--lanes", args.lanes), ("--rpm", args.rpm), ("--tpm", args.tpm), ("--seeds", args.seeds)):
        if value is not None and value < 1:
            print(f"agentrm bench scheduler: {name} must be at least 1", file=sys.stderr)
            return 2
    try:
        WorkloadParams(**{**SCENARIOS[args.scenario].params, **dict(args.set)}).validate()
    except (TypeError, ValueError) as exc:
        print(f"agentrm bench scheduler: {exc}", file=sys.stderr)
        return 2
    seeds = tuple(args.seed) if args.seed else tuple(range(1, args.seeds + 1))
    result = run(args.scenario, seeds, policies, dict(args.set), args.lanes, args.rpm, args.tpm,
                 keep_series=args.out is not None, load=args.load)
    if args.out:
        from .report import write_scheduler_report
        write_scheduler_report(Path(args.out), result)
    series_ = result.pop("series", None)  # noqa: F841  (plots only)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        from .report import scenario_table
        print(scenario_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

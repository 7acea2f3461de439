"""The scheduler's targets (benchmark v2), checked on the results of `agentrm bench scheduler`.

    python -m agentrm_bench.targets [--results bench/results]

Reads each scenario's `scheduler_<name>.json` and prints every target with AgentRM's value,
the baseline's value from the SAME run, their ratio, and whether the target holds. Ratios are
per seed where the result keeps per-seed values, else of the means over the seeds (the class
metrics). Nothing here is tuned: the targets are the ones the benchmark was frozen with.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GATEWAYS = ("gateway-fifo@10s", "gateway-fifo@30s", "gateway-fifo@120s")


@dataclass
class Check:
    scenario: str
    what: str
    holds: bool
    detail: str
    bound: str = ""          # what a bound (bounds.py) says of the target, if one applies


# The bound each target is set against (bounds.py; figures in docs/benchmarks/scheduler.md).
BOUNDS = {
    ("mixed-lanes", "interactive P95 wait"): "Little: mean wait >= N S / (C (1 - phi)) - Z - S "
                                             "(bounds_mixed-lanes.md)",
    ("provider-bound", "P95 latency"): "floors: own service, zero wait; yardsticks edf1, agent-edf1 "
                                       "(bounds_provider-bound.md)",
    ("hangs", "hung lane-seconds"): "fixed-timeout frontier (bounds_hangs.md)",
    ("hangs", "live calls cut"): "fixed-timeout frontier (bounds_hangs.md)",
    ("runs", "run completion mean"): "floor: service + tools of each run; yardstick srpt-run (bounds_runs.md)",
}


def _bound_for(c: Check) -> str:
    return next((text for (scenario, what), text in BOUNDS.items() if c.scenario == scenario
                 and c.what.startswith(what)), "")


def _seeds(policy: dict, key: str) -> list[float]:
    return [float(v) for v in policy["per_seed"][key]]


def _per_class(policy: dict, cls: str, key: str) -> float:
    return float(policy["per_class"][cls][key])


def _ratio_per_seed(a: list[float], b: list[float]) -> list[float]:
    return [x / y if y else float("inf") for x, y in zip(a, b)]


def _fmt(values: list[float]) -> str:
    return "/".join(f"{v:.2f}" for v in values)


def _best_gateway(policies: dict, pick: Callable[[dict], float]) -> tuple[str, dict]:
    name = min((n for n in GATEWAYS if n in policies), key=lambda n: pick(policies[n]))
    return name, policies[name]


def _class_seeds(policy: dict, cls: str, key: str) -> list[float] | None:
    """Per seed, a class's value (None for a result without per-seed class values)."""
    per_seed = policy.get("per_seed", {})
    rows = per_seed.get("per_class")
    if rows:
        return [float(r[cls][key]) for r in rows]
    by_class = per_seed.get(key)   # a reported per-class key (p95_wait_s) is kept per seed anyway
    if by_class and all(isinstance(v, dict) for v in by_class):
        return [float(v[cls]) for v in by_class]
    return None


def check_mixed_lanes(d: dict) -> list[Check]:
    p, out = d["policies"], []
    a = p["agentrm"]
    gw_name, gw = _best_gateway(p, lambda x: _per_class(x, "INTERACTIVE", "p95_wait_s"))
    mine, theirs = _class_seeds(a, "INTERACTIVE", "p95_wait_s"), _class_seeds(gw, "INTERACTIVE", "p95_wait_s")
    if mine is not None and theirs is not None:
        waits = _ratio_per_seed(mine, theirs)
        out.append(Check("mixed-lanes", "interactive P95 wait <= 0.10x best gateway-fifo", max(waits) <= 0.10,
                         f"{_fmt(waits)} ({gw_name})"))
    else:
        r = _per_class(a, "INTERACTIVE", "p95_wait_s") / _per_class(gw, "INTERACTIVE", "p95_wait_s")
        out.append(Check("mixed-lanes", "interactive P95 wait <= 0.10x best gateway-fifo", r <= 0.10,
                         f"{r:.2f}x ({gw_name}, means over seeds)"))
    g30 = p["gateway-fifo@30s"]
    mine, theirs = _class_seeds(a, "BATCH", "run_completion_mean_s"), _class_seeds(g30, "BATCH",
                                                                                   "run_completion_mean_s")
    if mine is not None and theirs is not None:
        runs = _ratio_per_seed(mine, theirs)
        out.append(Check("mixed-lanes", "batch run completion mean <= 1.1x gateway-fifo@30s", max(runs) <= 1.1,
                         _fmt(runs)))
    else:
        r = _per_class(a, "BATCH", "run_completion_mean_s") / _per_class(g30, "BATCH", "run_completion_mean_s")
        out.append(Check("mixed-lanes", "batch run completion mean <= 1.1x gateway-fifo@30s", r <= 1.1,
                         f"{r:.2f}x (means over seeds)"))
    good = _ratio_per_seed(_seeds(a, "throughput_per_min"), _seeds(g30, "throughput_per_min"))
    lim = _seeds(a, "fraction_of_limit")
    out.append(Check("mixed-lanes", "goodput >= 1.0x gateway-fifo and >= 0.95 of the limit",
                     min(good) >= 1.0 and min(lim) >= 0.95, f"{_fmt(good)}; of limit {_fmt(lim)}"))
    return out


def check_provider_bound(d: dict) -> list[Check]:
    p, a = d["policies"], d["policies"]["agentrm"]
    limited = _seeds(a, "rate_limited")
    failed = _seeds(a, "failed_calls")
    lim = _seeds(a, "fraction_of_limit")
    out = [Check("provider-bound", "429s <= 1% of successful calls", max(limited) <= 0.01, _fmt(limited)),
           Check("provider-bound", "0 failed calls", max(failed) == 0, _fmt(failed)),
           Check("provider-bound", "goodput >= 0.95 of the provider's limit", min(lim) >= 0.95, _fmt(lim))]
    for base, bound in (("no-gateway", 0.5), ("litellm-proxy", 0.8)):
        r = _ratio_per_seed(_seeds(a, "p95_latency_s"), _seeds(p[base], "p95_latency_s"))
        out.append(Check("provider-bound", f"P95 latency <= {bound:.1f}x {base}", max(r) <= bound, _fmt(r)))
    return out


def check_hangs(d: dict) -> list[Check]:
    p, a = d["policies"], d["policies"]["agentrm"]
    hung = _ratio_per_seed(_seeds(a, "hung_lane_seconds"), _seeds(p["gateway-fifo@30s"], "hung_lane_seconds"))
    cuts = _seeds(a, "live_calls_cut")
    # Each seed's cuts over that seed's own calls (a result without per-seed counts is refused
    # rather than divided by the mean over seeds).
    g10 = _seeds(p["gateway-fifo@10s"], "live_calls_cut")
    out = [Check("hangs", "hung lane-seconds <= 0.25x gateway-fifo@30s", max(hung) <= 0.25, _fmt(hung))]
    if "calls_completed" not in a["per_seed"]:
        return out + [Check("hangs", "live calls cut <= 0.5% of calls", False,
                            f"cuts {'/'.join(str(int(c)) for c in cuts)}: no per-seed call counts in this result "
                            f"(a run before v3); rerun the scenario")]
    calls = _seeds(a, "calls_completed")
    share = [c / n if n else float("inf") for c, n in zip(cuts, calls)]
    return out + [Check("hangs", "live calls cut <= 0.5% of calls", max(share) <= 0.005,
                        f"{'/'.join(f'{100 * s:.1f}%' for s in share)} (gateway-fifo@10s cuts "
                        f"{'/'.join(str(int(c)) for c in g10)})")]


# Judged for AgentRM as agents now reach it (its gateway), and for its client library beside.
PERSIST_POLICIES = ("agentrm-gateway", "agentrm")


def check_hangs_persist(d: dict) -> list[Check]:
    """Persistent slowness: no agent quarantined, goodput at least 0.98x gateway-fifo@120s's
    (which never cuts a slow call) and hung lane-seconds at most 0.5x gateway-fifo@30s's."""
    p, out = d["policies"], []
    g120 = _seeds(p["gateway-fifo@120s"], "throughput_per_min")
    g30 = _seeds(p["gateway-fifo@30s"], "hung_lane_seconds")
    for name in (n for n in PERSIST_POLICIES if n in p):
        a = p[name]
        quarantined = _seeds(a, "quarantined_agents")
        stuck = _seeds(a, "stuck_agents")
        good = _ratio_per_seed(_seeds(a, "throughput_per_min"), g120)
        hung = _ratio_per_seed(_seeds(a, "hung_lane_seconds"), g30)
        out += [Check("hangs-persist", f"{name}: 0 agents quarantined", max(quarantined) == 0,
                      f"{_fmt(quarantined)} (stuck {_fmt(stuck)})"),
                Check("hangs-persist", f"{name}: goodput >= 0.98x gateway-fifo@120s", min(good) >= 0.98, _fmt(good)),
                Check("hangs-persist", f"{name}: hung lane-seconds <= 0.5x gateway-fifo@30s", max(hung) <= 0.5,
                      _fmt(hung))]
    return out


def check_runs(d: dict) -> list[Check]:
    p, a = d["policies"], d["policies"]["agentrm"]
    mean_a = _seeds(a, "run_completion_mean_s")
    vs_plas = _ratio_per_seed(mean_a, _seeds(p["plas"], "run_completion_mean_s"))
    vs_gw = _ratio_per_seed(mean_a, _seeds(p["gateway-fifo@30s"], "run_completion_mean_s"))
    p99 = _ratio_per_seed(_seeds(a, "run_completion_p99_s"), _seeds(p["gateway-fifo@30s"], "run_completion_p99_s"))
    return [Check("runs", "run completion mean <= plas", max(vs_plas) <= 1.0, _fmt(vs_plas)),
            Check("runs", "run completion mean <= 0.70x gateway-fifo@30s", max(vs_gw) <= 0.70, _fmt(vs_gw)),
            Check("runs", "run completion P99 <= 1.2x gateway-fifo@30s", max(p99) <= 1.2, _fmt(p99))]


def check_replicas(d: dict) -> list[Check]:
    over = _seeds(d["policies"]["agentrm"], "over_admission")
    return [Check("replicas", "0 over-admission", max(over) == 0, _fmt(over))]


def check_saturating(d: dict) -> list[Check]:
    p, a = d["policies"], d["policies"]["agentrm"]
    fixed = {n: v for n, v in p.items() if n.startswith("fixed-lanes@")}
    if not fixed:
        return [Check("saturating-provider", "against the best fixed-lanes setting", False,
                      "no fixed-lanes@N sweep in this result")]
    best_name = max(fixed, key=lambda n: fixed[n]["throughput_per_min"])
    best = fixed[best_name]
    good = _ratio_per_seed(_seeds(a, "throughput_per_min"), _seeds(best, "throughput_per_min"))
    p95 = _ratio_per_seed(_seeds(a, "p95_latency_s"), _seeds(best, "p95_latency_s"))
    return [Check("saturating-provider", f"goodput >= 0.95x the best fixed lanes ({best_name})",
                  min(good) >= 0.95, _fmt(good)),
            Check("saturating-provider", f"P95 within 1.10x of {best_name}'s", max(p95) <= 1.10, _fmt(p95))]


def check_fairness(name: str, d: dict) -> list[Check]:
    p, a = d["policies"], d["policies"]["agentrm"]
    jains = [j for seed in a["per_seed"]["jain"] for j in seed.values()]
    gap = _ratio_per_seed(_seeds(a, "max_service_gap"), _seeds(p["vtc"], "max_service_gap")) if "vtc" in p else []
    out = [Check(name, "Jain >= 0.95 within each class", min(jains) >= 0.95, f"min {min(jains):.3f}")]
    on_demand = [j for seed in a["per_seed"].get("jain_demand") or [] for j in (seed or {}).values() if j is not None]
    if on_demand:
        out.append(Check(name, "Jain on service / demand >= 0.95 within each class", min(on_demand) >= 0.95,
                         f"min {min(on_demand):.3f}"))
    if gap:
        out.append(Check(name, "largest service gap <= 2x vtc's", max(gap) <= 2.0, _fmt(gap)))
    five = a["per_seed"].get("max_service_gap_5min")
    if five and "vtc" in p and p["vtc"]["per_seed"].get("max_service_gap_5min"):
        r = _ratio_per_seed(_seeds(a, "max_service_gap_5min"), _seeds(p["vtc"], "max_service_gap_5min"))
        out.append(Check(name, "largest 5-minute service gap <= 2x vtc's", max(r) <= 2.0, _fmt(r)))
    return out


CHECKS = {"mixed-lanes": check_mixed_lanes, "provider-bound": check_provider_bound, "hangs": check_hangs,
          "hangs-persist": check_hangs_persist, "runs": check_runs, "replicas": check_replicas,
          "saturating-provider": check_saturating}


def check_all(results: Path) -> list[Check]:
    out: list[Check] = []
    for name, check in CHECKS.items():
        path = results / f"scheduler_{name}.json"
        if not path.exists():
            out.append(Check(name, "result present", False, f"{path.name} missing: run the scenario first"))
            continue
        data = json.loads(path.read_text())
        out += check(data) + check_fairness(name, data)
    for c in out:
        c.bound = c.bound or _bound_for(c)
    return out


def to_markdown(checks: list[Check]) -> str:
    lines = ["| scenario | target | holds | AgentRM / baseline (per seed) | bound |", "|---|---|---|---|---|"]
    lines += [f"| `{c.scenario}` | {c.what} | {'yes' if c.holds else '**no**'} | {c.detail} | {c.bound or '-'} |"
              for c in checks]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrm_bench.targets", description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    print(to_markdown(check_all(args.results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

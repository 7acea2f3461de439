"""The scheduler's targets (benchmark v3), judged per seed (1-5) on the results of `agentrm bench
scheduler`, the load sweep and the bounds.

    python -m agentrm_bench.targets [--results bench/results] [--json]

Reads `scheduler_<scenario>.json`, `scheduler_mooncake-trace_load<X>.json` (one per load
multiplier), `load_sweep_mixed-lanes.json` (else `load_sweep.json`) and
`bounds_provider-bound[-predictable].json`, and prints one row per target (and load point):
each seed's value, whether the target holds on every seed (or on the aggregate it names),
what it is measured against and the bound it is set against. A seed that was not run is a
dash and the target is not established ("no"): nothing passes by missing data. A target a
bound makes unreachable is reported with that bound and left as missed. Nothing here is
tuned: the targets are the ones benchmark v3 was frozen with.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .policies import AGENTRM_NAMES
from .policies.clairvoyant import BOUND_NAME, parse_order
from .scenarios import TRACE_LOADS

SEEDS = (1, 2, 3, 4, 5)
GATEWAYS = ("gateway-fifo@10s", "gateway-fifo@30s", "gateway-fifo@120s")
JUDGED = ("agentrm", "agentrm-gateway")          # AgentRM's client library and its gateway
HANGS = ("hangs", "hangs-persist", "hangs-persist-model", "reasoning-mix")
NO_QUARANTINE = ("hangs-persist", "hangs-persist-model", "reasoning-mix")
HISTORY_ONLY = ("mean-edf", "agent-edf", "late-mean-edf")
TRACE = "mooncake-trace"
INTERACTIVE, BATCH = "INTERACTIVE", "BATCH"
EPS = 1e-9

BOUNDS = {
    ("mixed-lanes", "interactive P95 wait"): "Little: mean wait >= N S / (C (1 - phi)) - Z - S (bounds_mixed-lanes.md)",
    ("provider-bound", "P95"): "floors: own service, zero wait; yardsticks edf1, mean-edf1 (bounds_provider-bound.md)",
    ("hangs", "hung lane-seconds"): "fixed-timeout frontier (bounds_hangs.md)",
    ("hangs", "live cuts"): "fixed-timeout frontier (bounds_hangs.md)",
    ("runs", "mean run completion"): "floor: service + tools of each run; yardstick srpt-run (bounds_runs.md)",
}


@dataclass
class Check:
    scenario: str
    what: str
    values: dict[int, float]             # seed -> the value judged (a ratio, a share, a count)
    passes: dict[int, bool]              # seed -> whether that seed meets the target
    holds: bool
    against: str = ""                    # the baseline or aggregate it is measured against
    bound: str = ""
    digits: int = 2
    notes: list[str] = field(default_factory=list)


# -- reading results ----------------------------------------------------------------------


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def _seeds_of(data: dict) -> list[int]:
    return list(data.get("workload", {}).get("seeds") or data.get("seeds") or SEEDS)


def _by_seed(data: dict, values: list) -> dict[int, Any]:
    return dict(zip(_seeds_of(data), values))


def _key(data: dict, policy: str, key: str) -> dict[int, float | None]:
    """Per seed, a policy's reported key (empty for a policy or key the result lacks)."""
    p = data["policies"].get(policy)
    if p is None or key not in p.get("per_seed", {}):
        return {}
    return {s: (None if v is None else float(v)) for s, v in _by_seed(data, p["per_seed"][key]).items()}


def _class_key(data: dict, policy: str, cls: str, key: str) -> dict[int, float | None]:
    p = data["policies"].get(policy)
    per_seed = (p or {}).get("per_seed", {})
    rows = per_seed.get("per_class")
    if not rows:
        # An older result keeps no per-class rows; a reported per-class key (P95 wait, Jain on
        # demand) is kept per seed as a dict by class anyway.
        by_class = per_seed.get(key) or []
        if not all(isinstance(v, dict) for v in by_class):
            return {}
        rows = [{c: {key: x} for c, x in v.items()} for v in by_class]
    return {s: (None if (r.get(cls) or {}).get(key) is None else float(r[cls][key]))
            for s, r in _by_seed(data, rows).items()}


def _baselines(data: dict) -> list[str]:
    return [n for n in data["policies"] if n.split("@")[0] not in AGENTRM_NAMES
            and not n.startswith(("fixed-lanes@", BOUND_NAME))]


def _best(data: dict, names: list[str], key: Callable[[str], dict[int, float | None]],
          pick: Callable, tiebreak: Callable[[str, int], float] | None = None
          ) -> tuple[dict[int, float | None], dict[int, str]]:
    """Per seed, the best of `names` on `key` (pick: min or max) and which one it is; among
    equals, the one with the lowest `tiebreak(name, seed)`, else the first by name."""
    values = {n: key(n) for n in names}
    best: dict[int, float | None] = {}
    who: dict[int, str] = {}
    for s in SEEDS:
        cands = [(v[s], n) for n, v in values.items() if v.get(s) is not None]
        if cands:
            top = pick(c[0] for c in cands)
            tied = sorted(n for x, n in cands if x == top)
            who[s] = min(tied, key=lambda n: tiebreak(n, s)) if tiebreak else tied[0]
            best[s] = top
    return best, who


def _who(who: dict[int, str]) -> str:
    names = sorted(set(who.values()))
    return names[0] if len(names) == 1 else "the best per seed of " + ", ".join(names)


# -- one check ----------------------------------------------------------------------------


def _ratio_check(scenario: str, what: str, mine: dict, theirs: dict, limit: float, against: str,
                 at_least: bool = False) -> Check:
    """mine / theirs per seed against `limit` (at most, or at least)."""
    values: dict[int, float] = {}
    passes: dict[int, bool] = {}
    for s in SEEDS:
        a, b = mine.get(s), theirs.get(s)
        if a is None or b is None:
            continue
        if b > 0:
            values[s] = a / b
        else:
            values[s] = 1.0 if a == 0 else float("inf")
        passes[s] = a >= limit * b - EPS if at_least else a <= limit * b + EPS
    c = _check(scenario, what, values, passes, against)
    zero = sorted(s for s, v in values.items() if v == float("inf"))
    if zero:
        c.notes.append(f"the baseline's value is 0 on seeds {','.join(map(str, zero))}, AgentRM's "
                       + "/".join(f"{mine[s]:.3f}" for s in zero))
    return c


def _value_check(scenario: str, what: str, mine: dict, ok: Callable[[float], bool], against: str = "",
                 digits: int = 2) -> Check:
    values = {s: mine[s] for s in SEEDS if mine.get(s) is not None}
    return _check(scenario, what, values, {s: ok(v) for s, v in values.items()}, against, digits)


def _check(scenario: str, what: str, values: dict, passes: dict, against: str, digits: int = 2) -> Check:
    complete = all(s in passes for s in SEEDS)
    c = Check(scenario, what, values, passes, complete and all(passes.values()), against, digits=digits)
    missing = [s for s in SEEDS if s not in passes]
    if missing:
        c.notes.append(f"seeds {','.join(map(str, missing))} not run")
    c.bound = next((text for (sc, w), text in BOUNDS.items()
                    if scenario.startswith(sc) and what.startswith(w)), "")
    return c


def _missing(scenario: str, what: str, why: str) -> Check:
    return Check(scenario, what, {}, {}, False, notes=[why])


# -- the targets --------------------------------------------------------------------------


def check_mixed_lanes_point(label: str, data: dict) -> list[Check]:
    """One load point of `mixed-lanes` (a scheduler result or one load of the sweep)."""
    sc = f"mixed-lanes {label}"
    gws = [g for g in GATEWAYS if g in data["policies"]]
    # Ties on the P95 (all 0 below capacity) go to the gateway with the shorter longest wait,
    # the stronger baseline for the max-wait target.
    longest = {g: _class_key(data, g, INTERACTIVE, "max_wait_s") for g in gws}
    best, who = _best(data, gws, lambda n: _class_key(data, n, INTERACTIVE, "p95_wait_s"), min,
                      tiebreak=lambda n, s: longest[n].get(s) or 0.0)
    out = [_ratio_check(sc, "interactive P95 wait <= 0.80x the best gateway-fifo",
                        _class_key(data, "agentrm", INTERACTIVE, "p95_wait_s"), best, 0.80, _who(who)),
           _ratio_check(sc, "batch run completion <= 1.1x gateway-fifo@30s",
                        _class_key(data, "agentrm", BATCH, "run_completion_mean_s"),
                        _class_key(data, "gateway-fifo@30s", BATCH, "run_completion_mean_s"), 1.1, "gateway-fifo@30s"),
           _value_check(sc, "interactive Jain on service / demand >= 0.95",
                        _class_key(data, "agentrm", INTERACTIVE, "jain_demand"), lambda v: v >= 0.95, "", 3)]
    their_max = {s: _class_key(data, who[s], INTERACTIVE, "max_wait_s").get(s) for s in who}
    out.append(_ratio_check(sc, "interactive max wait <= 2x the best gateway-fifo's",
                            _class_key(data, "agentrm", INTERACTIVE, "max_wait_s"),
                            {s: v for s, v in their_max.items() if v is not None}, 2.0, _who(who)))
    return out


def _sweep_point(sweep: dict, load: str) -> dict:
    """One load of a load_sweep result, shaped as a scheduler result."""
    row = sweep["scenarios"]["mixed-lanes"][load]

    def per_class(v: dict) -> list[dict]:
        if v.get("per_class"):
            return v["per_class"]
        # A sweep from before per-class rows kept the interactive P95 wait alone.
        return [{INTERACTIVE: {"p95_wait_s": w}} for w in v.get("p95_wait_s:INTERACTIVE") or []]

    return {"workload": {"seeds": sweep["seeds"]},
            "policies": {n: {"per_seed": {"per_class": per_class(v)}} for n, v in row["policies"].items()}}


def check_mixed_lanes(results: Path) -> list[Check]:
    out: list[Check] = []
    sweep = _load(results / "load_sweep_mixed-lanes.json") or _load(results / "load_sweep.json")
    if sweep is None or "mixed-lanes" not in sweep.get("scenarios", {}):
        out.append(_missing("mixed-lanes", "every target at every load of the sweep", "no load sweep result"))
    else:
        for load in sweep["scenarios"]["mixed-lanes"]:
            out += check_mixed_lanes_point(f"{load}x", _sweep_point(sweep, load))
    data = _load(results / "scheduler_mixed-lanes.json")
    if data is not None:
        out += check_mixed_lanes_point("own fleet", data)
    return out


def _min_class(data: dict, policy: str, key: str) -> dict[int, float | None]:
    rows = _key_rows(data, policy, key)
    return {s: min((v for v in row.values() if v is not None), default=None) for s, row in rows.items()}


def _key_rows(data: dict, policy: str, key: str) -> dict[int, dict]:
    p = data["policies"].get(policy)
    values = (p or {}).get("per_seed", {}).get(key) or []
    return {s: (v or {}) for s, v in _by_seed(data, values).items()}


def check_runs(data: dict) -> list[Check]:
    mean = _key(data, "agentrm", "run_completion_mean_s")
    return [
        _ratio_check("runs", "mean run completion <= 0.85x gateway-fifo@30s", mean,
                     _key(data, "gateway-fifo@30s", "run_completion_mean_s"), 0.85, "gateway-fifo@30s"),
        _ratio_check("runs", "dominates plas: mean run completion <= plas's", mean,
                     _key(data, "plas", "run_completion_mean_s"), 1.0, "plas"),
        _ratio_check("runs", "dominates plas: Jain on demand (lowest class) >= plas's",
                     _min_class(data, "agentrm", "jain_demand"), _min_class(data, "plas", "jain_demand"), 1.0,
                     "plas", at_least=True),
        _ratio_check("runs", "dominates plas: service gap <= plas's", _key(data, "agentrm", "max_service_gap"),
                     _key(data, "plas", "max_service_gap"), 1.0, "plas"),
    ]


def check_hangs(name: str, data: dict) -> list[Check]:
    out: list[Check] = []
    best, who = _best(data, _baselines(data), lambda n: _key(data, n, "throughput_per_min"), max)
    for policy in (p for p in JUDGED if p in data["policies"]):
        out.append(_ratio_check(name, f"hung lane-seconds <= 0.25x gateway-fifo@30s ({policy})",
                                _key(data, policy, "hung_lane_seconds"), _key(data, "gateway-fifo@30s",
                                                                              "hung_lane_seconds"), 0.25,
                                "gateway-fifo@30s"))
        cuts, calls = _key(data, policy, "live_calls_cut"), _key(data, policy, "calls_completed")
        share: dict[int, float | None] = {s: c / n for s, c in cuts.items() if c is not None
                                          and (n := calls.get(s))}
        c = _value_check(name, f"live cuts <= 1% of calls ({policy})", share, lambda v: v <= 0.01)
        c.values = {s: 100 * v for s, v in c.values.items()}    # shown in %
        if not share:
            c.notes.append("no per-seed call counts in this result: rerun")
        out.append(c)
        if name in NO_QUARANTINE:
            out.append(_value_check(name, f"0 agents quarantined ({policy})", _key(data, policy, "quarantined_agents"),
                                    lambda v: v == 0, digits=0))
        out.append(_ratio_check(name, f"throughput >= 0.98x the best baseline ({policy})",
                                _key(data, policy, "throughput_per_min"), best, 0.98, _who(who), at_least=True))
        out[-1].digits = 3
    return out


def _history_best(row: dict) -> tuple[float | None, str]:
    cands = [(v, k) for k, v in row["p95_s"].items() if k.startswith(BOUND_NAME + "@")
             and parse_order(k.split("@", 1)[1])[0] in HISTORY_ONLY]
    return min(cands) if cands else (None, "")


def check_provider_bound(results: Path) -> list[Check]:
    out: list[Check] = []
    bounds = _load(results / "bounds_provider-bound.json")
    if bounds is None:
        out.append(_missing("provider-bound", "P95 <= 1.05x the best history-only bound", "no bounds result"))
    else:
        mine, theirs, who = {}, {}, {}
        for row in bounds["seeds"]:
            best, name = _history_best(row)
            if best is not None:
                mine[row["seed"]], theirs[row["seed"]], who[row["seed"]] = row["p95_s"]["agentrm"], best, name
        out.append(_ratio_check("provider-bound", "P95 <= 1.05x the best history-only order, every seed", mine,
                                theirs, 1.05, _who(who)))
    data = _load(results / "scheduler_provider-bound.json")
    if data is None:
        out.append(_missing("provider-bound", "P95 <= 0.5x no-gateway, mean over seeds", "no result"))
    else:
        c = _ratio_check("provider-bound", "P95 <= 0.5x no-gateway, mean over seeds",
                         _key(data, "agentrm", "p95_latency_s"), _key(data, "no-gateway", "p95_latency_s"), 0.5,
                         "no-gateway")
        mean = statistics.fmean(c.values.values()) if c.values else float("inf")
        c.passes = {s: v <= 0.5 + EPS for s, v in c.values.items()}
        c.holds = len(c.values) == len(SEEDS) and mean <= 0.5 + EPS
        c.against = f"no-gateway; mean of the ratios {mean:.3f}"
        out.append(c)
    pred = _load(results / "bounds_provider-bound-predictable.json")
    what = "P95 <= 1.1x the clairvoyant order (edf1)"
    if pred is None:
        out.append(_missing("provider-bound-predictable", what, "no bounds result"))
    else:
        edf = f"{BOUND_NAME}@edf1"
        mine = {r["seed"]: r["p95_s"]["agentrm"] for r in pred["seeds"] if edf in r["p95_s"]}
        theirs = {r["seed"]: r["p95_s"][edf] for r in pred["seeds"] if edf in r["p95_s"]}
        out.append(_ratio_check("provider-bound-predictable", what, mine, theirs, 1.1, edf))
    return out


def check_fairness(name: str, data: dict) -> list[Check]:
    out = []
    over = _key(data, "agentrm", "service_gap_over_2u")
    c = _value_check(name, "fairness: service gap <= VTC's 2U bound, every seed", over, lambda v: v <= 1.0,
                     "largest gap / 2U")
    if not over:
        c.notes.append("no gap / 2U in this result (a run before v3): rerun")
    out.append(c)
    if "vtc" in data["policies"]:
        c = _ratio_check(name, "fairness: service gap <= 2x vtc's on the median seed",
                         _key(data, "agentrm", "max_service_gap"), _key(data, "vtc", "max_service_gap"), 2.0, "vtc")
        median = statistics.median(c.values.values()) if c.values else float("inf")
        c.holds = len(c.values) == len(SEEDS) and median <= 2.0 + EPS
        c.against = f"vtc; median {median:.2f}"
        out.append(c)
    return out


def trace_path(results: Path, load: float) -> Path:
    return results / f"scheduler_{TRACE}_load{load:.1f}.json"


def check_trace(load: float, data: dict) -> list[Check]:
    sc = f"{TRACE} {load:g}x"
    names = _baselines(data)
    good, good_who = _best(data, names, lambda n: _key(data, n, "throughput_per_min"), max)
    p95, p95_who = _best(data, names, lambda n: _key(data, n, "p95_latency_s"), min)
    out = []
    for policy in (p for p in JUDGED if p in data["policies"]):
        goodput = _ratio_check(sc, f"goodput >= the best baseline's ({policy})",
                               _key(data, policy, "throughput_per_min"), good, 1.0, _who(good_who), at_least=True)
        latency = _ratio_check(sc, f"P95 <= the best baseline's ({policy})", _key(data, policy, "p95_latency_s"),
                               p95, 1.0, _who(p95_who))
        goodput.digits = latency.digits = 3     # below capacity the orders differ in the third digit
        out += [goodput, latency]
    return out


SCENARIOS_WITH_FAIRNESS = ("mixed-lanes", "provider-bound", "provider-bound-predictable", "hangs", "hangs-persist",
                           "hangs-persist-model", "reasoning-mix", "runs", "saturating-provider", "replicas", "paper")


def check_all(results: Path) -> list[Check]:
    out = check_mixed_lanes(results)
    runs = _load(results / "scheduler_runs.json")
    out += check_runs(runs) if runs else [_missing("runs", "every target", "scheduler_runs.json missing")]
    for name in HANGS:
        data = _load(results / f"scheduler_{name}.json")
        out += check_hangs(name, data) if data else [_missing(name, "every target", f"scheduler_{name}.json missing")]
    out += check_provider_bound(results)
    for load in TRACE_LOADS:
        data = _load(trace_path(results, load))
        out += check_trace(load, data) if data else [_missing(f"{TRACE} {load:g}x", "every target",
                                                              f"{trace_path(results, load).name} missing")]
    for name in SCENARIOS_WITH_FAIRNESS:
        data = _load(results / f"scheduler_{name}.json")
        if data:
            out += check_fairness(name, data)
    for load in TRACE_LOADS:
        data = _load(trace_path(results, load))
        if data:
            out += check_fairness(f"{TRACE} {load:g}x", data)
    return out


def _cell(c: Check, seed: int) -> str:
    if seed not in c.values:
        return "-"
    v = c.values[seed]
    text = "inf" if v is None or v == float("inf") else f"{v:.{c.digits}f}"
    return text if c.passes.get(seed) else f"**{text}**"


def to_markdown(checks: list[Check]) -> str:
    lines = ["| scenario | target | " + " | ".join(f"seed {s}" for s in SEEDS) + " | holds | against | bound |",
             "|---|---|" + "---|" * len(SEEDS) + "---|---|---|"]
    for c in checks:
        holds = "yes" if c.holds else "**no**"
        against = "; ".join(x for x in [c.against, *c.notes] if x)
        lines.append(f"| `{c.scenario}` | {c.what} | " + " | ".join(_cell(c, s) for s in SEEDS)
                     + f" | {holds} | {against or '-'} | {c.bound or '-'} |")
    held = sum(c.holds for c in checks)
    lines += ["", f"{held} of {len(checks)} rows hold on every seed; a bold value misses on that seed, a dash was "
                  "not run."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrm_bench.targets", description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("bench/results"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    checks = check_all(args.results)
    print(json.dumps([asdict(c) for c in checks], sort_keys=True) if args.json else to_markdown(checks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Bounds and yardsticks for the scheduler's targets. A BOUND is proven (each one's docstring
has the sketch); a YARDSTICK is an order someone could compare against (clairvoyant or
history-only) that nothing proves optimal. Neither is a baseline or a policy anyone runs.

    python -m agentrm_bench.bounds [--what p95|little|runs|frontier] [--scenario NAME]
        [--seed N]... [--orders edf1,sjf] [--timeouts 5,10,...] [--out DIR] [--json]

`--what` (default: the scenario's own: p95 for provider-bound, little for mixed-lanes, runs for
runs, frontier for hangs and its variants):
- `p95`: P95 latency per seed against `no-gateway`'s in the same run. Floors: AgentRM's own
  service (`service_p95`: each answered call's latency is at least its service) and zero
  wait (each call's own service; over the zero-wait run's calls, so a floor, not a proof).
  Yardsticks: the clairvoyant and history-only orders below. EDF with every call due a
  fixed time after its request (edf1) minimises the largest lateness on ONE machine with
  every job present (Jackson's rule); with several lanes, token buckets and calls that arrive
  over time (release dates) it is optimal for nothing, and a P95 is no maximum lateness: it
  is a yardstick, not a bound.
- `little`: the Little's-law lower bound on interactive queue wait given the lane share the
  other classes take (`little_wait_bound`), the mean and its P95 consequence, beside each
  policy's measured share and wait. Strict class priority is not a bound on a P95 (its
  interactive P95 is one policy's figure, not a floor for every order); this is.
- `runs`: mean run completion: the zero-wait floor of every run (a bound), and the
  clairvoyant SRPT and class-weighted SRPT orders over runs (yardsticks).
- `frontier`: the fixed-timeout frontier in `hangs`: gateway-fifo at every first-chunk timeout
  of a grid, live calls cut against hung lane-seconds (`timeout_frontier`): every point is a
  policy that runs, so the frontier is exact for that family of policies.

Orders (`bound-clairvoyant@ORDER`: the central gateway of gateway-fifo, the same lanes, buckets,
refunds, timeout and retry, with another admission order):
  - `sjf`: shortest true service first (minimises the mean, not the tail);
  - `edfK` (e.g. `edf1`): earliest of (request time - K x true service);
  - `mean-edfK`: EDF on each class's mean service of the calls answered so far: history only;
  - `agent-edfK`: EDF on the agent's own mean service so far (its class's until it has one):
    history only, the best such order we could build for `provider-bound` and its
    length-predictable variant (where an agent's answers resemble each other);
  - `late-edfT` / `late-mean-edfT`: edf1 / mean-edf1 that serve last the calls already past
    their latest start for an answer within T s (they miss T anyway);
  - `prompt-edfK`: mean-edf plus the call's true time to first token;
  - `srpt-run`: shortest remaining run first: the true service of the run's calls from the
    waiting one to its last (clairvoyant). SRPT minimises mean response time on one preemptive
    server (Schrage 1968); here lanes are several, calls are not preemptible and runs leave
    the queue for their tools, so it is a yardstick;
  - `wsrpt-runW`: the same with interactive runs' remaining service divided by W (Smith's
    weighted rule: interactive completions weigh W times a batch run's).
The clairvoyant policy exists only under its `bound-` name (policies/clairvoyant.py); it is
never part of a scenario's comparison (policies.POLICY_NAMES).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from app.stats import percentile

from .harness import run_policy
from .metrics import summarize
from .policies.clairvoyant import BOUND_NAME, parse_order
from .scenarios import AGENTRM_DEFAULTS, SCENARIOS, Scenario
from .workload import CLASSES, Trace, WorkloadParams, generate

BOUND_PREFIX = BOUND_NAME
DEFAULT_ORDERS = ("edf1", "sjf")
# Far beyond any trace's demand: the zero-wait run never meets a lane, RPM or TPM limit.
UNLIMITED_LANES = 1_000_000
UNLIMITED_RPM = 10**9
UNLIMITED_TPM = 10**13


def service_p95(recorder) -> float | None:
    """P95 of the answered calls' service: the answered attempt's send to its last byte."""
    return percentile([r.completed_at - r.answered_sent_at for r in recorder.calls
                       if r.completed_at is not None and r.answered_sent_at is not None], 95)


# What else each run reports beside its P95: what a bound's order costs the other calls.
COSTS = ("p99_latency_s", "max_wait_s", "max_service_gap", "throughput_per_min")


def _p95(name: str, trace: Trace, sc: Scenario, lanes: int, rpm: int, tpm: int,
         costs: dict | None = None) -> tuple[float, float | None]:
    run = run_policy(name, trace, lanes, rpm, tpm, dict(AGENTRM_DEFAULTS), None, outages=sc.outages,
                     saturation=sc.saturation, replicas=sc.replicas,
                     provider_concurrency=lanes if sc.provider_concurrency_is_lanes else None)
    by_class = {c: [a.agent_id for a in trace.agents if a.priority_class == c] for c in CLASSES}
    summary = summarize(run.recorder, by_class, None, rpm, tpm, lanes)
    if costs is not None:
        costs[name] = {k: summary[k] for k in COSTS}
        costs[name]["jain_min"] = min(v for v in summary["jain"].values() if v is not None)
    return summary["p95_latency_s"], service_p95(run.recorder)


def seed_bounds(sc: Scenario, seed: int, orders: tuple[str, ...]) -> dict:
    """One seed's P95s (seconds) and their ratios to no-gateway's."""
    trace = generate(replace(WorkloadParams(**sc.params), seed=seed))
    costs: dict = {}
    base, _ = _p95("no-gateway", trace, sc, sc.lanes, sc.rpm, sc.tpm, costs)
    agentrm, agentrm_service = _p95("agentrm", trace, sc, sc.lanes, sc.rpm, sc.tpm, costs)
    # None only for a run that answers no call; every scenario's AgentRM run answers calls,
    # and its ratio to no-gateway's P95 below needs a number.
    assert agentrm_service is not None
    zero, _ = _p95("gateway-fifo@600s", trace, replace(sc, provider_concurrency_is_lanes=False),
                   UNLIMITED_LANES, UNLIMITED_RPM, UNLIMITED_TPM)
    p95 = {"no-gateway": base, "agentrm": agentrm, "zero-wait": zero, "agentrm-service": agentrm_service}
    for order in orders:
        p95[f"{BOUND_PREFIX}@{order}"], _ = _p95(f"{BOUND_PREFIX}@{order}", trace, sc, sc.lanes, sc.rpm, sc.tpm,
                                                 costs)
    return {"seed": seed, "p95_s": p95, "vs_no_gateway": {k: v / base for k, v in p95.items()}, "costs": costs}


def run(scenario: str = "provider-bound", seeds: tuple[int, ...] = (1, 2, 3, 4, 5),
        orders: tuple[str, ...] = DEFAULT_ORDERS) -> dict:
    for order in orders:
        parse_order(order)
    sc = SCENARIOS[scenario]
    return {"scenario": sc.name, "what": "bounds on P95 latency (not baselines): ratios to no-gateway's P95",
            "seeds": [seed_bounds(sc, s, orders) for s in seeds]}


COLUMNS = (("no-gateway", "no-gateway P95 s"), ("agentrm", "agentrm"), ("zero-wait", "floor: zero wait"),
           ("agentrm-service", "floor: agentrm's own service"))


def _order_label(order: str) -> str:
    kind, _ = parse_order(order)
    what = {"mean-edf": "history only", "agent-edf": "history only, per agent", "prompt-edf": "true first token",
            "late-edf": "clairvoyant, gives up on late calls",
            "late-mean-edf": "history only, gives up on late calls"}.get(kind, "clairvoyant")
    return f"yardstick: {order} ({what})"


def _cost_label(key: str, names: dict) -> str:
    if key == "no-gateway":
        return "no-gateway"
    return names[key] if key in names else _order_label(key.removeprefix(BOUND_PREFIX + "@"))


def to_markdown(result: dict) -> str:
    keys = list(result["seeds"][0]["p95_s"]) if result["seeds"] else []
    names = dict(COLUMNS)
    header = [names[k] if k in names else _order_label(k.removeprefix(BOUND_PREFIX + "@")) for k in keys]
    lines = [f"# P95 latency bounds: `{result['scenario']}`", "",
             ("Not baselines (`python -m agentrm_bench.bounds`). A bound is proven; zero wait is each "
              "call's own service (a floor on its latency, over the zero-wait run's calls); a yardstick is an "
              "order nothing proves optimal. Each cell is P95 s (x no-gateway's P95 on the same seed)."), "",
             "| seed | " + " | ".join(header) + " |", "|---" * (len(keys) + 1) + "|"]
    for row in result["seeds"]:
        cells = [f"{row['p95_s'][k]:.1f}" if k == "no-gateway" else
                 f"{row['p95_s'][k]:.1f} ({row['vs_no_gateway'][k]:.2f}x)" for k in keys]
        lines.append(f"| {row['seed']} | " + " | ".join(cells) + " |")
    costed = [k for k in keys if any(k in row.get("costs", {}) for row in result["seeds"])]
    if costed:
        lines += ["", ("What each order costs the other calls: P99 latency s / longest wait s / lowest Jain "
                       "index within a class."), "",
                  "| seed | " + " | ".join(_cost_label(k, names) for k in costed) + " |",
                  "|---" * (len(costed) + 1) + "|"]
        for row in result["seeds"]:
            cells = []
            for k in costed:
                c = row.get("costs", {}).get(k)
                cells.append(f"{c['p99_latency_s']:.1f} / {c['max_wait_s']:.0f} / {c['jain_min']:.3f}" if c else "-")
            lines.append(f"| {row['seed']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- Little's law: interactive wait given the others' lane share -------------------------


def class_cycle(trace: Trace, priority_class: str) -> dict:
    """The class's closed loop from its trace: N agents; per call, the mean service S (healthy
    provider latency) and the mean time Z the agent spends away from the provider (think or
    job gap before a run's first call, tool time after a call)."""
    agents = [a for a in trace.agents if a.priority_class == priority_class]
    calls = [c for a in agents for r in a.runs for c in r.calls]
    away = sum(r.idle_before_s for a in agents for r in a.runs) + sum(c.tool_after_s for c in calls)
    return {"agents": len(agents), "calls": len(calls),
            "service_s": sum(c.provider_latency_s for c in calls) / len(calls) if calls else 0.0,
            "away_s": away / len(calls) if calls else 0.0}


def little_wait_bound(agents: int, service_s: float, away_s: float, lanes: int, other_share: float) -> float:
    """A lower bound on a class's MEAN queue wait per call when the other classes hold a share
    `other_share` of the lanes (lane-seconds per second / lanes), for any order.

    Proof sketch. Each of the class's N agents is always in exactly one of: away (think, tool),
    waiting, or in service, so over a long horizon Little's law gives X (Z + W + S) = N for the
    class's call rate X, mean away time Z, mean wait W and mean service S per call. Its calls
    hold lane-seconds at rate X S, and the lanes offer C (1 - phi) once the others take their
    share phi, so X S <= C (1 - phi). Hence N = X (Z + W + S) <= C (1 - phi) (Z + W + S) / S,
    i.e. W >= N S / (C (1 - phi)) - Z - S. Nothing here depends on the order; an order changes
    only phi (starving the others is phi = 0) and which calls wait. It is a long-run bound:
    over a finite horizon X (Z + W + S) = N holds up to the edges (every agent starts away
    from the provider, and the cycle open at the end is cut off), which let a measured mean
    fall a few % under it (1-7% in `mixed-lanes`, 30 minutes, seeds 1-2)."""
    room = lanes * (1.0 - other_share)
    if room <= 0:
        return float("inf")
    return max(0.0, agents * service_s / room - away_s - service_s)


def p95_from_mean(mean_lb: float, max_wait_s: float) -> float:
    """What a lower bound on the mean wait says of the P95: at most 5% of waits exceed the P95
    and none exceeds the longest, so mean <= 0.95 P95 + 0.05 max, and P95 >= (mean - 0.05 max)
    / 0.95. A bound for every order whose longest wait is at most `max_wait_s`; an order that
    starves 5% of the calls for ever escapes it, which is why a P95 target needs a fairness
    target beside it."""
    return max(0.0, (mean_lb - 0.05 * max_wait_s) / 0.95)


LITTLE_POLICIES = ("agentrm", "gateway-fifo@30s", "vtc", "plas", "las")


def little_bounds(sc: Scenario, seed: int, policies: tuple[str, ...] = LITTLE_POLICIES,
                  shares: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)) -> dict:
    """One seed: the interactive bound on a grid of the others' shares, and per policy its
    measured share, its measured interactive mean and P95 wait, and the bound at its share."""
    trace = generate(replace(WorkloadParams(**sc.params), seed=seed))
    cyc = class_cycle(trace, CLASSES[0])
    grid = {f"{phi:.1f}": little_wait_bound(cyc["agents"], cyc["service_s"], cyc["away_s"], sc.lanes, phi)
            for phi in shares}
    rows = {}
    for name in policies:
        run = run_policy(name, trace, sc.lanes, sc.rpm, sc.tpm, dict(AGENTRM_DEFAULTS), None, outages=sc.outages,
                         saturation=sc.saturation, replicas=sc.replicas,
                         provider_concurrency=sc.lanes if sc.provider_concurrency_is_lanes else None)
        end = run.recorder.duration_s
        other = sum(r.completed_at - r.answered_sent_at for r in run.recorder.calls
                    if r.priority_class != CLASSES[0] and r.completed_at is not None
                    and r.answered_sent_at is not None) / (sc.lanes * end)
        waits = [(r.answered_sent_at if r.answered_sent_at is not None else end) - r.requested_at
                 for r in run.recorder.calls if r.priority_class == CLASSES[0]]
        mean_lb = little_wait_bound(cyc["agents"], cyc["service_s"], cyc["away_s"], sc.lanes, other)
        rows[name] = {"other_share": other, "mean_wait_s": sum(waits) / len(waits) if waits else 0.0,
                      "p95_wait_s": percentile(waits, 95) or 0.0, "max_wait_s": max(waits, default=0.0),
                      "mean_wait_lb_s": mean_lb, "p95_wait_lb_s": p95_from_mean(mean_lb, max(waits, default=0.0))}
    return {"seed": seed, "cycle": cyc, "mean_wait_lb_by_share": grid, "policies": rows}


# -- run completion: the zero-wait floor and SRPT over runs ---------------------------------


def run_floor(trace: Trace, recorder) -> float:
    """A lower bound on a run's mean run completion time: per run it started, the sum of its
    calls' healthy service times and the tool times between them, or the time left from the
    run's start to the end if that is shorter; averaged over the runs the policy started.

    Proof sketch. A run's completion time runs from its first call's request to its last
    call's answer (or to the end, for a run still open). In between, each of its calls is
    answered no sooner than its service after it is sent, and the next is asked no sooner than
    the tool time after that answer, whatever the order. A policy's mean over the runs it
    started is therefore at least this mean over the same runs (the floor depends on the
    policy only through when its runs start)."""
    runs = {f"{a.agent_id}-r{i}": r for a in trace.agents for i, r in enumerate(a.runs)}
    floors = []
    for rec in recorder.runs:
        run = runs.get(rec.run_key)
        if run is None or not run.calls:
            continue
        need = sum(c.provider_latency_s for c in run.calls) + sum(c.tool_after_s for c in run.calls[:-1])
        floors.append(min(need, recorder.duration_s - rec.started_at))
    return sum(floors) / len(floors) if floors else 0.0


RUN_ORDERS = ("srpt-run", "wsrpt-run4")
RUN_POLICIES = ("agentrm", "gateway-fifo@30s", "plas", "las")


def run_bounds(sc: Scenario, seed: int, orders: tuple[str, ...] = RUN_ORDERS,
               policies: tuple[str, ...] = RUN_POLICIES) -> dict:
    trace = generate(replace(WorkloadParams(**sc.params), seed=seed))
    out: dict = {"seed": seed, "floor_run_mean_s": {}, "run_mean_s": {}, "batch_run_mean_s": {}}
    for name in policies + tuple(f"{BOUND_PREFIX}@{o}" for o in orders):
        run = run_policy(name, trace, sc.lanes, sc.rpm, sc.tpm, dict(AGENTRM_DEFAULTS), None, outages=sc.outages,
                         saturation=sc.saturation, replicas=sc.replicas,
                         provider_concurrency=sc.lanes if sc.provider_concurrency_is_lanes else None)
        by_class = {c: [a.agent_id for a in trace.agents if a.priority_class == c] for c in CLASSES}
        summary = summarize(run.recorder, by_class)
        out["run_mean_s"][name] = summary["run_completion_mean_s"]
        out["floor_run_mean_s"][name] = run_floor(trace, run.recorder)
        out["batch_run_mean_s"][name] = summary["per_class"].get(CLASSES[1], {}).get("run_completion_mean_s")
    return out


# -- the fixed-timeout frontier of `hangs` ---------------------------------------------------

FRONTIER_TIMEOUTS = (5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0)


def timeout_frontier(sc: Scenario, seed: int, timeouts: tuple[float, ...] = FRONTIER_TIMEOUTS,
                     policies: tuple[str, ...] = ("agentrm", "agentrm-gateway")) -> dict:
    """gateway-fifo at each first-chunk timeout: (live calls cut, hung lane-seconds) per point,
    and the policies' own points beside. Every point is a policy that runs, so the curve is
    exact for the fixed-timeout family: a policy below it (fewer cuts at no more hung
    lane-seconds) beats every fixed timeout; none is proven impossible beyond it."""
    trace = generate(replace(WorkloadParams(**sc.params), seed=seed))
    by_class = {c: [a.agent_id for a in trace.agents if a.priority_class == c] for c in CLASSES}

    def point(name: str) -> dict:
        run = run_policy(name, trace, sc.lanes, sc.rpm, sc.tpm, dict(AGENTRM_DEFAULTS), None, outages=sc.outages,
                         saturation=sc.saturation, replicas=sc.replicas,
                         provider_concurrency=sc.lanes if sc.provider_concurrency_is_lanes else None)
        m = summarize(run.recorder, by_class)
        return {"live_calls_cut": m["live_calls_cut"], "hung_lane_seconds": m["hung_lane_seconds"],
                "calls_completed": m["calls_completed"], "throughput_per_min": m["throughput_per_min"]}

    return {"seed": seed, "frontier": {f"{t:g}": point(f"gateway-fifo@{t:g}s") for t in timeouts},
            "policies": {name: point(name) for name in policies}}


DEFAULT_WHAT = {"provider-bound": "p95", "provider-bound-predictable": "p95", "mixed-lanes": "little",
                "runs": "runs", "hangs": "frontier", "hangs-persist": "frontier", "hangs-persist-model": "frontier",
                "reasoning-mix": "frontier"}


def little_markdown(result: dict) -> str:
    lines = [f"# Little's-law bound on interactive wait: `{result['scenario']}`", "",
             "A long-run lower bound for every order (bounds.little_wait_bound): mean interactive wait >= "
             "N S / (C (1 - phi)) - Z - S, phi the lane share the other classes hold; over 30 minutes the edges "
             "let a measured mean fall a few % under it. Its P95 form holds for orders whose longest "
             "interactive wait is at most the one measured.", "",
             "| seed | N | S s | Z s | bound on mean wait at phi = 0 / 0.1 / 0.2 / 0.3 / 0.4 / 0.5 |",
             "|---|---|---|---|---|"]
    for row in result["seeds"]:
        c = row["cycle"]
        grid = " / ".join(f"{v:.1f}" for v in row["mean_wait_lb_by_share"].values())
        lines.append(f"| {row['seed']} | {c['agents']} | {c['service_s']:.2f} | {c['away_s']:.2f} | {grid} |")
    lines += ["", "| seed | policy | others' share | mean wait s (bound) | P95 wait s (bound) | max wait s |",
              "|---|---|---|---|---|---|"]
    for row in result["seeds"]:
        for name, v in row["policies"].items():
            lines.append(f"| {row['seed']} | {name} | {v['other_share']:.3f} | {v['mean_wait_s']:.2f} "
                         f"({v['mean_wait_lb_s']:.2f}) | {v['p95_wait_s']:.2f} ({v['p95_wait_lb_s']:.2f}) | "
                         f"{v['max_wait_s']:.0f} |")
    return "\n".join(lines)


def runs_markdown(result: dict) -> str:
    rows = result["seeds"]
    names = list(rows[0]["run_mean_s"]) if rows else []
    lines = [f"# Run completion: floor and yardsticks: `{result['scenario']}`", "",
             "Mean run completion s / its floor over the same runs (a bound, bounds.run_floor) / batch runs' mean. "
             "The `bound-clairvoyant@srpt-run` orders are clairvoyant yardsticks, not bounds.", "",
             "| seed | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for row in rows:
        cells = [f"{row['run_mean_s'][n]:.1f} / {row['floor_run_mean_s'][n]:.1f} / "
                 f"{row['batch_run_mean_s'][n] or 0:.1f}" for n in names]
        lines.append(f"| {row['seed']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def frontier_markdown(result: dict) -> str:
    lines = [f"# Fixed-timeout frontier: `{result['scenario']}`", "",
             "gateway-fifo at each first-chunk timeout: live calls cut / hung lane-seconds (bounds.timeout_frontier); "
             "AgentRM's points beside.", ""]
    rows = result["seeds"]
    if not rows:
        return "\n".join(lines)
    points = list(rows[0]["frontier"]) + list(rows[0]["policies"])
    lines += ["| seed | " + " | ".join(f"{p}s" if p in rows[0]["frontier"] else p for p in points) + " |",
              "|---" * (len(points) + 1) + "|"]
    for row in rows:
        cells = [row["frontier"].get(p) or row["policies"][p] for p in points]
        lines.append(f"| {row['seed']} | " + " | ".join(
            f"{c['live_calls_cut']:.0f} / {c['hung_lane_seconds']:.0f}" for c in cells) + " |")
    return "\n".join(lines)


def run_what(what: str, scenario: str, seeds: tuple[int, ...], orders: tuple[str, ...],
             timeouts: tuple[float, ...] = FRONTIER_TIMEOUTS) -> tuple[dict, str]:
    sc = SCENARIOS[scenario]
    if what == "little":
        result = {"scenario": scenario, "what": "little", "seeds": [little_bounds(sc, s) for s in seeds]}
        return result, little_markdown(result)
    if what == "runs":
        for order in orders:
            parse_order(order)
        result = {"scenario": scenario, "what": "runs", "seeds": [run_bounds(sc, s, orders) for s in seeds]}
        return result, runs_markdown(result)
    if what == "frontier":
        result = {"scenario": scenario, "what": "frontier",
                  "seeds": [timeout_frontier(sc, s, timeouts) for s in seeds]}
        return result, frontier_markdown(result)
    result = run(scenario, seeds, orders)
    return result, to_markdown(result)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrm_bench.bounds", description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="provider-bound", choices=sorted(SCENARIOS))
    ap.add_argument("--what", choices=("p95", "little", "runs", "frontier"), default=None,
                    help="which bound (default: the scenario's own)")
    ap.add_argument("--seed", type=int, action="append", default=[])
    ap.add_argument("--orders", default=None,
                    help="orders: sjf, edfK, mean-edfK, agent-edfK, late-edfT, srpt-run, wsrpt-runW")
    ap.add_argument("--timeouts", default=",".join(f"{t:g}" for t in FRONTIER_TIMEOUTS),
                    help="the frontier's first-chunk timeouts, seconds")
    ap.add_argument("--out", type=Path, default=None, help="write bounds_<scenario>[_<name>].md/.json here")
    ap.add_argument("--name", default=None, help="a suffix for the output files (e.g. seeds11-15)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    what = args.what or DEFAULT_WHAT.get(args.scenario, "p95")
    default_orders = RUN_ORDERS if what == "runs" else DEFAULT_ORDERS
    orders = tuple(o.strip() for o in (args.orders or ",".join(default_orders)).split(",") if o.strip())
    try:
        timeouts = tuple(float(t) for t in args.timeouts.split(",") if t.strip())
        result, text = run_what(what, args.scenario, tuple(args.seed) or (1, 2, 3, 4, 5), orders, timeouts)
    except ValueError as exc:
        print(f"agentrm_bench.bounds: {exc}", file=sys.stderr)
        return 2
    if args.out:
        stem = f"bounds_{args.scenario}" + ("" if what == DEFAULT_WHAT.get(args.scenario, "p95") else f"_{what}") \
            + (f"_{args.name}" if args.name else "")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{stem}.md").write_text(text + "\n")
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, sort_keys=True) if args.json else text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

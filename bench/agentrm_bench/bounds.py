"""Bounds on what ordering can do for a scenario's P95 latency: not baselines, not policies
anyone could run, only yardsticks for a target that is not met.

    python -m agentrm_bench.bounds [--scenario provider-bound] [--seed N]... [--orders edf1,sjf]
        [--out DIR] [--json]

Per seed, against `no-gateway`'s P95 latency in the same run (the target's ratio):
- zero wait: the trace run with no limit at all (lanes, RPM and TPM out of reach, so no call
  ever waits): every call's latency is its own service time. No policy's P95 beats it.
- AgentRM's service: the P95 of the service times of the calls AgentRM itself answered
  (send of the answered attempt to its last byte): the floor for the calls it did serve.
- clairvoyant orders (`bound-clairvoyant@ORDER`): the central gateway of gateway-fifo (the
  same lanes, the same RPM/TPM buckets with the same reservation of prompt + max_tokens, the
  same refunds, timeout and retry: the same admission) with an order that knows each call's
  TRUE service time, which no scheduler knows before the call runs:
  - `sjf`: shortest true service first (minimises the mean, not the tail);
  - `edfK` (e.g. `edf1`): earliest deadline on completion, the deadline being when the agent
    asked for the call minus K x its true service time. With K = 1 this is EDF with every
    call due a fixed time after its request: the order that minimises the largest lateness
    against any common latency target (Jackson's rule), so for a P95 it is the natural
    upper bound of what the order alone can reach;
  - `mean-edfK`: the same EDF with each call's service replaced by the mean service of the
    calls of its class answered so far: NOT clairvoyant (history only), the best a scheduler
    can do where, as in these traces, nothing a request tells predicts its answer's length
    beyond its class (each answer's length is an independent draw);
  - `late-edfT`: edf1 that serves last the calls already past their latest start for an
    answer within T s of their request (they miss T anyway); with T at the target's value, the
    strongest of these bounds for a P95;
  - `late-mean-edfT`: the same with the class-mean service of mean-edf: not clairvoyant, but
    it starves the calls that are late (they go only when nothing else waits);
  - `prompt-edfK`: mean-edf plus the call's true time to first token (its prompt's prefill and
    the provider's queueing): more than the prompt size could tell, so an upper bound of
    what size-aware ordering on estimatedTokens can add.
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


COLUMNS = (("no-gateway", "no-gateway P95 s"), ("agentrm", "agentrm"), ("zero-wait", "bound: zero wait"),
           ("agentrm-service", "bound: agentrm's own service"))


def _order_label(order: str) -> str:
    kind, _ = parse_order(order)
    what = {"mean-edf": "history only", "prompt-edf": "true first token",
            "late-edf": "clairvoyant, gives up on late calls",
            "late-mean-edf": "history only, gives up on late calls"}.get(kind, "clairvoyant")
    return f"bound: {order} ({what})"


def _cost_label(key: str, names: dict) -> str:
    if key == "no-gateway":
        return "no-gateway"
    return names[key] if key in names else _order_label(key.removeprefix(BOUND_PREFIX + "@"))


def to_markdown(result: dict) -> str:
    keys = list(result["seeds"][0]["p95_s"]) if result["seeds"] else []
    names = dict(COLUMNS)
    header = [names[k] if k in names else _order_label(k.removeprefix(BOUND_PREFIX + "@")) for k in keys]
    lines = [f"# P95 latency bounds: `{result['scenario']}`", "",
             ("Not baselines: yardsticks for what any order could reach (`python -m agentrm_bench.bounds`). "
              "Each cell is P95 s (x no-gateway's P95 on the same seed)."), "",
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrm_bench.bounds", description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="provider-bound", choices=sorted(SCENARIOS))
    ap.add_argument("--seed", type=int, action="append", default=[])
    ap.add_argument("--orders", default=",".join(DEFAULT_ORDERS), help="clairvoyant orders: sjf, edfK")
    ap.add_argument("--out", type=Path, default=None, help="write bounds_<scenario>[_<name>].md/.json here")
    ap.add_argument("--name", default=None, help="a suffix for the output files (e.g. seeds11-15)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    orders = tuple(o.strip() for o in args.orders.split(",") if o.strip())
    try:
        result = run(args.scenario, tuple(args.seed) or (1, 2, 3, 4, 5), orders)
    except ValueError as exc:
        print(f"agentrm_bench.bounds: {exc}", file=sys.stderr)
        return 2
    text = to_markdown(result)
    if args.out:
        stem = f"bounds_{args.scenario}" + (f"_{args.name}" if args.name else "")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{stem}.md").write_text(text + "\n")
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, sort_keys=True) if args.json else text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

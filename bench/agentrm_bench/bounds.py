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
The clairvoyant policy exists only here and under its `bound-` name; it is never part of a
scenario's comparison (policies.POLICY_NAMES).
"""
from __future__ import annotations

import argparse
import heapq
import json
import sys
from collections import deque
from dataclasses import replace
from pathlib import Path

from app.stats import percentile

from .harness import run_policy
from .metrics import summarize
from .policies import BOUND_NAME
from .policies.central import AdmissionOrder, CentralGateway, Waiting, parse_timeout
from .scenarios import AGENTRM_DEFAULTS, SCENARIOS, Scenario
from .workload import CLASSES, Trace, WorkloadParams, generate

BOUND_PREFIX = BOUND_NAME
DEFAULT_ORDERS = ("edf1", "sjf")
# Far beyond any trace's demand: the zero-wait run never meets a lane, RPM or TPM limit.
UNLIMITED_LANES = 1_000_000
UNLIMITED_RPM = 10**9
UNLIMITED_TPM = 10**13


def parse_order(variant: str | None) -> tuple[str, float]:
    """'sjf' -> ('sjf', 0); 'edf1' / 'edf0.5' -> ('edf', K); 'mean-edf1' -> ('mean-edf', K);
    'late-edf36' -> ('late-edf', T = 36 s). Anything else is refused."""
    text = (variant or "").strip()
    if text == "sjf":
        return "sjf", 0.0
    kind = next((k for k in ("mean-edf", "prompt-edf", "late-mean-edf", "late-edf") if text.startswith(k)), "edf")
    if text.startswith(kind):
        try:
            weight = float(text[len(kind):])
        except ValueError:
            weight = -1.0
        if weight > 0 and weight != float("inf"):
            return kind, weight
    raise ValueError(f"{BOUND_PREFIX}: the variant is the order, 'sjf', 'edfK', 'mean-edfK', 'prompt-edfK' "
                     f"or 'late-edfT' with K, T > 0 (e.g. edf1); got {variant!r}")


class ClairvoyantOrder(AdmissionOrder):
    """A heap over a key that uses each call's true service time (the trace's provider
    latency): known to the simulator, never to a scheduler."""

    def __init__(self, kind: str, weight: float, sim=None) -> None:
        self.kind, self.weight, self.sim = kind, weight, sim
        self.heap: list[tuple[float, int, Waiting]] = []
        # late-edf: calls that can no longer answer within T of their request, served last
        self.late: deque[Waiting] = deque()
        # mean-edf: per class, (answered calls, their total service) seen so far
        self.seen: dict[str, list[float]] = {}

    def expected_service(self, entry: Waiting) -> float:
        """What the order assumes of the call's service: the truth (clairvoyant); for
        mean-edf, the mean service of its class's calls answered so far (history only); for
        prompt-edf, the call's true time to first token plus its class's mean time after it."""
        record = entry.cur.record
        if self.kind not in ("mean-edf", "prompt-edf", "late-mean-edf"):
            return record.call.provider_latency_s
        count, total, after_first = self.seen.get(record.priority_class, (0, 0.0, 0.0))
        if self.kind in ("mean-edf", "late-mean-edf"):
            return total / count if count else 0.0
        return record.call.first_chunk_s + (after_first / count if count else 0.0)

    def key(self, entry: Waiting) -> float:
        if self.kind == "sjf":
            return self.expected_service(entry)
        weight = 1.0 if self.kind.startswith("late-") else self.weight
        return entry.cur.record.requested_at - weight * self.expected_service(entry)

    def _give_up_on_late(self) -> None:
        """late-edf (K = 1, so the key + T is the call's latest start for an answer within T):
        a call past that instant misses T whatever happens, so it yields to every call that
        can still make it. With T at the target, this spends the 5% a P95 may miss on calls
        that miss anyway, as an order that knew every answer's length could."""
        if not self.kind.startswith("late-"):
            return
        while self.heap and self.heap[0][0] + self.weight < self.sim.now:
            self.late.append(heapq.heappop(self.heap)[2])

    def succeeded(self, entry: Waiting, attempt, now: float) -> None:
        record = entry.cur.record
        seen = self.seen.setdefault(record.priority_class, [0, 0.0, 0.0])
        seen[0] += 1
        seen[1] += now - attempt.sent_at
        seen[2] += max(0.0, now - attempt.sent_at - record.call.first_chunk_s)

    def push(self, entry: Waiting) -> None:
        heapq.heappush(self.heap, (self.key(entry), entry.seq, entry))

    def peek(self) -> Waiting | None:
        self._give_up_on_late()
        if self.heap:
            return self.heap[0][2]
        return self.late[0] if self.late else None

    def pop(self, now: float) -> Waiting:
        self._give_up_on_late()
        return heapq.heappop(self.heap)[2] if self.heap else self.late.popleft()


class ClairvoyantGateway(CentralGateway):
    """gateway-fifo@30s's admission with a clairvoyant order (a bound, not a baseline)."""
    name = BOUND_PREFIX

    def __init__(self, ctx, agents=None, variant: str | None = None):
        self.kind, self.weight = parse_order(variant)
        super().__init__(ctx, agents, None)

    def parse_variant(self, variant: str | None) -> float:
        return parse_timeout(None, self.name)

    def make_order(self) -> AdmissionOrder:
        return ClairvoyantOrder(self.kind, self.weight, self.sim)


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

"""What one decision batch costs the pool's leader, by batch size: the scheduling core alone
(decide_many, pure, no I/O), against the core as it was before granting passes ordered the
queue once (the reference below), in the same run.

    python -m agentrm_bench.decide_cost [--batches 50,100,200,400,800] [--repeat 5]

The pool is `bench load`'s: 1,000 agents, 1,000 lanes (all usable, as once its learned
limit has grown, and all free), a rate budget that never binds, policy "deadline" (the
default). So the queue is the batch itself (q = k), every deadline is equal, and rate_bound
never flips: the figures are for this case, a stall's backlog reaching an idle pool, not
for a long queue behind busy lanes. A batch is k requests from k different agents arriving
together, as the leader's inbox hands them over after a stall; it queues all k, then one
granting pass grants all k. The core before this change asked next_turn (a scan of the
whole queue) before every grant, and counted an agent's queued turns by a scan of the
queue for every request once the pool held more than the agent's cap (32): k x q work
per batch. Each figure is the CPU time of decide_many on a fresh copy of the state, the
median of `--repeat` runs with the min-max spread, and the reference's time over ours.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time

from app.domain import events as ev
from app.domain import ordering
from app.domain.apply import apply, new_pool
from app.domain.decide import decide_many
from app.domain.settings import PoolSettings
from app.domain.state import PoolState

AGENTS = 1000
QUEUE_CAP = 32   # the API's per-agent cap, which every request carries (service.MAX_QUEUED_PER_AGENT)


def _pool() -> PoolState:
    # Every lane usable (adaptive_lanes off: the pool's learned limit grown to all of them)
    # and free, so that one pass grants the whole batch.
    settings = PoolSettings(name="load", lanes=AGENTS, rpm=10_000_000, tpm=2_000_000_000, lease_seconds=300.0,
                            adaptive_lanes=False)
    state = new_pool({"settings": settings.to_dict(), "at": 0.0})
    inputs = [(ev.AGENT_REGISTERED, {"agent_id": f"a{i}", "name": f"a{i}", "priority_class": ev.INTERACTIVE}, i + 1)
              for i in range(AGENTS)]
    for type_, data in decide_many(state, inputs, 0.0):
        apply(state, type_, data)
    return state


def _batch(k: int, position: int) -> list[tuple[str, dict, int]]:
    return [(ev.TURN_REQUESTED, {"turn_id": f"t{i}", "agent_id": f"a{i}", "pool": "load", "estimated_tokens": 50,
                                 "max_output_tokens": 10, "at": 1.0, "queue_cap": QUEUE_CAP}, position + i + 1)
            for i in range(k)]


class _ScanBeforeEveryGrant:
    """The reference order: next_turn's scan of the whole queue before each grant."""

    def __init__(self, state):
        self.state = state

    def next(self):
        return ordering.next_turn(self.state)


def _scanned_queued_of(self: PoolState, agent_id: str) -> int:
    """The reference count: a scan of the queues per call."""
    turns = self.turns
    return sum(1 for queue in self.queues for turn_id in queue
               if (t := turns.get(turn_id)) is not None and t.agent_id == agent_id and t.status == ev.QUEUED)


@contextlib.contextmanager
def _reference():
    order, queued_of = ordering.GrantOrder, PoolState.queued_of
    ordering.GrantOrder, PoolState.queued_of = _ScanBeforeEveryGrant, _scanned_queued_of
    try:
        yield
    finally:
        ordering.GrantOrder, PoolState.queued_of = order, queued_of


def _time(base: PoolState, k: int) -> tuple[float, list]:
    state = base.copy()
    inputs = _batch(k, AGENTS)
    started = time.process_time()
    decisions = decide_many(state, inputs, 1.0)
    return time.process_time() - started, decisions


def run(batches: list[int], repeat: int) -> list[dict]:
    base = _pool()
    rows = []
    for k in batches:
        ours, reference = [], []
        for _ in range(repeat):   # alternate, so the machine's drift hits both alike
            spent, decisions = _time(base, k)
            ours.append(spent)
            with _reference():
                spent_ref, decisions_ref = _time(base, k)
            reference.append(spent_ref)
            granted = sum(1 for type_, _ in decisions if type_ == ev.TURN_GRANTED)
            if granted != k or decisions != decisions_ref:
                raise SystemExit(f"batch of {k}: {granted} grants, the reference decided "
                                 f"{'the same' if decisions == decisions_ref else 'otherwise'}")
        ratios = [r / max(o, 1e-9) for r, o in zip(reference, ours)]
        rows.append({"batch": k, "ms": _spread(ours), "reference_ms": _spread(reference),
                     "reference_over_ours": {"median": statistics.median(ratios), "min": min(ratios),
                                             "max": max(ratios)}})
    return rows


def _spread(seconds: list[float]) -> dict:
    ms = [s * 1000 for s in seconds]
    return {"median": statistics.median(ms), "min": min(ms), "max": max(ms)}


def to_markdown(rows: list[dict]) -> str:
    lines = ["| batch (requests) | decide_many, ms | before (a scan per grant and per request), ms | before / now |",
             "|---|---|---|---|"]
    for r in rows:
        m, b, x = r["ms"], r["reference_ms"], r["reference_over_ours"]
        lines.append(f"| {r['batch']} | {m['median']:.1f} ({m['min']:.1f}-{m['max']:.1f}) "
                     f"| {b['median']:.1f} ({b['min']:.1f}-{b['max']:.1f}) "
                     f"| {x['median']:.1f}x ({x['min']:.1f}-{x['max']:.1f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentrm_bench.decide_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", default="50,100,200,400,800", help="batch sizes, comma-separated")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        p.error("--batches takes whole numbers separated by commas, e.g. 50,100,200")
    if not batches or min(batches) < 1 or max(batches) > AGENTS or args.repeat < 1:
        p.error(f"each batch must be 1-{AGENTS} requests, and --repeat at least 1")
    rows = run(batches, args.repeat)
    print(json.dumps(rows, indent=1) if args.json else to_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

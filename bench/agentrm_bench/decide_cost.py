"""What one decision batch costs the pool's leader, by batch size: the scheduling core alone
(decide_many, pure, no I/O), against a reference that scans the queue for every grant
(below), in the same run.

    python -m agentrm_bench.decide_cost [--scenario idle|busy] [--batches 50,100,...] [--repeat 5]

The pool is `bench load`'s: 1,000 agents, a rate budget that never binds, policy "deadline"
(the default), every configured lane usable (as once the pool's learned limit has grown).
Two scenarios, each a batch as the leader's inbox hands it over after a stall:
- `idle`: 1,000 lanes, all free; k requests from k agents arrive together. The batch is the
  queue (q = k), and one pass grants all k.
- `busy`: 200 lanes, all held, and 800 turns queued behind them; k of the held turns complete
  together (k <= 200). One pass grants k turns from a queue of 800.
The core orders the queue once per granting pass. The reference asks next_turn (a scan of
the whole queue) before every grant, and counts an agent's queued turns by a scan of the
queue for every request once the pool holds more than the agent's cap (32): k x q work per
batch. In both scenarios every queued
turn's deadline is its queue time (one class, no run or size terms), and rate_bound never
flips. Each figure is the CPU time of decide_many on a fresh copy of the state, the median
of `--repeat` runs with the min-max spread, and the reference's time over ours; both cores'
decisions are checked equal at every size.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from app.domain import events as ev
from app.domain import ordering
from app.domain.apply import new_pool
from app.domain.decide import decide_many
from app.domain.settings import PoolSettings
from app.domain.state import PoolState

AGENTS = 1000
QUEUE_CAP = 32   # the API's per-agent cap, which every request carries (service.MAX_QUEUED_PER_AGENT)


BUSY_LANES, BUSY_QUEUED = 200, 800
SCENARIOS = {"idle": (50, 100, 200, 400, 800), "busy": (25, 50, 100, 200)}   # default batch sizes
LARGEST = {"idle": AGENTS, "busy": BUSY_LANES}


Input = tuple[str, dict[str, Any], int | None]   # (type, data, cause), as decide_many takes them


def _pool(lanes: int = AGENTS) -> PoolState:
    # adaptive_lanes off: every configured lane usable, as once the learned limit has grown.
    settings = PoolSettings(name="load", lanes=lanes, rpm=10_000_000, tpm=2_000_000_000, lease_seconds=300.0,
                            adaptive_lanes=False)
    state = new_pool({"settings": settings.to_dict(), "at": 0.0})
    decide_many(state, [(ev.AGENT_REGISTERED, {"agent_id": f"a{i}", "name": f"a{i}",
                                               "priority_class": ev.INTERACTIVE}, i + 1)
                        for i in range(AGENTS)], 0.0)   # decide_many applies what it decides
    return state


def _batch(k: int, position: int, first: int = 0) -> list[Input]:
    return [(ev.TURN_REQUESTED, {"turn_id": f"t{i}", "agent_id": f"a{i}", "pool": "load", "estimated_tokens": 50,
                                 "max_output_tokens": 10, "at": 0.5, "queue_cap": QUEUE_CAP}, position + i + 1)
            for i in range(first, first + k)]


def _busy_pool() -> PoolState:
    """BUSY_LANES lanes held by t0.., BUSY_QUEUED turns queued behind them."""
    state = _pool(BUSY_LANES)
    decide_many(state, _batch(BUSY_LANES + BUSY_QUEUED, AGENTS), 0.5)
    return state


def _completions(k: int, position: int) -> list[Input]:
    return [(ev.COMPLETION_REPORTED, {"turn_id": f"t{i}", "pool": "load", "outcome": ev.OK, "prompt_tokens": 50,
                                      "completion_tokens": 10, "at": 1.0}, position + i + 1)
            for i in range(k)]


def _setup(scenario: str) -> tuple[PoolState, Callable[[int], list[Input]]]:
    """The state before the batch, and the batch of size k (as inputs) for it."""
    if scenario == "idle":
        return _pool(), lambda k: _batch(k, AGENTS)
    position = AGENTS + BUSY_LANES + BUSY_QUEUED
    return _busy_pool(), lambda k: _completions(k, position)


class ScanBeforeEveryGrant:
    """The reference order: next_turn's scan of the whole queue before each grant (also the
    oracle of tests/unit/test_grant_order.py)."""

    def __init__(self, state):
        self.state = state

    def next(self, passed=frozenset()):
        return ordering.next_turn(self.state, passed)


def _scanned_queued_of(self: PoolState, agent_id: str) -> int:
    """The reference count: a scan of the queues per call."""
    turns = self.turns
    return sum(1 for queue in self.queues for turn_id in queue
               if (t := turns.get(turn_id)) is not None and t.agent_id == agent_id and t.status == ev.QUEUED)


@contextlib.contextmanager
def _reference():
    order, queued_of = ordering.GrantOrder, PoolState.queued_of
    # the reference run swaps these implementations in, and back
    ordering.GrantOrder, PoolState.queued_of = ScanBeforeEveryGrant, _scanned_queued_of  # type: ignore[misc, method-assign, assignment]
    try:
        yield
    finally:
        ordering.GrantOrder, PoolState.queued_of = order, queued_of  # type: ignore[misc, method-assign]


def _time(base: PoolState, inputs: list) -> tuple[float, list]:
    state = base.copy()
    started = time.process_time()
    decisions = decide_many(state, inputs, 1.0)
    return time.process_time() - started, decisions


def run(batches: list[int], repeat: int, scenario: str = "idle") -> list[dict]:
    base, batch_of = _setup(scenario)
    rows = []
    for k in batches:
        inputs = batch_of(k)
        ours, reference = [], []
        for _ in range(repeat):   # alternate, so the machine's drift hits both alike
            spent, decisions = _time(base, inputs)
            ours.append(spent)
            with _reference():
                spent_ref, decisions_ref = _time(base, inputs)
            reference.append(spent_ref)
            granted = sum(1 for type_, _ in decisions if type_ == ev.TURN_GRANTED)
            if granted != k or decisions != decisions_ref:
                raise SystemExit(f"batch of {k}: {granted} grants, the reference decided "
                                 f"{'the same' if decisions == decisions_ref else 'otherwise'}")
        ratios = [r / max(o, 1e-9) for r, o in zip(reference, ours)]
        rows.append({"scenario": scenario, "batch": k, "ms": _spread(ours), "reference_ms": _spread(reference),
                     "reference_over_ours": {"median": statistics.median(ratios), "min": min(ratios),
                                             "max": max(ratios)}})
    return rows


def _spread(seconds: list[float]) -> dict:
    ms = [s * 1000 for s in seconds]
    return {"median": statistics.median(ms), "min": min(ms), "max": max(ms)}


def to_markdown(rows: list[dict]) -> str:
    lines = ["| batch (inputs) | decide_many, ms | before (a scan per grant and per request), ms | before / now |",
             "|---|---|---|---|"]
    for r in rows:
        m, b, x = r["ms"], r["reference_ms"], r["reference_over_ours"]
        lines.append(f"| {r['batch']} | {m['median']:.1f} ({m['min']:.1f}-{m['max']:.1f}) "
                     f"| {b['median']:.1f} ({b['min']:.1f}-{b['max']:.1f}) "
                     f"| {x['median']:.1f}x ({x['min']:.1f}-{x['max']:.1f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentrm_bench.decide_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="idle")
    p.add_argument("--batches", help="batch sizes, comma-separated (default: the scenario's)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",")] if args.batches else list(SCENARIOS[args.scenario])
    except ValueError:
        p.error("--batches takes whole numbers separated by commas, e.g. 50,100,200")
    largest = LARGEST[args.scenario]
    if not batches or min(batches) < 1 or max(batches) > largest or args.repeat < 1:
        p.error(f"each batch of scenario {args.scenario} must be 1-{largest}, and --repeat at least 1")
    rows = run(batches, args.repeat, args.scenario)
    print(json.dumps(rows, indent=1) if args.json else to_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

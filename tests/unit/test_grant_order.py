"""GrantOrder (app/domain/ordering.py): a granting pass orders the queue once, in a heap,
and must still grant exactly what asking next_turn before every grant grants. The
reference is that scan (agentrm_bench.decide_cost times the two against each other); both
drive the same random workloads through decide_many, and their whole decision logs must be
equal, byte for byte."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrm_bench.decide_cost import ScanBeforeEveryGrant  # next_turn's scan before every grant
from app.domain import events as ev
from app.domain import ordering

from .examples import examples
from .workload import AGENTS, DEADLINE_SETTINGS, RUNS, SETTINGS, drive, workload

POOLS = {
    "mlfq": SETTINGS,
    "deadline": DEADLINE_SETTINGS,
    # More lanes than agents' turns in flight: a completion batch frees several lanes, so a
    # pass grants many turns from a long queue.
    "deadline, many lanes": replace(DEADLINE_SETTINGS, lanes=12),
    # The output credit: grants spend the small budget below half its capacity and
    # rate_bound flips within a pass, which reorders the queue (no class slack, a credit).
    "deadline, rate-bound order": replace(DEADLINE_SETTINGS, lanes=12, output_credit_per_ktoken=1.0,
                                          output_credit_cap_seconds=3.0),
}


# Crowded batches: many requests queue, then completions free several lanes at once, so a
# pass grants several turns from a long queue while grants spend the small budget across
# half its capacity (the shared workload has few such passes: a few actions per batch).
_request = st.tuples(st.just("request"), st.integers(0, len(AGENTS) - 1), st.integers(0, 8_000),
                     st.integers(0, 4_000), st.booleans(), st.sampled_from(RUNS))
_complete = st.tuples(st.just("complete"), st.integers(0, 60), st.just(ev.OK), st.integers(0, 9_000),
                      st.integers(0, 3_000), st.none())
crowded = st.lists(st.tuples(st.sampled_from([0.0, 0.5, 2.0, 30.0]),
                             st.lists(st.one_of(_request, _complete), min_size=4, max_size=16)), max_size=20)


def _log(batches, pool, order) -> str:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ordering, "GrantOrder", order)
        return json.dumps(drive(batches, pool).log, allow_nan=False)


@settings(max_examples=examples(200), deadline=None)
@given(st.one_of(workload, crowded), st.sampled_from(sorted(POOLS)))
def test_a_pass_grants_what_a_scan_before_every_grant_would(batches, pool):
    reference = _log(batches, POOLS[pool], ScanBeforeEveryGrant)
    assert _log(batches, POOLS[pool], ordering.GrantOrder) == reference


def test_the_workloads_reach_passes_that_grant_several_turns_and_flip_the_bound():
    """The property above compares something: some pass grants several turns in a row, and
    some pass sees rate_bound change between two of its grants."""
    passes: list[list[bool]] = []   # per pass, rate_bound as each of its grants was chosen

    class Watching(ordering.GrantOrder):
        def __init__(self, state):
            super().__init__(state)
            self.bounds: list[bool] = []
            passes.append(self.bounds)

        def next(self, passed=frozenset()):
            turn = super().next(passed)
            if turn is not None:
                self.bounds.append(ordering.rate_bound(self.state))
            return turn

    requests = [("request", i % 4, 900, 3_000, False, None) for i in range(24)]
    completes = [("complete", i, "OK", 900, 100, None) for i in range(12)]
    batches = [(0.0, requests[:12]), (0.5, requests[12:]), (1.0, completes), (30.0, []), (1.0, completes)]
    pool = POOLS["deadline, rate-bound order"]
    watched = _log(batches, pool, Watching)
    assert max(map(len, passes)) >= 2
    assert any(len(set(bounds)) == 2 for bounds in passes)
    # Here the flip changes the answer: a heap not ordered again would grant an interactive
    # turn where the rate-bound order grants by arrival.
    assert watched == _log(batches, pool, ScanBeforeEveryGrant)

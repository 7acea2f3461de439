"""PoolState.queued_of counts an agent's QUEUED turns from an index that apply keeps
(app/domain/state.py). Whatever the workload does to the queues (queue, grant, cancel,
reap, demote, boost), the index must say what a count of the queues says, after every
batch, and a state loaded from its stored form must count the same."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain import events as ev
from app.domain.state import PoolState

from .examples import examples
from .test_grant_order import POOLS, crowded
from .workload import AGENTS, start, to_inputs, workload


def _counted(state: PoolState, agent_id: str) -> int:
    return sum(1 for queue in state.queues for turn_id in queue
               if state.turns[turn_id].agent_id == agent_id and state.turns[turn_id].status == ev.QUEUED)


@settings(max_examples=examples(150), deadline=None)
@given(st.one_of(workload, crowded), st.sampled_from(sorted(POOLS)))
def test_the_index_counts_what_the_queues_hold_after_every_batch(batches, pool):
    run = start(POOLS[pool])
    run.state.queued_of("a0")   # built now, so every later change goes through the index
    for wait, actions in batches:
        run.step(run.now + wait, to_inputs(run, actions))
        for agent_id, _class in AGENTS:
            assert run.state.queued_of(agent_id) == _counted(run.state, agent_id)
    loaded = PoolState.from_dict(json.loads(json.dumps(run.state.to_dict(), allow_nan=False)))
    assert loaded.queued_by_agent is None
    assert [loaded.queued_of(a) for a, _ in AGENTS] == [run.state.queued_of(a) for a, _ in AGENTS]
    assert loaded == run.state   # the index is not state: built or not, the states are equal

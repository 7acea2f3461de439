"""What the fold feeds the learned lane limit (app/domain/apply.py: _lease_extended and
_turn_completed; the rule itself is app/domain/concurrency.py).

- A first chunk is a sample per prompt size, as the start deadline takes it.
- The pool's own adaptive_lanes_minimum bounds the limit from below, and its
  adaptive_lanes_initial is where the limit starts, for samples and completions alike.
- Only an OK completion of a call that does not stream grows the limit (a streaming call
  has reported its first chunk instead), and only with adaptive lanes on: a pool without
  them stores the state it always did."""
from __future__ import annotations

import math

import pytest

from app.domain import events as ev
from app.domain.apply import new_pool
from app.domain.concurrency import LaneLimit
from app.domain.decide import decide
from app.domain.settings import PoolSettings


def pool(**kw):
    s = PoolSettings(**{"lanes": 4, "rpm": 60_000, "tpm": 100_000_000, "lease_seconds": 30.0,
                        "start_timeout_floor_seconds": 5.0, **kw})
    state = new_pool({"settings": s.validate().to_dict(), "at": 0.0})
    decide(state, ev.AGENT_REGISTERED, {"agent_id": "a", "name": "a", "priority_class": ev.INTERACTIVE}, 0.0)
    return state


def request(s, turn_id, now, est=0, streams=True):
    return decide(s, ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": "a", "estimated_tokens": est,
                                         "max_output_tokens": 0, "at": now, "streams": streams}, now)


def beat(s, turn_id, now):
    return decide(s, ev.HEARTBEAT_SENT, {"turn_id": turn_id, "at": now}, now)


def complete(s, turn_id, now, outcome=ev.OK):
    return decide(s, ev.COMPLETION_REPORTED, {"turn_id": turn_id, "outcome": outcome, "prompt_tokens": 0,
                                              "completion_tokens": 10}, now)


def limit_changes(out):
    return [(d["previous"], d["lanes_in_use"]) for t, d in out if t == ev.LANE_LIMIT_CHANGED]


def test_a_first_chunk_is_sampled_per_prompt_size():
    s = pool()
    request(s, "t", 0.0, est=10_000)          # size 1 + 10,000 / 10,000 = 2
    beat(s, "t", 4.0)                          # 4 s to the first chunk: 2 s per unit of size
    assert s.lane_limit.short == s.lane_limit.long == pytest.approx(math.log(2.0))
    assert s.lane_limit.samples == 1


def _slowing_provider(s) -> list[tuple[int, int]]:
    """Sixty streaming calls, one at a time: 20 whose first chunk comes in 0.1 s, then 40 in
    1 s. The slow ones say the provider queues: each cuts the limit by up to 4% until the
    long-run mean has caught up with them (about the 55th call)."""
    now, changes = 0.0, []
    for i in range(60):
        first_chunk = 0.1 if i < 20 else 1.0
        request(s, f"t{i}", now)
        changes += limit_changes(beat(s, f"t{i}", now + first_chunk))
        complete(s, f"t{i}", now + first_chunk + 0.1)
        now += 10.0
    return changes


def test_the_limit_never_falls_below_the_pools_own_minimum():
    # Start at 30 of 100 lanes, minimum 25.
    s = pool(lanes=100, adaptive_lanes_initial=30, adaptive_lanes_minimum=25)
    in_use = [after for _, after in _slowing_provider(s)]
    assert max(in_use) > 30 and in_use[-1] == 25             # it moved up, then down to the minimum
    assert min(in_use) == 25 and s.lanes_in_use() == 25
    assert s.lane_limit.limit == 25.0
    # The same calls in a pool with a lower minimum take the limit below 25.
    low = pool(lanes=100, adaptive_lanes_initial=30, adaptive_lanes_minimum=2)
    _slowing_provider(low)
    assert low.lane_limit.limit < 25.0 and low.lanes_in_use() < 25


def test_completions_of_calls_that_do_not_stream_grow_the_limit_from_the_pools_initial():
    s = pool(lanes=32, adaptive_lanes_initial=4)
    for i in range(4):
        request(s, f"t{i}", 0.0, streams=False)
    assert s.busy_lanes() == 4 and s.lane_limit == LaneLimit()
    out = complete(s, "t0", 1.0)                  # 4 busy of a limit of 4: 4 + 0.2 x 4 = 4.8
    assert s.lane_limit.limit == pytest.approx(4.8) and limit_changes(out) == []
    out = complete(s, "t1", 1.0)                  # 3 busy, at least half of 4.8: 5.6
    assert s.lane_limit.limit == pytest.approx(5.6) and limit_changes(out) == [(4, 5)]
    out = complete(s, "t2", 1.0)                  # 2 busy, under half of 5.6: no evidence
    assert s.lane_limit.limit == pytest.approx(5.6) and limit_changes(out) == []


@pytest.mark.parametrize("streams, outcome", [(True, ev.OK), (True, ev.ERROR), (False, ev.ERROR)])
def test_only_an_ok_completion_of_a_call_that_does_not_stream_grows_the_limit(streams, outcome):
    s = pool(lanes=4, adaptive_lanes_initial=2)
    request(s, "t0", 0.0, streams=streams)
    request(s, "t1", 0.0, streams=streams)
    complete(s, "t0", 1.0, outcome=outcome)       # 2 busy of a limit of 2: it would grow
    assert s.lane_limit == LaneLimit() and "lane_limit" not in s.to_dict()


def test_a_pool_without_adaptive_lanes_learns_no_limit_from_completions():
    s = pool(lanes=1, adaptive_lanes=False)
    request(s, "t0", 0.0, streams=False)
    out = complete(s, "t0", 1.0)
    assert [t for t, _ in out] == [ev.TURN_COMPLETED]
    assert s.lane_limit == LaneLimit() and "lane_limit" not in s.to_dict()
    assert s.lanes_in_use() == 1

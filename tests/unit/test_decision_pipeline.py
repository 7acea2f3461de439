"""DecisionPipeline on the in-memory log: the leader decides while its append is in flight,
the appends stay strictly sequential at exact expected versions, and once one is refused
nothing decided after it reaches the log."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from app.adapters.memory_log import MemoryLog
from app.eventstore.model import ConcurrencyError, NewEvent
from app.scheduler.pipeline import DecisionPipeline
from app.scheduler.writer import LostLeadership

STREAM = "pool-p"


@dataclass
class State:
    version: int
    inputs_through: int = 0
    position: int = 0


class HeldLog(MemoryLog):
    """The in-memory log, whose appends wait until the test lets each one through: an
    append "in flight" for as long as the test needs it to be."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: asyncio.Queue[asyncio.Event] = asyncio.Queue()

    async def append(self, events, expected_versions=None):
        gate = asyncio.Event()
        self.arrived.put_nowait(gate)
        await gate.wait()
        return await super().append(events, expected_versions)


def decision(n: int) -> NewEvent:
    return NewEvent(STREAM, "Decided", {"n": n}, {})


async def started_pool(log: MemoryLog) -> State:
    await MemoryLog.append(log, [NewEvent(STREAM, "PoolCreated", {}, {})])
    return State(version=0)


async def submit(pipeline: DecisionPipeline, state: State, *ns: int) -> None:
    """What the leader does: decide at its state's version, advance it, hand it over."""
    expected = state.version
    state.version += len(ns)
    await pipeline.submit([decision(n) for n in ns], expected)


async def test_decisions_made_while_an_append_is_in_flight_follow_it_in_one_append_in_order():
    log = HeldLog()
    state = await started_pool(log)
    pipeline = DecisionPipeline(log, STREAM, state)
    await submit(pipeline, state, 1)
    first = await asyncio.wait_for(log.arrived.get(), 10)
    await submit(pipeline, state, 2)          # decided while 1 is still in flight
    await submit(pipeline, state, 3, 4)
    assert log.arrived.empty()               # nothing else sent before 1 commits
    first.set()
    second = await asyncio.wait_for(log.arrived.get(), 10)
    second.set()
    await pipeline.flushed()
    recorded = await log.read_stream(STREAM)
    assert [(e.version, e.data.get("n")) for e in recorded] == [(0, None), (1, 1), (2, 2), (3, 3), (4, 4)]
    assert state.position == recorded[-1].position and state.version == 4


async def test_once_an_append_is_refused_nothing_decided_after_it_is_sent():
    log = HeldLog()
    state = await started_pool(log)
    woken = []
    pipeline = DecisionPipeline(log, STREAM, state, on_failure=lambda: woken.append(True))
    await submit(pipeline, state, 1)
    first = await asyncio.wait_for(log.arrived.get(), 10)
    await submit(pipeline, state, 2)
    # Another writer takes version 1 while our first append is in flight: its expected
    # version no longer holds. Had the second been sent, it would find version 1, the
    # one its own expectation names, and land on top of the other writer's state.
    await MemoryLog.append(log, [NewEvent(STREAM, "Foreign", {}, {})], {STREAM: 0})
    first.set()
    with pytest.raises(ConcurrencyError):
        await pipeline.flushed()
    assert woken == [True]
    assert log.arrived.empty()
    assert [e.type for e in await log.read_stream(STREAM)] == ["PoolCreated", "Foreign"]
    with pytest.raises(ConcurrencyError):
        await submit(pipeline, state, 3)


async def test_a_leader_whose_lease_is_over_sends_nothing_more():
    log = MemoryLog()
    state = await started_pool(log)
    leading = [True]
    pipeline = DecisionPipeline(log, STREAM, state, leading=lambda: leading[0])
    await submit(pipeline, state, 1)
    await pipeline.flushed()
    leading[0] = False
    await submit(pipeline, state, 2)
    with pytest.raises(LostLeadership):
        await pipeline.flushed()
    assert [e.data.get("n") for e in await log.read_stream(STREAM)] == [None, 1]


async def test_close_drops_what_is_not_sent_and_lets_the_append_in_flight_finish():
    log = HeldLog()
    state = await started_pool(log)
    pipeline = DecisionPipeline(log, STREAM, state)
    await submit(pipeline, state, 1)
    first = await asyncio.wait_for(log.arrived.get(), 10)
    await submit(pipeline, state, 2)
    closing = asyncio.create_task(pipeline.close())
    first.set()
    await asyncio.wait_for(closing, 10)
    assert [e.data.get("n") for e in await log.read_stream(STREAM)] == [None, 1]
    assert log.arrived.empty()

"""Wake-ups that name how far the log has grown (app/eventstore/wakeups.py), and the
followers that use them to skip reads: a follower handed its own process's appends must not
read the log for them, one woken by a position past its own must read up to it without
asking for the head, and a wake-up that names nothing must still make it read."""
from __future__ import annotations

import asyncio

import pytest

from app.adapters.memory_log import MemoryLog
from app.eventstore.model import NewEvent
from app.eventstore.subscription import subscribe
from app.eventstore.wakeups import GenerationWakeups
from app.scheduler.inbox import LogInbox
from app.tasks import cancel_all
from tests.counting_log import CountingLog

SETTLE = 10.0  # a bound on waiting for an event, never a measured duration


def test_known_head_only_when_every_wake_up_since_named_a_position():
    w = GenerationWakeups()
    assert w.known_head(None) is None          # a follower that never read must read
    seen = w.blind
    w.poke(position=7)
    w.poke(position=5)                          # a late NOTIFY never moves the head back
    assert w.known_head(seen) == 7
    w.poke()                                    # the safety net: names nothing
    assert w.known_head(seen) is None
    assert w.known_head(w.blind) == 7           # after the follower's next read


def test_a_poke_with_recorded_events_names_the_last_position():
    w = GenerationWakeups()

    class Recorded:
        def __init__(self, position):
            self.position = position
    w.poke([Recorded(3), Recorded(4)])
    assert (w.head, w.blind, w.generation) == (4, 0, 1)
    w.poke([])                                  # nothing recorded: names nothing
    assert w.blind == 1


async def wait_for(predicate) -> None:
    async with asyncio.timeout(SETTLE):
        while not predicate():
            await asyncio.sleep(0)


async def test_an_inbox_handed_its_own_appends_reads_nothing():
    log = MemoryLog()
    counted = CountingLog(log)
    inbox = LogInbox(counted, log, 0, types=["In"], relevant=lambda e: True)
    log.on_append(inbox.offer)
    task = asyncio.create_task(inbox.follow())
    try:
        await wait_for(lambda: counted.heads == 1)   # its first look
        for n in range(30):
            await log.append([NewEvent("turn-1", "In", {"n": n}, {})])
            await asyncio.sleep(0)
        await wait_for(lambda: inbox.queue.qsize() == 30)
        for _ in range(5):
            await asyncio.sleep(0)                   # let every wake-up be looked at
        assert (counted.heads, counted.reads) == (1, 0)
        assert [inbox.queue.get_nowait().data["n"] for _ in range(30)] == list(range(30))
        log.poke()                                   # names nothing: the inbox must look
        await wait_for(lambda: counted.heads == 2)
        assert counted.reads == 0                    # and finds it has everything
    finally:
        await cancel_all([task])


async def test_an_inbox_reads_up_to_a_named_position_it_was_not_handed():
    log = MemoryLog()
    counted = CountingLog(log)
    inbox = LogInbox(counted, log, 0, types=["In"], relevant=lambda e: True)
    task = asyncio.create_task(inbox.follow())       # no offer: as for another process's appends
    try:
        await wait_for(lambda: counted.heads == 1)
        await log.append([NewEvent("turn-1", "In", {"n": 1}, {}), NewEvent("turn-1", "In", {"n": 2}, {})])
        await wait_for(lambda: inbox.queue.qsize() == 2)
        assert counted.heads == 1 and counted.reads == 1   # read up to the named head, no head()
        assert inbox.seen == 2
    finally:
        await cancel_all([task])


async def test_a_filtered_subscription_reads_once_per_wake_up_and_misses_nothing():
    log = MemoryLog()
    counted = CountingLog(log)
    got = []

    async def consume():
        async for e in subscribe(counted, log, 0, types=["Wanted"]):
            got.append(e.data["n"])
    task = asyncio.create_task(consume())
    try:
        await wait_for(lambda: counted.heads == 1)
        for n in range(10):
            await log.append([NewEvent("thing-1", "Wanted" if n % 3 == 0 else "Other", {"n": n}, {})])
        await wait_for(lambda: got == [0, 3, 6, 9])
        assert counted.heads == 1                    # every wake-up named its position
        assert counted.reads <= 10
    finally:
        await cancel_all([task])


async def test_a_cancel_in_the_same_pass_as_a_wake_up_is_not_lost():
    """A follower being stopped as a wake-up arrives must stop, not read on: Python 3.11's
    wait_for returned the wake-up and dropped the cancel, and a scheduler stepping down then
    sat in its teardown, still counted as leading, until a later cancel landed."""
    wakeups = GenerationWakeups()
    waiting = asyncio.create_task(wakeups.wait(wakeups.generation, timeout=60))
    await asyncio.sleep(0)        # the follower is waiting
    wakeups.poke(position=1)      # a commit wakes it ...
    waiting.cancel()              # ... in the very pass in which it is told to stop
    with pytest.raises(asyncio.CancelledError):
        await waiting

"""LogInbox on the in-memory log: every relevant event after its start, in order, exactly
once, whether it came in through this process's appends (offer) or a read of the log."""
from __future__ import annotations

import asyncio

import pytest

from app.adapters.memory_log import MemoryLog
from app.eventstore.model import NewEvent
from app.scheduler.inbox import LogInbox
from app.tasks import cancel_all

SETTLE = 10.0  # a bound on waiting for an event, never a measured duration
TYPES = ["In", "Sentinel"]


def event(type_: str, pool: str = "p", n: int = 0) -> NewEvent:
    return NewEvent(f"turn-{pool}{n}", type_, {"pool": pool, "n": n}, {})


def relevant(recorded) -> bool:
    return recorded.data.get("pool") == "p"


async def drain_until_sentinel(inbox: LogInbox) -> list:
    got = []
    while True:
        item = await asyncio.wait_for(inbox.queue.get(), SETTLE)
        if item.type == "Sentinel":
            return got
        got.append(item)


@pytest.fixture
async def following():
    tasks = []

    def start(inbox: LogInbox) -> LogInbox:
        tasks.append(asyncio.create_task(inbox.follow()))
        return inbox
    yield start
    await cancel_all(tasks)


async def test_follow_reads_what_others_appended_after_its_start_once_in_order(following):
    log = MemoryLog()
    before = await log.append([event("In", n=0)])  # before the inbox's start: not delivered
    inbox = following(LogInbox(log, log, before[-1].position, types=TYPES, relevant=relevant))
    await log.append([event("In", n=1), event("In", pool="q", n=2), event("Other", n=3)])
    await log.append([event("In", n=4)])
    await log.append([event("Sentinel")])
    got = await drain_until_sentinel(inbox)
    assert [e.data["n"] for e in got] == [1, 4]   # not another pool's, not a type it does not follow
    assert inbox.queue.empty()
    assert inbox.seen == await log.head()


async def test_offer_takes_own_appends_that_follow_directly_and_never_twice(following):
    log = MemoryLog()
    inbox = LogInbox(log, log, 0, types=TYPES, relevant=relevant)
    log.on_append(inbox.offer)
    first = await log.append([event("In", n=1), event("In", pool="q", n=2)])
    # Taken synchronously, before any read: the next positions, without a gap.
    taken = inbox.queue.get_nowait()
    assert taken.data["n"] == 1 and inbox.queue.empty()
    assert inbox.seen == first[-1].position
    inbox.offer(first)  # offered again (a second hook, a replay): nothing new
    assert inbox.queue.empty()
    following(inbox)
    await log.append([event("Sentinel")])
    assert await drain_until_sentinel(inbox) == []  # the read skipped what offer took
    assert inbox.queue.empty()


async def test_an_offer_after_a_gap_is_left_to_the_read(following):
    log = MemoryLog()
    inbox = LogInbox(log, log, 0, types=TYPES, relevant=relevant)
    unseen = await log.append([event("In", n=1)])      # not offered: another process's append
    mine = await log.append([event("In", n=2)])
    inbox.offer(mine)                                  # position 2 while 1 was not seen: refused
    assert inbox.queue.empty() and inbox.seen == 0
    following(inbox)
    await log.append([event("Sentinel")])
    got = await drain_until_sentinel(inbox)
    assert [e.position for e in got] == [unseen[0].position, mine[0].position]

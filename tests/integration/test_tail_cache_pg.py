"""The store's tail cache on PostgreSQL: a process's followers woken by another process's
commit share one read of the log, and every read the cache answers is the one the
database gives, through commits of both processes and rolled-back positions."""
from __future__ import annotations

import asyncio
import random

import pytest

from app.eventstore.listener import LogListener
from app.eventstore.model import NewEvent
from app.eventstore.store import EventStore, create_pool
from app.projections.runner import Projector
from app.scheduler.inbox import LogInbox
from app.tasks import cancel_all

SETTLE = 20.0  # a bound on waiting for an event, never a measured duration


@pytest.fixture
async def two_processes(fresh_database):
    pools = [await create_pool(fresh_database) for _ in range(2)]
    listener = LogListener(fresh_database, poll_interval=600)   # no safety-net wake-ups
    await listener.start()
    ours, theirs = EventStore(pools[0]), EventStore(pools[1])
    ours.use_wakeups(listener)
    yield ours, theirs, listener
    await listener.stop()
    for p in pools:
        await p.close()


def count_log_reads(store: EventStore) -> list[int]:
    """Count the store's own reads of the database (not the ones the cache answers)."""
    calls, read_log = [0], store._read_log

    async def counted(*args, **kwargs):
        calls[0] += 1
        return await read_log(*args, **kwargs)
    store._read_log = counted
    return calls


async def until(predicate) -> None:
    async with asyncio.timeout(SETTLE):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_followers_woken_by_another_process_share_one_read(two_processes):
    ours, theirs, listener = two_processes
    await theirs.append([NewEvent("pool-p", "Made", {"n": 0}, {})])
    start = await ours.head()
    projector = Projector(ours, listener, documents=None)
    await projector.load()
    inboxes = [LogInbox(ours, listener, start, types=types, relevant=lambda e: True)
               for types in (["Asked"], ["Made"], ["Asked", "Other"])]
    tasks = [asyncio.create_task(i.follow()) for i in inboxes]
    tasks.append(asyncio.create_task(projector._follow()))
    try:
        # The first wake-up after start names no position: each follower looks at the
        # log on its own once. Then only NOTIFYs.
        await until(lambda: listener.known_head(listener.blind) == start)
        await asyncio.sleep(0.2)
        reads = count_log_reads(ours)
        for n in range(1, 6):
            recorded = await theirs.append([NewEvent(f"turn-{n}", "Asked", {"n": n}, {}),
                                            NewEvent("pool-p", "Other", {"n": n}, {})])
            await until(lambda: projector.model.position == recorded[-1].position
                        and all(i.seen == recorded[-1].position for i in inboxes))
        # Four followers, five commits of another process: one read of the log per commit
        # (each follower alone made its own: twenty).
        assert reads[0] == 5
        queued = [[i.queue.get_nowait() for _ in range(i.queue.qsize())] for i in inboxes]
        assert [e.data["n"] for e in queued[0]] == [1, 2, 3, 4, 5]
        assert queued[1] == []
        assert [(e.type, e.data["n"]) for e in queued[2]] == [(t, n) for n in range(1, 6)
                                                              for t in ("Asked", "Other")]
    finally:
        await cancel_all(tasks)


async def test_what_the_cache_answers_is_what_the_database_answers(two_processes):
    ours, theirs, _listener = two_processes
    rng = random.Random(7)
    types = ["A", "B", "C"]
    for step in range(120):
        kind = rng.choice(["ours", "ours", "theirs", "rollback", "read"])
        events = [NewEvent(f"{rng.choice(['turn', 'pool'])}-{rng.randrange(3)}", rng.choice(types),
                           {"step": step, "i": i}, {}) for i in range(rng.randint(1, 3))]
        if kind == "ours":
            await ours.append(events)
        elif kind == "theirs":
            await theirs.append(events)
        elif kind == "rollback":   # its positions are drawn, then gone for good
            async with theirs.pool.acquire() as conn:
                tx = conn.transaction()
                await tx.start()
                await theirs.append(events, conn=conn)
                await tx.rollback()
        head = await theirs.head()
        if not head:
            continue
        # A follower asks up to a position it was told of, from somewhere behind it.
        up_to = rng.randint(max(1, head - 8), head)
        after = rng.randint(max(0, up_to - 10), up_to)
        kwargs = rng.choice([{}, {"types": [rng.choice(types)]}, {"categories": ["pool"]},
                             {"streams": ["turn-1", "pool-2"]}])
        limit = rng.randint(1, 6)
        got = await ours.read(after, limit, up_to=up_to, **kwargs)
        want = await theirs._read_log(after, limit, up_to=up_to, **kwargs)
        assert [(e.position, e.stream, e.version, e.type, e.data, e.metadata, e.recorded_at) for e in got] == \
               [(e.position, e.stream, e.version, e.type, e.data, e.metadata, e.recorded_at) for e in want]
    assert ours.tail.hi is not None   # the cache did answer

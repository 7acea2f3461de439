"""The store's tail cache on PostgreSQL: a process's followers woken by another process's
commit share one read of the log, or none when the commit's NOTIFY carried its events; and
every read the cache answers is the one the database gives, through commits of both
processes, rolled-back positions and commits too large to carry."""
from __future__ import annotations

import asyncio
import random

from app.eventstore.model import NewEvent
from app.eventstore.store import EventStore
from app.projections.runner import Projector
from app.scheduler.inbox import LogInbox
from app.tasks import cancel_all
from tests.waiting import until


def count_log_reads(store: EventStore) -> list[int]:
    """Count the store's own reads of the database (not the ones the cache answers)."""
    calls, read_log = [0], store._read_log

    async def counted(*args, **kwargs):
        calls[0] += 1
        return await read_log(*args, **kwargs)
    store._read_log = counted
    return calls


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
        reads = None
        for n in range(1, 6):
            recorded = await theirs.append([NewEvent(f"turn-{n}", "Asked", {"n": n}, {}),
                                            NewEvent("pool-p", "Other", {"n": n}, {})])
            await until(lambda recorded=recorded: projector.model.position == recorded[-1].position
                        and all(i.seen == recorded[-1].position for i in inboxes))
            if reads is None:
                # Every follower has read the first commit, so each has made its own first
                # look at the log (the first wake-up after a start names no position).
                reads = count_log_reads(ours)
        # Four followers, four more commits of another process. Each follower alone would
        # read the log on each commit (sixteen reads), sharing one read per commit; with
        # each commit carried by its NOTIFY, at most the read that gives the cache its start.
        assert reads[0] <= 1
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
        assert as_tuples(got) == as_tuples(want)
    assert ours.tail.hi is not None   # the cache did answer


def as_tuples(events):
    # repr: an integer read back as a float would still compare equal
    return [(e.position, e.stream, e.version, e.type, repr(e.data), repr(e.metadata), e.recorded_at) for e in events]


async def test_a_notify_carries_what_a_read_returns(two_processes):
    ours, theirs, listener = two_processes
    carried = []
    listener.on_commit(carried.append)
    odd = {"float": 0.1, "big": 2**70, "nested": {"b": [1, "two", None, True, 3e18]}, "text": "ünï \u2028 \"q\""}
    first = await theirs.append([NewEvent("turn-1", "Asked", odd, {"actor": "a", "n": 1.5}),
                                 NewEvent("pool-p", "Made", {}, {})])
    await until(lambda: carried)
    assert as_tuples(carried[0]) == as_tuples(await theirs._read_log(first[0].position - 1, 10))
    assert str(carried[0][0].recorded_at) == str(first[0].recorded_at)   # the same instant and zone

    # What a commit hands over in its own process is what the table gives back, key order
    # and types included.
    mine = await ours.append([NewEvent("turn-9", "Asked", odd, {"z": 1, "actor": "b"}),
                              NewEvent("turn-9", "Asked", {"zz": 1, "a": 2, "é": 3, "b": 4, "huge": 1e20,
                                                           "neg": -2.5e17, "edge": 9999999999999998.0,
                                                           "tiny": 1.5e-07}, {})])
    assert as_tuples(mine) == as_tuples(await theirs._read_log(mine[0].position - 1, 2))
    await until(lambda: len(carried) == 2)   # its NOTIFY reaches our listener too
    assert as_tuples(carried[1]) == as_tuples(mine)
    carried.clear()
    first = mine
    await ours.read(0, 10, up_to=first[-1].position)   # the cache's start
    reads = count_log_reads(ours)

    # Too large for one NOTIFY: the payload names the position only, and a follower reads.
    big = await theirs.append([NewEvent("turn-2", "Asked", {"text": "x" * 9000}, {})])
    await until(lambda: listener.known_head(listener.blind) == big[-1].position)
    assert carried == []
    got = await ours.read(first[-1].position, 10, up_to=big[-1].position)
    assert as_tuples(got) == as_tuples(big) and reads[0] == 1
    # A small one again: carried, and answered without a read.
    small = await theirs.append([NewEvent("turn-3", "Asked", {"n": 3}, {})])
    await until(lambda: len(carried) == 1)
    got = await ours.read(big[-1].position, 10, up_to=small[-1].position)
    assert as_tuples(got) == as_tuples(small) and reads[0] == 1

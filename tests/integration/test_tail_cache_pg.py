"""The store's tail cache on PostgreSQL: a process's followers woken by another process's
commit share one read of the log, or none when the commit's NOTIFY carried its events; and
every read the cache answers is the one the database gives, through commits of both
processes, rolled-back positions and commits too large to carry."""
from __future__ import annotations

import asyncio
import random


from app.eventstore.listener import LogListener
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
            await until(lambda: projector.model.position == recorded[-1].position
                        and all(i.seen == recorded[-1].position for i in inboxes))
            if reads is None:
                # Every follower has read the first commit, so each has made its own first
                # look at the log (the first wake-up after a start names no position).
                reads = count_log_reads(ours)
        # Four followers, four more commits of another process. Each follower alone read
        # the log on each commit (sixteen reads); sharing, one read per commit; now at most
        # the read that gives the cache its start, and each commit came with its NOTIFY.
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
    # and types included. Its NOTIFY carries the same to a listener of another process; ours
    # wakes on it without decoding it (it holds the commit already).
    other = LogListener(listener.url, poll_interval=600)
    elsewhere = []
    other.on_commit(elsewhere.append)
    await other.start()
    try:
        mine = await ours.append([NewEvent("turn-9", "Asked", odd, {"z": 1, "actor": "b"}),
                                  NewEvent("turn-9", "Asked", {"zz": 1, "a": 2, "é": 3, "b": 4, "huge": 1e20,
                                                               "neg": -2.5e17, "edge": 9999999999999998.0,
                                                               "tiny": 1.5e-07, "e23": 1e23}, {})])
        assert as_tuples(mine) == as_tuples(await theirs._read_log(mine[0].position - 1, 2))
        await until(lambda: elsewhere and listener.known_head(listener.blind) == mine[-1].position)
        assert as_tuples(elsewhere[0]) == as_tuples(mine)
        assert len(carried) == 1   # only theirs: ours was not decoded again
    finally:
        await other.stop()
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


async def test_a_commit_too_large_for_one_notify_is_carried_in_chunks(two_processes):
    """Migration 0008: a commit whose events exceed one payload goes out in several NOTIFYs,
    each a run of consecutive positions, and another process's tail cache takes all of them
    without a read; an event too large for any payload is named by its position, and the
    chunks after it wait for the one read it causes."""
    ours, theirs, listener = two_processes
    carried = []
    listener.on_commit(carried.append)
    start = await theirs.append([NewEvent("pool-p", "Made", {}, {})])
    await until(lambda: carried)
    await ours.read(0, 10, up_to=start[-1].position)   # the cache's start
    carried.clear()
    reads = count_log_reads(ours)

    group = [NewEvent(f"turn-{i}", "Asked", {"i": i, "text": "y" * 500}, {"actor": "a"}) for i in range(40)]
    recorded = await theirs.append(group)   # about 23 kB of events: four or five payloads
    await until(lambda: sum(len(c) for c in carried) == 40)
    assert len(carried) >= 4
    assert [e.position for c in carried for e in c] == [e.position for e in recorded]
    for chunk in carried:
        assert [e.position for e in chunk] == list(range(chunk[0].position, chunk[-1].position + 1))
    got = await ours.read(start[-1].position, 100, up_to=recorded[-1].position)
    assert as_tuples(got) == as_tuples(recorded) and reads[0] == 0

    # One event past any payload in the middle: the chunks before it are carried, it is named,
    # and the chunk after it is held until the read it causes.
    carried.clear()
    mixed = [NewEvent("turn-a", "Asked", {"text": "a" * 3000}, {}), NewEvent("turn-b", "Asked", {"text": "b" * 9000}, {}),
             NewEvent("turn-c", "Asked", {"text": "c" * 3000}, {})]
    recorded = await theirs.append(mixed)
    await until(lambda: listener.known_head(listener.blind) == recorded[-1].position and len(carried) == 2)
    assert [[e.position for e in c] for c in carried] == [[recorded[0].position], [recorded[2].position]]
    got = await ours.read(recorded[0].position - 1, 10, up_to=recorded[-1].position)
    assert as_tuples(got) == as_tuples(recorded) and reads[0] == 1
    assert ours.tail.hi == recorded[-1].position   # the held chunk joined after the read

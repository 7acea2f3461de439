"""Wake-ups that name positions, on PostgreSQL: the NOTIFY of another process's append
carries its last position, so a follower reads up to it without asking for the head; this
process's own appends are handed to the follower before the NOTIFY of the same commit can
make it read them."""
from __future__ import annotations

import asyncio

from app.eventstore.model import NewEvent
from app.scheduler.inbox import LogInbox
from app.tasks import cancel_all
from tests.counting_log import CountingLog
from tests.waiting import until


async def test_a_notify_names_the_position_to_read_up_to(two_processes):
    ours, theirs, listener = two_processes
    counted = CountingLog(ours)
    inbox = LogInbox(counted, listener, await ours.head(), types=["In"], relevant=lambda e: True)
    task = asyncio.create_task(inbox.follow())
    try:
        await until(lambda: counted.heads == 1)
        recorded = await theirs.append([NewEvent("turn-1", "In", {"n": 1}, {}), NewEvent("turn-2", "In", {"n": 2}, {})])
        await until(lambda: inbox.queue.qsize() == 2)
        assert listener.known_head(listener.blind) == recorded[-1].position
        assert counted.heads == 1          # no head(): the NOTIFY named it
        assert [inbox.queue.get_nowait().data["n"] for _ in range(2)] == [1, 2]
    finally:
        await cancel_all([task])


async def test_own_appends_are_handed_over_without_reads(two_processes):
    ours, _theirs, listener = two_processes
    counted = CountingLog(ours)
    inbox = LogInbox(counted, listener, await ours.head(), types=["In"], relevant=lambda e: True)
    ours.on_append(inbox.offer)
    task = asyncio.create_task(inbox.follow())
    try:
        await until(lambda: counted.heads == 1)

        async def appender(k: int) -> None:
            for n in range(25):
                await ours.append([NewEvent(f"turn-{k}", "In", {"n": n}, {})])
        await asyncio.gather(*(appender(k) for k in range(2)))
        last = await ours.head()
        # Each commit was offered before its append returned: all 50 are queued already.
        assert inbox.queue.qsize() == 50
        await until(lambda: listener.known_head(listener.blind) == last)   # every NOTIFY is in
        # Each commit is handed over before its NOTIFY can wake the inbox, as a rule: a
        # NOTIFY that arrives a whole loop pass before the commit's answer may still cost a
        # read (a few of 50 on a busy machine). Before, every commit cost a head() for its
        # own poke and another for its NOTIFY: about 100 here.
        assert counted.heads == 1 and counted.reads <= 25
    finally:
        await cancel_all([task])

"""One writer per pool: a second scheduler waits on the advisory lock, takes over when
the leader dies, and two writers can never both append to a pool stream."""
from __future__ import annotations

import asyncio

import pytest

from app.auth import OPERATOR, Principal
from app.domain import events as ev
from app.eventstore.model import ConcurrencyError, NewEvent
from app.runtime import Runtime
from app.domain.settings import PoolSettings


async def test_standby_takes_over_when_the_leader_dies(fresh_database):
    a = await Runtime(fresh_database).start(PoolSettings(lanes=2))
    b = await Runtime(fresh_database).start()
    try:
        await asyncio.wait_for(a.supervisor.schedulers["default"].leading.wait(), 10)
        await asyncio.sleep(0.3)
        assert not b.supervisor.schedulers["default"].leading.is_set()
        agent, _token = await a.service.register_agent(OPERATOR, "survivor")
        me = Principal("agent", agent["agent_id"])
        turn = await b.service.request_turn(me, 10, 10, wait_seconds=5)   # any worker serves
        assert turn["status"] == ev.GRANTED
        await a.stop()                                                     # the leader dies
        await asyncio.wait_for(b.supervisor.schedulers["default"].leading.wait(), 10)
        done = await b.service.complete_turn(me, turn["turn_id"], ev.OK, 10, 10)
        assert done["status"] == ev.COMPLETED
        again = await b.service.request_turn(me, 10, 10, wait_seconds=5)
        assert again["status"] == ev.GRANTED
        from app.replay import replay_check
        report = await replay_check(b.store, b.projector)   # two writers' history, one truth
        assert report.matches, report.differences
    finally:
        await b.stop()


async def test_a_second_writer_cannot_append_at_the_same_version(fresh_database):
    rt = await Runtime(fresh_database, run_schedulers=False).start()
    try:
        version = await rt.store.stream_version("pool-default")
        first = NewEvent("pool-default", ev.POOL_RESUMED, {"at": 1.0})
        await rt.store.append([first], {"pool-default": version})
        with pytest.raises(ConcurrencyError):
            await rt.store.append([first], {"pool-default": version})
    finally:
        await rt.stop()

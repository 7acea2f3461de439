"""Workers share the saving of the read models (app/projections/runner.py, SHARED_SAVES):
one saves, the others leave it to it while its checkpoint moves, and take over when it
stands still. The stored documents are always those of the checkpoint's position, and a
worker that leaves the saving still lets its finished turns leave memory.

Saves are driven by hand (the periodic loop is off), so each step is one round."""
from __future__ import annotations

import json

from app.auth import OPERATOR, Principal
from app.bootstrap import Runtime
from app.domain import events as ev
from app.domain.settings import PoolSettings
from app.eventstore.store import json_text
from app.projections.core import PROJECTIONS
from app.projections.runner import CHECKPOINT, Projector, load_docs
from app.replay import rebuild


async def _no_periodic_saves(self) -> None:
    return None


async def _turns(rt, me, n: int) -> None:
    for _ in range(n):
        turn = await rt.service.request_turn(me, 10, 10, wait_seconds=10)
        assert turn["status"] == ev.GRANTED
        assert (await rt.service.complete_turn(me, turn["turn_id"], ev.OK, 10, 10))["status"] == ev.COMPLETED


async def _stored(rt) -> tuple[int, dict]:
    async with rt.db.acquire() as conn:
        position = await conn.fetchval("SELECT position FROM projection_checkpoints WHERE name = $1",
                                       CHECKPOINT)
        return position, await load_docs(conn, PROJECTIONS)


async def _rebuilt(rt, position: int) -> dict:
    """Every document as the log gives it at `position`, as the database gives it back."""
    model, _ = await rebuild(rt.store, up_to=position)
    return {k: json.loads(json_text(v)) for k, v in model.all_docs().items()}


async def test_one_worker_saves_the_others_leave_it_and_take_over(fresh_database, monkeypatch):
    monkeypatch.setattr(Projector, "_persist_loop", _no_periodic_saves)
    monkeypatch.setattr(Projector, "KEEP_FINISHED", 2)
    rt = await Runtime(fresh_database).start(PoolSettings(lanes=2))
    try:
        view, _ = await rt.service.register_agent(OPERATOR, "busy")
        me = Principal("agent", view["agent_id"])
        a, b = Projector(rt.store, rt.listener), Projector(rt.store, rt.listener)
        await a.load()
        await b.load()
        await _turns(rt, me, 3)
        for worker in (a, b):   # each writes once: neither has seen another save yet
            await _turns(rt, me, 1)
            await worker.catch_up()
            assert await worker._periodic_persist()
        await _turns(rt, me, 3)
        await a.catch_up()
        assert not await a._periodic_persist()   # b saved since a's last look: a leaves it
        assert (await _stored(rt))[0] < a.model.position and a._left
        await b.catch_up()
        assert await b._periodic_persist()       # the checkpoint b saw is its own: b saves
        position, docs = await _stored(rt)
        assert position == b.model.position and docs == await _rebuilt(rt, position)

        # a's unsaved documents are in b's save: dropped, and a's finished turns can go.
        assert not await a._periodic_persist()
        assert a._left == [] and not a.model.dirty
        assert len(a.model.finished) == 2

        # b stops saving: once the checkpoint has stood still for two of a's looks (one
        # could be a save of b's still on its way), a takes over.
        await _turns(rt, me, 2)
        await a.catch_up()
        assert not await a._periodic_persist() and (await _stored(rt))[0] < a.model.position
        assert await a._periodic_persist()
        position, docs = await _stored(rt)
        assert position == a.model.position and docs == await _rebuilt(rt, position)
    finally:
        await rt.stop()

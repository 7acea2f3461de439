"""Finished turns leave the worker's memory once their documents are persisted; their
history stays in the log and the read models, where a client asking about one finds it."""
from __future__ import annotations

import pytest

from app.auth import OPERATOR, Principal
from app.bootstrap import Runtime
from app.domain import events as ev
from app.domain.settings import PoolSettings
from app.errors import Conflict
from app.projections.runner import Projector
from app.replay import replay_check

KEEP = 3


async def test_finished_turns_leave_memory_and_come_back_when_asked_for(fresh_database, monkeypatch):
    monkeypatch.setattr(Projector, "KEEP_FINISHED", KEEP)
    rt = await Runtime(fresh_database).start(PoolSettings(lanes=2))
    try:
        view, _ = await rt.service.register_agent(OPERATOR, "busy")
        me = Principal("agent", view["agent_id"])
        finished = []
        for _ in range(12):
            turn = await rt.service.request_turn(me, 10, 10, wait_seconds=10)
            assert turn["status"] == ev.GRANTED
            done = await rt.service.complete_turn(me, turn["turn_id"], ev.OK, 10, 10)
            assert done["status"] == ev.COMPLETED
            finished.append(done)
        still_open = await rt.service.request_turn(me, 10, 10, wait_seconds=10)
        await rt.projector.persist()
        model = rt.projector.model
        assert len(model.finished) == KEEP and len(model.turns) == KEEP + 1
        assert len(model.histories) == KEEP + 1 and still_open["turn_id"] in model.turns
        oldest = finished[0]
        assert oldest["turn_id"] not in model.turns

        # Asked about, it comes back from the read model, exactly as it was.
        await rt.service.recall_turn(oldest["turn_id"])
        assert rt.service.visible_turn(me, oldest["turn_id"]) == oldest
        # A late retry of its completion is told the truth, not "no such turn".
        await rt.projector.persist()
        assert finished[1]["turn_id"] not in model.turns
        with pytest.raises(Conflict, match="already completed"):
            await rt.service.complete_turn(me, finished[1]["turn_id"], ev.OK, 10, 10)

        report = await replay_check(rt.store, rt.projector)   # the read models hold every turn
        assert report.matches, report.differences
    finally:
        await rt.stop()

    # A restarted worker loads the open turns only.
    again = await Runtime(fresh_database).start()
    try:
        assert set(again.projector.model.turns) == {still_open["turn_id"]}
        await again.service.recall_turn(oldest["turn_id"])
        assert again.projector.model.turns[oldest["turn_id"]] == oldest
    finally:
        await again.stop()

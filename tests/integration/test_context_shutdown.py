"""A stopped context service leaves nothing running: the embedding lane's threads and the
background model's child process end with it, and a start brings them back."""
from __future__ import annotations

import os
import uuid

from app.auth import Principal
from app.context.service import ContextService
from tests.client import register


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_stop_ends_the_lane_threads_and_the_model_process(server, operator):
    agent_id, _ = await register(operator, f"stop_{uuid.uuid4().hex[:6]}", budget=8192)
    service = ContextService(server.runtime.service, embeddings=server.runtime.context.embeddings)
    agent = Principal("agent", agent_id)
    await service.start()
    try:
        await service.append(agent, [("user", "The staging database listens on port 6543.", False),
                                     ("assistant", "Noted: staging on 6543, production unchanged.", False)])
        assert await service.index_pending() == 2          # embedded in the child process
        view = await service.view(agent, None, 2000, "which port does staging use?")  # a query, in process
        assert any("6543" in item.content for item in view.items)
        workers = service.lane.workers
        child = service.background_model.pid()
        assert len(workers) == 2 and all(w.is_alive() for w in workers) and _alive(child)
    finally:
        await service.stop()
    assert not any(w.is_alive() for w in workers) and service.lane.workers == []
    assert not _alive(child) and not service.background_model.running

    await service.start()                                   # stopped, then started again
    try:
        await service.append(agent, [("user", "Production listens on port 5432.", False)])
        assert await service.index_pending() == 1
        assert service.background_model.pid() != child
    finally:
        await service.stop()
    assert service.lane.workers == [] and not service.background_model.running

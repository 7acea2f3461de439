"""A stopped context service leaves nothing running: the embedding lane's threads and the
background model's and the fact extractor's child processes end with it, and a start
brings them back."""
from __future__ import annotations

import os
import uuid

from app.auth import Principal
from app.context.service import ContextService
from tests.client import register
from tests.unit.test_context_model_process import _alive


async def test_stop_ends_the_lane_threads_and_the_model_process(server, operator):
    agent_id, _ = await register(operator, f"stop_{uuid.uuid4().hex[:6]}", budget=8192)
    service = ContextService(server.runtime.service, embeddings=server.runtime.context.embeddings)
    agent = Principal("agent", agent_id)
    await service.start()
    try:
        await service.append(agent, [("user", "The staging database listens on port 6543.", False),
                                     ("assistant", "Noted: staging on 6543, production unchanged.", False)])
        # This service's pass over the agents it appended to. The shared test server's own
        # indexer may store them first (its periodic pass covers every agent), so what is
        # checked is that they are stored, and that this service's background work runs in
        # its child process.
        await service.index_pending(only_appended=True)
        assert (await service.embeddings.stored_through_many([agent_id]))[agent_id] == 2
        assert (await service.lane.embed_background(["warm the background worker"])).shape == (1, 384)
        view = await service.view(agent, None, 2000, "which port does staging use?")  # a query, in process
        assert any("6543" in item.content for item in view.items)
        workers = service.lane.workers
        child = service.background_model.pid()
        facts_child = service.fact_process.pid()
        assert len(workers) == 2 and all(w.is_alive() for w in workers) and _alive(child)
        assert _alive(facts_child) and facts_child not in (child, os.getpid())
    finally:
        await service.stop()
    assert not any(w.is_alive() for w in workers) and service.lane.workers == []
    assert not _alive(child) and not service.background_model.running
    assert not _alive(facts_child) and not service.fact_process.running

    await service.start()                                   # stopped, then started again
    try:
        await service.append(agent, [("user", "Production listens on port 5432.", False)])
        await service.index_pending(only_appended=True)
        assert (await service.embeddings.stored_through_many([agent_id]))[agent_id] == 3
        assert (await service.lane.embed_background(["the child comes back"])).shape == (1, 384)
        assert service.background_model.pid() != child
    finally:
        await service.stop()
    assert service.lane.workers == [] and not service.background_model.running and not service.fact_process.running

"""The context service takes time from its injected clock, once per operation: the events of
one append, and the compaction that append triggers, carry the same ``at``."""
from __future__ import annotations

import time
import uuid

from app.auth import Principal
from app.context.service import ContextService
from app.domain import context as ctx
from tests.client import register

FILLER = ("We looked at the logs again and walked through the retry path, the cache warmup and the "
          "deployment checklist; nothing conclusive yet, so we keep reading the traces step by step. ")


class StepClock:
    """Every read returns a new time, one second later, so two reads can never agree."""

    def __init__(self) -> None:
        self.start = time.time()
        self.reads: list[float] = []

    def __call__(self) -> float:
        self.reads.append(self.start + len(self.reads))
        return self.reads[-1]


async def context_events(server, agent_id: str) -> list:
    return await server.runtime.store.read(0, 10_000, streams=[f"context-{agent_id}"])


async def test_an_append_and_the_compaction_it_triggers_share_one_now(server, operator):
    agent_id, _ = await register(operator, f"clk_{uuid.uuid4().hex[:6]}", budget=1024)
    clock = StepClock()
    service = ContextService(server.runtime.service, clock=clock, embeddings=server.runtime.context.embeddings)
    agent = Principal("agent", agent_id)
    appends = 24
    for i in range(appends):
        await service.append(agent, [("assistant", f"Step {i}. " + FILLER, False),
                                     ("user", f"Noted {i}.", False)])
    assert len(clock.reads) == appends  # one read per append, compaction included

    events = await context_events(server, agent_id)
    appended = [e for e in events if e.type == ctx.CONTEXT_APPENDED]
    compacted = [e for e in events if e.type == ctx.CONTEXT_COMPACTED]
    assert len(appended) == 2 * appends and compacted
    # the two messages of append i carry the i-th read
    assert [e.data["at"] for e in appended] == [t for t in clock.reads for _ in range(2)]
    for event in compacted:
        before = max((e for e in appended if e.position < event.position), key=lambda e: e.position)
        assert event.data["at"] == before.data["at"]  # the time of the append that triggered it
        segment = next(s for s in service.state(agent_id).warm_segments
                       if s.segment_id == event.data["segment_id"])
        assert segment.at == event.data["at"]


async def test_a_forced_compaction_and_a_view_read_the_clock_once_each(server, operator):
    agent_id, _ = await register(operator, f"clk_{uuid.uuid4().hex[:6]}", budget=8192)
    clock = StepClock()
    service = ContextService(server.runtime.service, clock=clock, embeddings=server.runtime.context.embeddings)
    agent = Principal("agent", agent_id)
    for i in range(4):
        await service.append(agent, [("assistant", f"Step {i}. " + FILLER, False)])
    assert not [e for e in await context_events(server, agent_id) if e.type == ctx.CONTEXT_COMPACTED]

    result = await service.compact(agent)
    assert result["compacted"] and len(clock.reads) == 5
    (event,) = [e for e in await context_events(server, agent_id) if e.type == ctx.CONTEXT_COMPACTED]
    assert event.data["at"] == clock.reads[-1]

    view = await service.view(agent, None, 1024)
    assert len(clock.reads) == 6 and view.items

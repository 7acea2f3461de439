"""The context service takes time from its injected clock, once per operation: the events of
one append carry the same ``at``, and so do the plan, summary and event of one compaction
(which the background worker runs after the append that crossed the watermark)."""
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


async def test_an_append_and_a_compaction_each_read_the_clock_once(server, operator):
    agent_id, _ = await register(operator, f"clk_{uuid.uuid4().hex[:6]}", budget=1024)
    clock = StepClock()
    service = ContextService(server.runtime.service, clock=clock, embeddings=server.runtime.context.embeddings)
    agent = Principal("agent", agent_id)
    appends = 24
    for i in range(appends):
        await service.append(agent, [("assistant", f"Step {i}. " + FILLER, False),
                                     ("user", f"Noted {i}.", False)])
    assert len(clock.reads) == appends  # one read per append; none compacted inline
    append_reads = list(clock.reads)
    compactions = await service.run_compactions()
    assert compactions > 0

    events = await context_events(server, agent_id)
    appended = [e for e in events if e.type == ctx.CONTEXT_APPENDED]
    compacted = [e for e in events if e.type == ctx.CONTEXT_COMPACTED]
    assert len(appended) == 2 * appends and len(compacted) == compactions
    # the two messages of append i carry the i-th read
    assert [e.data["at"] for e in appended] == [t for t in append_reads for _ in range(2)]
    # each compaction, and the final check that found nothing left to do, read once
    assert len(clock.reads) == appends + compactions + 1
    for event, read in zip(compacted, clock.reads[appends:]):
        assert event.data["at"] == read
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

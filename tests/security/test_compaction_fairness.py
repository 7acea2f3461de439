"""Threat-model row: one background process runs every agent's compactions, one at a time.
The worker took the smallest pending agent id and compacted that agent up to 64 times in a
row while its plan was not empty, so an agent that kept appending large pathological
messages held the process compaction after compaction and another agent's compaction
waited behind its whole backlog. The worker is round-robin: one compaction per agent per
turn, in the order agents became pending.

Checked by the order of the events in the log, never by time: between the honest agent's
append (after which it needs a compaction) and its ContextCompacted, the log may hold at
most the hostile agent's compaction in progress and one more."""
from __future__ import annotations

import asyncio
import uuid

from app.domain import context as ctx
from app.domain.context import MAX_MESSAGE_CHARS
from app.domain.streams import context_stream
from tests.client import GraphQLClient, register

APPEND = """mutation($content: String!) {
  appendContext(input: {role: "user", content: $content, pinned: false}) { messages } }"""
APPEND_MANY = """mutation($messages: [ContextMessageInput!]!) {
  appendContextMessages(messages: $messages) { messages hotTokens } }"""

# Each the API's largest message: runs that once made the fact patterns quadratic, and
# prose with no sentence boundary at all.
PATHOLOGICAL = [
    ("1," * MAX_MESSAGE_CHARS)[:MAX_MESSAGE_CHARS],
    ("a." * MAX_MESSAGE_CHARS)[:MAX_MESSAGE_CHARS],
    " ".join(f"word{i} and then some more words without any stop" for i in range(MAX_MESSAGE_CHARS))
    [:MAX_MESSAGE_CHARS],
]
HONEST = ("We walked through the retry path, the cache warmup and the deployment checklist "
          "again; nothing conclusive yet, so we keep reading the traces step by step. ") * 4

APPENDS_PER_COMPACTION = 3   # each hostile compaction finds more to do: a backlog that never drains
HOSTILE_COMPACTIONS_AFTER = 6  # what the hostile agent may reach before the honest one is served
ALLOWED_AHEAD = 2            # the compaction in progress when the honest agent asked, and one more


async def _compactions(server, agent_id: str) -> list[int]:
    return [e.position for e in await server.runtime.store.read_stream(context_stream(agent_id))
            if e.type == ctx.CONTEXT_COMPACTED]


async def _until(condition, limit_s: float = 600.0) -> None:
    """Poll ``condition`` (an async predicate); the limit only keeps a broken run from
    hanging, it decides nothing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not await condition():
        assert loop.time() < deadline, "the compactions did not settle"
        await asyncio.sleep(0.05)


async def test_an_agent_flooding_compactions_does_not_hold_back_another_agents(server, operator):
    tag = uuid.uuid4().hex[:6]
    agents = sorted([await register(operator, f"fair_{tag}_{i}", budget=8192) for i in range(2)])
    # The smaller id first: the order the worker used to pick agents in.
    (hostile_id, hostile_token), (honest_id, honest_token) = agents
    stop = asyncio.Event()

    async def flood(hostile: GraphQLClient) -> int:
        sent = 0
        while not stop.is_set():
            seen = server.runtime.context.state(hostile_id).compactions
            for _ in range(APPENDS_PER_COMPACTION):
                await hostile(APPEND, content=PATHOLOGICAL[sent % len(PATHOLOGICAL)])
                sent += 1
            # the next appends land while the worker compacts these: a backlog in flight
            while server.runtime.context.state(hostile_id).compactions == seen and not stop.is_set():
                await asyncio.sleep(0.02)
        return sent

    async with GraphQLClient(server, hostile_token) as hostile, GraphQLClient(server, honest_token) as honest:
        flooding = asyncio.create_task(flood(hostile))
        try:
            async def hostile_compacted() -> bool:
                return len(await _compactions(server, hostile_id)) >= 1
            await _until(hostile_compacted)

            stats = (await honest(APPEND_MANY, messages=[{"role": "user", "content": f"Note {i}. {HONEST}"}
                                                         for i in range(40)]))["appendContextMessages"]
            assert stats["hotTokens"] > 0.55 * 8192, "the honest append must need a compaction"
            asked_at = (await server.runtime.store.read_stream(context_stream(honest_id)))[-1].position

            async def honest_served_or_hostile_far_ahead() -> bool:
                if await _compactions(server, honest_id):
                    return True
                later = [p for p in await _compactions(server, hostile_id) if p > asked_at]
                return len(later) >= HOSTILE_COMPACTIONS_AFTER

            await _until(honest_served_or_hostile_far_ahead)
        finally:
            stop.set()
            await flooding

        async def honest_compacted() -> bool:
            return bool(await _compactions(server, honest_id))
        await _until(honest_compacted)

    served_at = (await _compactions(server, honest_id))[0]
    ahead = [p for p in await _compactions(server, hostile_id) if asked_at < p < served_at]
    assert len(ahead) <= ALLOWED_AHEAD, \
        f"the honest agent's compaction waited behind {len(ahead)} of the hostile agent's"
    await server.runtime.context.run_compactions()

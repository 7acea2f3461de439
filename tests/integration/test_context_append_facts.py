"""Key facts at append time, through the real API, database and worker: the event in the
agent's context stream, the query-less view that shows the fact of a message it neither
shows nor has compacted, and a replay of the stream that gives the same view."""
from __future__ import annotations

import asyncio
import time
import uuid

from app.domain import context as ctx
from app.projections.context_archive import archived_context
from tests.client import GraphQLClient, register

APPEND = """mutation($role: String!, $content: String!) {
  appendContext(input: {role: $role, content: $content, pinned: false}) { hotTokens messages } }"""
VIEW = """query($budget: Int!) { context(budgetTokens: $budget) {
  tokens items { tier kind role content tokens ref } } }"""
EVENTS = """query($agent: ID) { events(after: 0, limit: 500, agentId: $agent, types: ["ContextFactsExtracted"]) {
  position stream type data } }"""

FACT = "We decided to pin the build image to node 20.11 for the billing service."
FILLER = ("We walked through the retry path and the cache warmup again; nothing conclusive yet, "
          "so the traces get another read after lunch. ")


async def until(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not await predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_the_fact_of_a_message_neither_shown_nor_compacted_is_in_the_query_less_view(server, operator):
    # A budget of 8,192: compaction starts past ~3.3k hot tokens at the earliest, and this
    # history stays well under it, so nothing is compacted.
    agent_id, token = await register(operator, f"facts_{uuid.uuid4().hex[:6]}", budget=8192)
    async with GraphQLClient(server, token) as agent:
        await agent(APPEND, role="user", content="Morning. " + FACT)
        for i in range(24):
            await agent(APPEND, role="assistant", content=f"Step {i}. " + FILLER)

        async def facts_recorded():
            events = (await operator(EVENTS, agent=agent_id))["events"]
            seqs = {s for e in events for s in e["data"]["seqs"]}
            return seqs >= set(range(1, 26))
        await until(facts_recorded)   # the background worker, not a call of the test's
        events = (await operator(EVENTS, agent=agent_id))["events"]
        assert all(e["stream"] == f"context-{agent_id}" for e in events)
        first = next(e["data"] for e in events if 1 in e["data"]["seqs"])
        assert [(f["kind"], f["text"], f["source_seq"]) for f in first["facts"]] == [("decision", FACT, 1)]
        assert first["extractor"].startswith("facts-")

        state = server.runtime.context.state(agent_id)
        assert state.compactions == 0 and state.tier_of(1) == ctx.HOT and not state.unextracted
        view = (await agent(VIEW, budget=600))["context"]
        shown = {i["ref"] for i in view["items"] if i["kind"] == "message"}
        assert "1" not in shown and view["tokens"] <= 600
        facts = [i["content"] for i in view["items"] if i["kind"] == "facts"]
        assert facts and FACT in facts[0]


async def test_replaying_the_context_stream_gives_the_same_state_and_view(server, operator):
    agent_id, token = await register(operator, f"facts_{uuid.uuid4().hex[:6]}", budget=1024)
    async with GraphQLClient(server, token) as agent:
        await agent(APPEND, role="user", content=FACT)
        for i in range(20):
            await agent(APPEND, role="user" if i % 3 == 0 else "assistant",
                        content=f"Step {i}: set the retry limit to {i + 2}. " + FILLER)
    context = server.runtime.context
    await context.run_compactions()
    await until(lambda: _settled(context, agent_id))
    live = context.state(agent_id)
    assert live.compactions >= 1 and live.fact_events >= 1
    replayed = await archived_context(server.runtime.store, agent_id, server.runtime.service.model.position)
    assert ctx.state_hash(replayed) == ctx.state_hash(live)
    assert FACT in (await context.view(_operator(), agent_id, 400)).text()
    count, now = context.counts.counter("cl100k_base"), context.clock()
    assert ctx.assemble_view(replayed, 400, None, count, now).canonical_bytes() == \
        ctx.assemble_view(live, 400, None, count, now).canonical_bytes()


async def _settled(context, agent_id) -> bool:
    await context.run_fact_extraction()
    return not context.state(agent_id).unextracted


def _operator():
    from app.auth import OPERATOR
    return OPERATOR


async def test_messages_no_append_handed_over_are_found_by_the_sweep_once_old_enough(server, operator):
    live = server.runtime.context
    await live.stop()   # the fact worker is down: appends are recorded, their facts wait
    try:
        agent_id, token = await register(operator, f"facts_{uuid.uuid4().hex[:6]}", budget=8192)
        async with GraphQLClient(server, token) as agent:
            await agent(APPEND, role="user", content=FACT)
        assert live.state(agent_id).unextracted == (1,)
        from app.context.service import ContextService
        other = ContextService(server.runtime.service)   # as another worker sees the log
        now = other.clock()
        assert agent_id not in other.pending_extraction(older_than=now - 5.0)   # its own worker is on it
        assert agent_id in other.pending_extraction(older_than=now + 1.0)
        other._facts_pending.update(dict.fromkeys(other.pending_extraction(older_than=now + 1.0)))
        assert await other.run_fact_extraction() >= 1
        assert not other.state(agent_id).unextracted
        assert FACT in (await other.view(_operator(), agent_id, 8192)).text()
        other.close_models()
    finally:
        live._facts_pending.clear()
        await live.start()


async def test_extraction_runs_in_the_fact_process_not_the_servers(server, operator, monkeypatch):
    """The extractor is never called in the server's process: an agent's hostile messages
    would hold the server's interpreter for as long as their extraction takes. The fact is
    still found, by the child, and recorded."""
    import os
    import threading

    from app.context import compactor
    called_here: list[int] = []
    real = compactor.extract_facts
    monkeypatch.setattr(compactor, "extract_facts",
                        lambda content, seq, role="user": called_here.append(seq) or real(content, seq, role))
    agent_id, token = await register(operator, f"facts_{uuid.uuid4().hex[:6]}", budget=8192)
    async with GraphQLClient(server, token) as agent:
        await agent(APPEND, role="user", content="Morning. " + FACT)

        async def recorded():
            return any(1 in e["data"]["seqs"] for e in (await operator(EVENTS, agent=agent_id))["events"])
        await until(recorded)
    event = next(e["data"] for e in (await operator(EVENTS, agent=agent_id))["events"] if 1 in e["data"]["seqs"])
    assert [f["text"] for f in event["facts"]] == [FACT]
    assert called_here == []                                       # not in this (the server's) process
    assert not [t.name for t in threading.enumerate() if t.name.startswith("context-facts")]
    child = server.runtime.context.fact_process.pid()
    assert child != os.getpid() and os.path.exists(f"/proc/{child}")


async def test_a_backlog_of_one_agent_waits_its_turn_behind_another_agents_messages(server, operator):
    """Round-robin, one call at a time: at a budget of nothing each call scans one message,
    so the second agent's message is extracted after the first agent's first, not after
    its whole backlog."""
    from app.auth import Principal
    from app.context.service import ContextService
    live = server.runtime.context
    await live.stop()   # only this service's worker extracts
    other = ContextService(server.runtime.service, embeddings=live.embeddings)
    other.fact_budget_s = 0.0
    try:
        flooder, _ = await register(operator, f"flood_{uuid.uuid4().hex[:6]}", budget=8192)
        honest, _ = await register(operator, f"honest_{uuid.uuid4().hex[:6]}", budget=8192)
        await other.append(Principal("agent", flooder), [("user", f"Step {i}. " + FILLER, False) for i in range(3)])
        await other.append(Principal("agent", honest), [("user", FACT, False)])
        assert await other.run_fact_extraction() == 4
        events = [e for agent_id in (flooder, honest) for e in (await operator(EVENTS, agent=agent_id))["events"]]
        positions = sorted((e["position"], e["stream"], e["data"]["seqs"]) for e in events)
        assert [(stream, seqs) for _p, stream, seqs in positions] == [
            (f"context-{flooder}", [1]), (f"context-{honest}", [1]),
            (f"context-{flooder}", [2]), (f"context-{flooder}", [3])]
    finally:
        other.close_models()
        live._facts_pending.clear()
        await live.start()

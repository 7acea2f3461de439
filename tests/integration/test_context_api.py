"""Context tiers through the real API, database, tokenizer and embedding model."""
from __future__ import annotations

import re
import uuid

import pytest

from app.context.tokens import count_message
from app.domain import context as ctx
from tests.client import GraphQLClient, GraphQLError, register

APPEND = """mutation($role: String!, $content: String!, $pinned: Boolean!, $agent: ID) {
  appendContext(input: {role: $role, content: $content, pinned: $pinned, agentId: $agent}) {
    agentId hotTokens warmTokens coldTokens messages hibernated } }"""
VIEW = """query($budget: Int!, $agent: ID, $q: String) { context(budgetTokens: $budget, agentId: $agent, query: $q) {
  agentId tokens budgetTokens pinned items { tier kind role content tokens ref } } }"""
COMPACT = "mutation($agent: ID) { compactContext(agentId: $agent) { compacted tokensBefore tokensAfter keyFactsKept } }"

FILLER = ("We looked at the logs again and walked through the retry path, the cache warmup and the "
          "deployment checklist; nothing conclusive yet, so we keep reading the traces step by step. ")


async def new_agent(operator, budget=1024):
    name = f"ctx_{uuid.uuid4().hex[:6]}"
    return await register(operator, name, budget=budget)


def recount(view: dict) -> int:
    """The view's size by tiktoken's own count: every item plus 3 reply-priming tokens."""
    return sum(count_message(i["role"], i["content"]) for i in view["items"]) + (3 if view["items"] else 0)


async def test_tiers_budget_pinned_first_and_supersession(server, operator):
    agent_id, token = await new_agent(operator, budget=1024)
    async with GraphQLClient(server, token) as agent:
        await agent(APPEND, role="system", content="You must never delete files under /srv/data.", pinned=True)
        await agent(APPEND, role="user", content="The deadline is 2026-12-15 for ticket PAY-4411.", pinned=False)
        for i in range(12):
            stats = (await agent(APPEND, role="assistant", content=f"Step {i}. " + FILLER,
                                 pinned=False))["appendContext"]
        await agent(APPEND, role="user", content="Update: the deadline is 2027-01-20 for ticket PAY-4411.",
                    pinned=False)
        for i in range(12):
            stats = (await agent(APPEND, role="assistant", content=f"Later step {i}. " + FILLER,
                                 pinned=False))["appendContext"]
        # hot passed the high watermark: the appends handed the agent to the compaction
        # worker, which moved spans to warm (summaries, facts) and cold
        assert await server.runtime.context.run_compactions() >= 0
        stats = (await agent("{ contextStats { hotTokens warmTokens coldTokens messages } }"))["contextStats"]
        assert stats["warmTokens"] > 0 and stats["coldTokens"] > 0
        assert stats["hotTokens"] <= 0.55 * 1024 + 200
        assert stats["messages"] == 27
        for budget in (256, 400, 700, 1024):
            view = (await agent(VIEW, budget=budget))["context"]
            assert view["tokens"] <= budget and recount(view) == view["tokens"]
        view = (await agent(VIEW, budget=1024))["context"]
        assert view["items"][0]["kind"] == "pinned" and "/srv/data" in view["items"][0]["content"]
        assert view["pinned"] == ["You must never delete files under /srv/data."]
        tiers = {i["tier"] for i in view["items"]}
        assert {"hot", "warm"} <= tiers
        facts = next(i["content"] for i in view["items"] if i["kind"] == "facts")
        assert "2027-01-20" in facts and "PAY-4411" in facts
    # supersession keeps both facts, the old one marked
    state = server.runtime.context.state(agent_id)
    deadline_facts = [f for f in state.facts if "deadline" in f.text.lower()]
    assert len(deadline_facts) >= 2
    old = [f for f in deadline_facts if "2026-12-15" in f.text]
    assert old and old[0].superseded_by is not None


async def test_hibernate_and_wake_restore_the_view_byte_for_byte(server, operator):
    agent_id, token = await new_agent(operator, budget=800)
    async with GraphQLClient(server, token) as agent:
        await agent(APPEND, role="system", content="Always answer in French.", pinned=True)
        for i in range(10):
            await agent(APPEND, role="user", content=f"Note {i}: order #{1000 + i} ships to /opt/site{i}. " + FILLER,
                        pinned=False)
        await server.runtime.context.run_compactions()
        before = (await agent(VIEW, budget=800))["context"]
        awake = server.runtime.context.state(agent_id)
        assert awake.cold.messages  # compacted spans: every tier has something to release
        stats_awake = (await agent("{ contextStats { hotTokens coldTokens messages } }"))["contextStats"]
        hib = await agent("mutation($id: ID!) { hibernateAgent(agentId: $id) { state } }", id=agent_id)
        assert hib["hibernateAgent"]["state"] == "HIBERNATED"
        # Released, not moved: the process keeps no message of this agent, in any tier, and
        # neither does its read-model document; the log is the archive.
        state = server.runtime.context.state(agent_id)
        assert state.hibernated and state.hot == () and state.warm_segments == () and state.facts == ()
        assert state.cold.messages == () and state.cold.chunks == ()
        doc = ctx.canonical_json(ctx.state_to_dict(state))
        assert "order #100" not in doc and "French" not in doc
        assert len(doc) * 10 < len(ctx.canonical_json(ctx.state_to_dict(awake)))  # ids and a digest are left
        await server.runtime.projector.persist()
        async with server.runtime.store.pool.acquire() as conn:
            stored = await conn.fetchval("SELECT doc::text FROM read_models WHERE projection = 'context' AND key = $1",
                                         agent_id)
        assert "order #100" not in stored and "French" not in stored
        stats = (await agent("{ contextStats { hotTokens warmTokens coldTokens messages hibernated } }")
                 )["contextStats"]
        assert stats["hibernated"] and stats["hotTokens"] == 0 and stats["warmTokens"] == 0
        assert stats["messages"] == stats_awake["messages"] == 11
        # Reading a hibernated context shows what a wake restores, and does not wake it.
        assert (await agent(VIEW, budget=800))["context"] == before
        assert server.runtime.context.state(agent_id).hibernated
        woke = await agent("mutation($id: ID!) { wakeAgent(agentId: $id) { state } }", id=agent_id)
        assert woke["wakeAgent"]["state"] == "ACTIVE"
        assert ctx.state_hash(server.runtime.context.state(agent_id)) == ctx.state_hash(awake)
        after = (await agent(VIEW, budget=800))["context"]
        assert after == before
        # The rebuild from position 0 (which reads the archive back the same way) agrees.
        report = (await operator("{ replayCheck { matches } }"))["replayCheck"]
        assert report["matches"]
        # time travel: the view at an earlier position holds only what existed then
        events = (await operator("query($id: ID) { events(after: 0, limit: 1000, agentId: $id, "
                                 "types: [\"ContextAppended\"]) { position } }", id=agent_id))["events"]
        position = events[2]["position"]
        past = (await agent("query($p: Int!) { contextAt(position: $p, budgetTokens: 800) { items { content } } }",
                            p=position))["contextAt"]
        text = " ".join(i["content"] for i in past["items"])
        assert "order #1001" in text and "order #1002" not in text


async def test_idle_agents_hibernate_and_their_next_request_wakes_them(server, operator):
    agent_id, token = await new_agent(operator)
    async with GraphQLClient(server, token) as agent:
        await agent(APPEND, role="user", content="Remember the build id is BLD-77.", pinned=False)
        import time
        parked = await server.runtime.context.hibernate_idle(now=time.time() + 10_000)
        assert agent_id in parked
        assert (await agent("{ me { state } }"))["me"]["state"] == "HIBERNATED"
        await agent(APPEND, role="user", content="Back again.", pinned=False)
        assert (await agent("{ me { state } }"))["me"]["state"] == "ACTIVE"
        view = (await agent(VIEW, budget=1024))["context"]
        assert any("BLD-77" in i["content"] for i in view["items"])


async def test_messages_are_indexed_off_the_request_path_and_found_by_query_in_any_tier(server, operator):
    agent_id, token = await new_agent(operator, budget=600)
    async with GraphQLClient(server, token) as agent:
        await agent(APPEND, role="user", content="The database password rotation happens via the vault-sync job "
                    "every Tuesday at 03:00 UTC.", pinned=False)
        for i in range(14):
            await agent(APPEND, role="assistant", content=f"Unrelated chatter {i} about fonts, colours and "
                        "spacing in the landing page design review. " + FILLER, pinned=False)
        result = (await agent(COMPACT))["compactContext"]
        assert result["tokensBefore"] >= result["tokensAfter"]
        # The indexer (a background task) stores one float32 vector per message; running a
        # pass here returns once every message has one, whichever pass embedded it.
        await server.runtime.context.index_pending()
        async with server.runtime.store.pool.acquire() as conn:
            rows = await conn.fetch("SELECT seq, vector FROM context_vectors WHERE agent_id = $1 ORDER BY seq",
                                    agent_id)
        assert [r["seq"] for r in rows] == list(range(1, 16)) and {len(r["vector"]) for r in rows} == {4 * 384}
        view = (await agent(VIEW, budget=600, q="when does the vault password rotation run?"))["context"]
        found = [i for i in view["items"] if "vault-sync" in i["content"]]
        assert found and found[0]["tier"] == "cold" and found[0]["ref"] == "1"
        # the oldest message shown, so dated in full: its day, then its time
        assert re.match(r"[A-Z][a-z]{2} \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2} UTC ", found[0]["content"])
        assert view["tokens"] <= 600 and recount(view) == view["tokens"]


async def test_privacy_and_bad_input(server, operator):
    alice_id, alice = await new_agent(operator)
    bob_id, bob = await new_agent(operator)
    async with GraphQLClient(server, alice) as a, GraphQLClient(server, bob) as b:
        await a(APPEND, role="user", content="secret plan: project NIGHTJAR", pinned=False)
        await server.runtime.context.run_fact_extraction()   # the accepted append's own follow-up
        before = await server.runtime.store.head()
        with pytest.raises(GraphQLError) as err:
            await b(VIEW, budget=1024, agent=alice_id)
        assert err.value.code == "FORBIDDEN"
        with pytest.raises(GraphQLError) as err:
            await b(APPEND, role="user", content="x", pinned=False, agent=alice_id)
        assert err.value.code == "FORBIDDEN"
        with pytest.raises(GraphQLError) as err:
            await b(COMPACT, agent=alice_id)
        assert err.value.code == "FORBIDDEN"
        cases = [
            (APPEND, {"role": "wizard", "content": "hi", "pinned": False}, "role"),
            (APPEND, {"role": "user", "content": "x" * 100_001, "pinned": False}, "100000"),
            (APPEND, {"role": "user", "content": "nul \x00 inside", "pinned": False}, "NUL"),
            (VIEW, {"budget": 10}, "budgetTokens"),
            (VIEW, {"budget": 10_000_000}, "budgetTokens"),
        ]
        for query, variables, words in cases:
            with pytest.raises(GraphQLError) as err:
                await a(query, **variables)
            assert err.value.code == "BAD_USER_INPUT" and words in str(err.value), str(err.value)
        too_many = [{"role": "user", "content": "m"}] * 101
        with pytest.raises(GraphQLError) as err:
            await a("mutation($m: [ContextMessageInput!]!) { appendContextMessages(messages: $m) { messages } }",
                    m=too_many)
        assert err.value.code == "BAD_USER_INPUT"
        # Nothing about either agent was appended by the refused requests. (The log's head
        # itself may move: the shared server's other pools and agents run in the background.)
        assert await server.runtime.store.read(0, agent_id=alice_id)  # the filter sees her append
        for agent_id in (alice_id, bob_id):
            assert await server.runtime.store.read(before, agent_id=agent_id) == []
        # the operator may read anyone's context
        view = (await operator(VIEW, budget=1024, agent=alice_id))["context"]
        assert "NIGHTJAR" in view["items"][-1]["content"]


async def test_after_a_restart_agents_over_the_watermark_are_compacted_and_indexed_across_agents(server, operator):
    live = server.runtime.context
    await live.stop()  # the worker is down: appends are recorded, nothing compacts them
    try:
        agents = [await new_agent(operator, budget=600) for _ in range(3)]
        for _agent_id, token in agents:
            async with GraphQLClient(server, token) as agent:
                for i in range(8):
                    await agent(APPEND, role="user", content=f"Entry {i}. " + FILLER, pinned=False)
        ids = [a for a, _ in agents]
        assert all(live.state(a).compactions == 0 for a in ids)
        # a fresh context service, as a restarted process builds it from the folded log
        from app.context.service import ContextService
        restarted = ContextService(server.runtime.service)
        assert set(ids) <= set(restarted.over_watermark())
        await restarted.start()
        try:
            await restarted.run_compactions()  # waits for the pass the start began
            assert all(restarted.state(a).compactions >= 1 for a in ids)
            assert not set(ids) & set(restarted.over_watermark())
            # one pass embeds every agent's messages, in shared batches
            await restarted.index_pending()
            async with server.runtime.store.pool.acquire() as conn:
                stored = await conn.fetch("SELECT agent_id, count(*) AS n FROM context_vectors "
                                          "WHERE agent_id = ANY($1::text[]) GROUP BY agent_id", ids)
            assert {r["agent_id"]: r["n"] for r in stored} == {a: 8 for a in ids}
            assert restarted.indexer.lag(restarted.state(a) for a in ids) == 0
            assert all(restarted.indexer.vectors.get(a) is None for a in ids)  # views fill the cache
            view = await restarted.view(operator_principal(), ids[0], 600, "entry 3 retry path")
            assert view.tokens <= 600 and restarted.indexer.vectors.get(ids[0]).through == 8
        finally:
            await restarted.stop()
    finally:
        live._compact_pending.clear()
        await live.start()


def operator_principal():
    from app.auth import OPERATOR
    return OPERATOR

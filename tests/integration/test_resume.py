"""The ways work resumes: a turn request wakes a hibernated agent, a pool's own tokenizer
counts its agents' context, a new server resumes from the persisted checkpoint with the
same state, and the demo fleet drives the scheduler."""
from __future__ import annotations

import asyncio
import uuid

from app.context.tokens import count_message
from app.domain import events as ev
from app.domain.settings import PoolSettings
from app.eventstore.listener import follow
from app.projections.core import canonical_hash
from app.projections.runner import CHECKPOINT
from app.replay import replay_check
from tests.client import COMPLETE, REQUEST, SCHEDULER, TURN_FIELDS, GraphQLClient, admitted, register
from tests.conftest import OPERATOR_TOKEN, Server

APPEND = """mutation($content: String!, $pinned: Boolean!) {
  appendContext(input: {role: "user", content: $content, pinned: $pinned}) { hotTokens messages } }"""
VIEW = "query($budget: Int!) { context(budgetTokens: $budget) { tokens items { tier role content tokens } } }"
TURN_SUB = f"subscription($id: ID!) {{ turn(turnId: $id) {{ {TURN_FIELDS} }} }}"


async def test_a_turn_request_wakes_a_hibernated_agent_with_its_context(server, operator):
    agent_id, token = await register(operator, f"sleeper_{uuid.uuid4().hex[:6]}")
    async with GraphQLClient(server, token) as agent:
        await agent(APPEND, content="Always answer in French.", pinned=True)
        await agent(APPEND, content="The build id is BLD-4242.", pinned=False)
        before = (await agent(VIEW, budget=1024))["context"]
        slept = await agent("mutation($id: ID!) { hibernateAgent(agentId: $id) { state } }", id=agent_id)
        assert slept["hibernateAgent"]["state"] == "HIBERNATED"
        start = await server.runtime.store.head()
        turn = (await agent(REQUEST, est=10, out=10, wait=5))["requestTurn"]
        assert turn["status"] == "GRANTED"
        assert (await agent("{ me { state } }"))["me"]["state"] == "ACTIVE"
        woken = (await operator("query($a: Int!, $id: ID) { events(after: $a, agentId: $id, "
                                "types: [\"AgentWoken\", \"TurnRequested\"]) { type data } }",
                                a=start, id=agent_id))["events"]
        assert [e["type"] for e in woken] == ["AgentWoken", "TurnRequested"]   # woken before the request
        assert woken[0]["data"]["reason"] == "turn requested"
        assert (await agent(VIEW, budget=1024))["context"] == before
        await agent(COMPLETE, id=turn["id"], outcome="OK", p=10, c=10)


async def test_a_pool_counts_its_agents_context_with_its_own_tokenizer(server, operator):
    text = "Привет, как дела? Сегодня мы обсуждаем развертывание."
    counts = {name: count_message("user", text, name) for name in ("cl100k_base", "o200k_base")}
    assert counts["cl100k_base"] != counts["o200k_base"]    # the text tells the two apart
    for name, expected in counts.items():
        pool = f"tok_{uuid.uuid4().hex[:8]}"
        created = await operator("mutation($name: String!, $tok: String!) { createPool(input: {name: $name, "
                                 "lanes: 1, rpm: 60, tpm: 10000, tokenizer: $tok}) { tokenizer } }",
                                 name=pool, tok=name)
        assert created["createPool"]["tokenizer"] == name
        _, token = await register(operator, "counter", pool)
        async with GraphQLClient(server, token) as agent:
            stats = (await agent(APPEND, content=text, pinned=False))["appendContext"]
            assert stats["hotTokens"] == expected, name
            view = (await agent(VIEW, budget=1024))["context"]
            assert [i["tokens"] for i in view["items"]] == [expected]
            assert view["tokens"] == expected + 3     # plus the reply-priming tokens


async def test_a_new_server_resumes_from_the_persisted_checkpoint(fresh_database):
    first = await Server(fresh_database).start()
    try:
        async with GraphQLClient(first, OPERATOR_TOKEN) as operator:
            await operator("mutation { createPool(input: {name: \"kept\", lanes: 1, rpm: 600, tpm: 100000, "
                           "leaseSeconds: 60}) { name } }")
            holder_id, holder_token = await register(operator, "holder", "kept")
            waiter_id, waiter_token = await register(operator, "waiter", "kept")
            for agent_id in (holder_id, waiter_id):
                await admitted(operator, agent_id)
            async with GraphQLClient(first, holder_token) as holder, GraphQLClient(first, waiter_token) as waiter:
                held = (await holder(REQUEST, est=10, out=10, wait=5))["requestTurn"]
                queued = (await waiter(REQUEST, est=10, out=10, wait=0))["requestTurn"]
                await waiter(APPEND, content="Deploy window is Friday 18:00.", pinned=True)
            assert (held["status"], queued["status"]) == ("GRANTED", "QUEUED")
            scheduler_before = _untimed((await operator(SCHEDULER, pool="kept"))["scheduler"])
    finally:
        await first.stop()                        # graceful: persists the read models
    old = first.runtime.projector.model
    head = await _head(fresh_database)
    assert old.position == head
    assert await _checkpoint(fresh_database) == head, "stopping did not persist the read models"

    second = await Server(fresh_database).start()
    try:
        new = second.runtime.projector.model
        assert new.position == head
        assert canonical_hash(new.all_docs()) == canonical_hash(old.all_docs())
        async with GraphQLClient(second, OPERATOR_TOKEN) as operator:
            assert _untimed((await operator(SCHEDULER, pool="kept"))["scheduler"]) == scheduler_before
        # Tokens still authenticate, and the queued turn moves once the held one completes.
        async with GraphQLClient(second, holder_token) as holder, GraphQLClient(second, waiter_token) as waiter:
            async with waiter.subscribe(TURN_SUB, id=queued["id"]) as sub:
                assert (await sub.next())["turn"]["status"] == "QUEUED"
                await holder(COMPLETE, id=held["id"], outcome="OK", p=10, c=10)
                assert (await sub.next())["turn"]["status"] == "GRANTED"
            await waiter(COMPLETE, id=queued["id"], outcome="OK", p=10, c=10)
            view = (await waiter(VIEW, budget=512))["context"]
            assert view["items"][0]["content"] == "Deploy window is Friday 18:00."
        report = await replay_check(second.runtime.store, second.runtime.projector)
        assert report.matches, report.differences
    finally:
        await second.stop()


def _untimed(state: dict) -> dict:
    """The scheduler state without the budgets, which refill with the wall clock."""
    return {k: v for k, v in state.items() if k != "rateLimit"}


async def _head(url: str) -> int:
    import asyncpg
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval("SELECT coalesce(max(position), 0) FROM events")
    finally:
        await conn.close()


async def _checkpoint(url: str) -> int:
    import asyncpg
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval("SELECT position FROM projection_checkpoints WHERE name = $1", CHECKPOINT)
    finally:
        await conn.close()


async def test_the_demo_fleet_registers_and_is_granted_turns(fresh_database):
    from app.bootstrap import Runtime
    from app.demo import FLEET, start_demo
    rt = await Runtime(fresh_database).start(PoolSettings(lanes=4))
    demo = start_demo(rt)
    try:
        granted: set[str] = set()
        completed = 0
        names: dict[str, str] = {}

        async def watch() -> None:
            nonlocal completed
            wanted = {ev.AGENT_REGISTERED, ev.TURN_GRANTED, ev.TURN_COMPLETED}
            async for event in follow(rt.store, rt.listener, 0, accept=lambda e: e.type in wanted):
                if event.type == ev.AGENT_REGISTERED:
                    names[event.data["agent_id"]] = event.data["name"]
                elif event.type == ev.TURN_GRANTED:
                    granted.add(names[event.data["agent_id"]])
                else:
                    completed += 1
                if len(granted) == len(FLEET) and completed >= 1:
                    return
        await asyncio.wait_for(watch(), 120)
        assert granted == {name for name, _cls in FLEET}
    finally:
        demo.cancel()
        await asyncio.gather(demo, return_exceptions=True)
        try:
            report = await replay_check(rt.store, rt.projector)
            assert report.matches, report.differences
        finally:
            await rt.stop()

"""Secrets, tokens and who may see what, through the real API and the real database:
the raw upstream key and agent tokens never reach the log or the read models, agents
follow only their own events and turns, and an anonymous socket is refused."""
from __future__ import annotations

import uuid

import asyncpg
import pytest

from app.auth import hash_token
from tests.client import COMPLETE, REQUEST, TURN_FIELDS, GraphQLClient, GraphQLError, admitted, register
from tests.conftest import OPERATOR_TOKEN

CREATE_SECRET_POOL = """mutation($name: String!, $url: String!, $key: String!) {
  createPool(input: {name: $name, lanes: 2, rpm: 600, tpm: 100000, leaseSeconds: 30,
                     upstreamBaseUrl: $url, upstreamApiKey: $key}) {
    name upstreamBaseUrl hasUpstreamApiKey } }"""
POOLS = "{ pools { name upstreamBaseUrl hasUpstreamApiKey } }"
APPEND = """mutation($content: String!) { appendContext(input: {role: "user", content: $content, pinned: false}) {
  messages } }"""
AGENT = "query($id: ID!) { agent(id: $id) { id name pool state } }"
TURN_SUB = f"subscription($id: ID!) {{ turn(turnId: $id) {{ {TURN_FIELDS} }} }}"
EVENTS_SUB = """subscription($after: Int, $agent: ID) { events(after: $after, agentId: $agent) {
  position type data } }"""


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def tables_containing(url: str, needle: str) -> dict[str, int]:
    """Every table of the database, each row as text, searched for `needle`."""
    conn = await asyncpg.connect(url)
    try:
        tables = await conn.fetch("SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) AS t "
                                  "FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')")
        found = {}
        for row in tables:
            n = await conn.fetchval(f"SELECT count(*) FROM {row['t']} AS r WHERE strpos(r::text, $1) > 0", needle)
            if n:
                found[row["t"]] = n
        return found
    finally:
        await conn.close()


async def test_the_upstream_key_and_agent_tokens_never_reach_the_log_or_read_models(server, operator):
    pool, key = unique("vault"), f"sk-live-{uuid.uuid4().hex}"
    url = f"https://llm.internal.example/{uuid.uuid4().hex[:6]}/v1"
    created = (await operator(CREATE_SECRET_POOL, name=pool, url=url, key=key))["createPool"]
    assert created == {"name": pool, "upstreamBaseUrl": url, "hasUpstreamApiKey": True}
    agents = [await register(operator, f"holder{i}", pool) for i in range(2)]
    for agent_id, token in agents:       # every path a token travels: turns, context, reads
        async with GraphQLClient(server, token) as agent:
            turn = (await agent(REQUEST, est=10, out=10, wait=5))["requestTurn"]
            await agent(COMPLETE, id=turn["id"], outcome="OK", p=10, c=10)
            await agent(APPEND, content="a note to remember")
            assert (await agent("{ me { id } }"))["me"]["id"] == agent_id
    await server.runtime.projector.persist()   # the read models as stored documents too

    assert await tables_containing(server.url, key) == {}   # sealed in pool_secrets (app/provider_keys.py)
    assert await tables_containing(server.url, OPERATOR_TOKEN) == {}
    for agent_id, token in agents:
        assert await tables_containing(server.url, token) == {}, "a raw agent token is stored"
        # ...only its hash, on the registration
        registered = (await operator("query($id: ID) { events(after: 0, limit: 10, agentId: $id, "
                                     "types: [\"AgentRegistered\"]) { data } }", id=agent_id))["events"]
        assert registered[0]["data"]["token_hash"] == hash_token(token)
    # The pool's creation records a fingerprint of the key, not the key.
    [pool_created] = (await operator("query { events(after: 0, limit: 1000, types: [\"PoolCreated\"]) "
                                     "{ stream data } }"))["events"][-1:]
    assert pool_created["stream"] == f"pool-{pool}" and key not in str(pool_created["data"])
    assert pool_created["data"]["upstream_api_key_fingerprint"]


async def test_agents_see_only_their_own_pool_and_never_its_upstream(server, operator):
    pool, url = unique("hidden"), f"https://llm.internal.example/{uuid.uuid4().hex[:6]}"
    await operator(CREATE_SECRET_POOL, name=pool, url=url, key="sk-" + uuid.uuid4().hex)
    _, token = await register(operator, "curious", pool)
    as_operator = {p["name"]: p for p in (await operator(POOLS))["pools"]}
    assert as_operator[pool]["upstreamBaseUrl"] == url and "default" in as_operator
    async with GraphQLClient(server, token) as agent:
        assert (await agent(POOLS))["pools"] == [{"name": pool, "upstreamBaseUrl": None, "hasUpstreamApiKey": True}]
    async with GraphQLClient(server, None) as anonymous:
        with pytest.raises(GraphQLError) as err:
            await anonymous(POOLS)
        assert err.value.code == "UNAUTHENTICATED"


async def test_agent_query_is_for_the_agent_itself_and_the_operator(server, operator):
    alice_id, alice_token = await register(operator, "alice")
    bob_id, bob_token = await register(operator, "bob")
    alice = {"id": alice_id, "name": "alice", "pool": "default", "state": "ACTIVE"}
    assert (await operator(AGENT, id=alice_id))["agent"] == alice
    assert (await operator(AGENT, id=str(uuid.uuid4())))["agent"] is None
    async with GraphQLClient(server, alice_token) as a, GraphQLClient(server, bob_token) as b:
        assert (await a(AGENT, id=alice_id))["agent"] == alice
        with pytest.raises(GraphQLError) as err:
            await b(AGENT, id=alice_id)
        assert err.value.code == "FORBIDDEN"
        assert (await b(AGENT, id=bob_id))["agent"]["name"] == "bob"


async def test_subscriptions_refuse_other_agents_and_anonymous_sockets(server, operator):
    alice_id, alice_token = await register(operator, "alice")
    bob_id, bob_token = await register(operator, "bob")
    for agent_id in (alice_id, bob_id):
        await admitted(operator, agent_id)
    start = await server.runtime.store.head()
    async with GraphQLClient(server, alice_token) as alice, GraphQLClient(server, bob_token) as bob:
        turn = (await alice(REQUEST, est=5, out=5, wait=5))["requestTurn"]
        assert turn["status"] == "GRANTED"
        refused = [(bob, TURN_SUB, {"id": turn["id"]}, "FORBIDDEN"),
                   (bob, EVENTS_SUB, {"after": 0, "agent": alice_id}, "FORBIDDEN")]
        for token in (None, "not-a-token"):
            async with GraphQLClient(server, token) as stranger:
                refused += [(stranger, TURN_SUB, {"id": turn["id"]}, "UNAUTHENTICATED"),
                            (stranger, EVENTS_SUB, {"after": 0, "agent": None}, "UNAUTHENTICATED")]
        for client, query, variables, code in refused:
            async with client.subscribe(query, **variables) as sub:
                with pytest.raises(GraphQLError) as err:
                    await sub.next()
                assert err.value.code == code, (query, variables, err.value.errors)

        # Bob's own stream, from before Alice's turn: her events are left out, his come.
        async with bob.subscribe(EVENTS_SUB, after=start) as sub:
            await alice(COMPLETE, id=turn["id"], outcome="OK", p=5, c=5)
            mine = (await bob(REQUEST, est=5, out=5, wait=5))["requestTurn"]
            first = (await sub.next())["events"]
            assert first["type"] == "TurnRequested" and first["data"]["agent_id"] == bob_id
            assert first["data"]["turn_id"] == mine["id"]
        await bob(COMPLETE, id=mine["id"], outcome="OK", p=5, c=5)

"""The GraphQL fields the operator console reads (app/api/console_schema.py), over HTTP
against the real server: counters folded from the turns, the context as tiers, verify,
the log head, the lanes' deadlines; operator only; bad input refused."""
from __future__ import annotations

from datetime import datetime

import pytest

from tests.client import COMPLETE, CREATE_POOL, REQUEST, GraphQLClient, GraphQLError, admitted, register

POOL = "console_api"
ACTIVITY = "query($pool: String) { agentActivity(pool: $pool) { agentId turns queued granted tokens lastActivityAt } }"
LANES = """query($pool: String!) { scheduler(pool: $pool) {
  lanes { turnId agentId grantedAt leaseExpiresAt awaitingFirstChunk } levels { queued { turnId queuedAt } } } }"""
TIERS = """query($id: ID!) { contextTiers(agentId: $id) { hibernated pinned { content } keyFacts { text supersededBy }
  warmSummaries { summary } hot { content } coldChunks coldMessages pinnedTokens hotTokens coldTokens } }"""
APPEND = """mutation($role: String!, $content: String!, $pinned: Boolean!) {
  appendContext(input: {role: $role, content: $content, pinned: $pinned}) { messages } }"""


@pytest.fixture
async def pool(operator):
    """A one-lane pool of this module's own (created once per session database)."""
    if POOL not in {p["name"] for p in (await operator("{ pools { name } }"))["pools"]}:
        await operator(CREATE_POOL, name=POOL, lanes=1, rpm=6000, tpm=10_000_000, lease=60.0, boost=None)
    return POOL


async def test_activity_lanes_and_recent_turns_follow_the_turns(server, operator, pool):
    agent_id, token = await register(operator, "counted", pool)
    await admitted(operator, agent_id)
    async with GraphQLClient(server, token) as agent:
        first = (await agent(REQUEST, est=300, out=50, wait=10.0))["requestTurn"]
        lane = (await operator(LANES, pool=pool))["scheduler"]["lanes"][0]
        assert lane["turnId"] == first["id"] and lane["agentId"] == agent_id
        assert datetime.fromisoformat(lane["leaseExpiresAt"]) > datetime.fromisoformat(lane["grantedAt"])
        assert lane["awaitingFirstChunk"] is False
        second = (await agent(REQUEST, est=300, out=50, wait=0.0))["requestTurn"]
        queued = (await operator(LANES, pool=pool))["scheduler"]["levels"]
        waiting = [q for level in queued for q in level["queued"]]
        assert [q["turnId"] for q in waiting] == [second["id"]] and waiting[0]["queuedAt"]
        mine = next(a for a in (await operator(ACTIVITY, pool=pool))["agentActivity"] if a["agentId"] == agent_id)
        assert (mine["turns"], mine["queued"], mine["granted"], mine["tokens"]) == (2, 1, 1, 0)
        await agent(COMPLETE, id=first["id"], outcome="OK", p=280, c=40, retry=None, headers=None)
        await agent(COMPLETE, id=second["id"], outcome="OK", p=10, c=5, retry=None, headers=None)
    mine = next(a for a in (await operator(ACTIVITY, pool=pool))["agentActivity"] if a["agentId"] == agent_id)
    assert (mine["turns"], mine["queued"], mine["granted"], mine["tokens"]) == (2, 0, 0, 335)
    turns = (await operator("query($id: ID!) { agentTurns(agentId: $id, limit: 5) { id status } }",
                            id=agent_id))["agentTurns"]
    assert [t["id"] for t in turns] == [second["id"], first["id"]]
    assert {t["status"] for t in turns} == {"COMPLETED"}
    # Another pool's agents are not in this pool's activity.
    others = (await operator(ACTIVITY, pool="default"))["agentActivity"]
    assert agent_id not in {a["agentId"] for a in others}


async def test_context_tiers_show_pinned_and_hot_with_their_tokens(server, operator, pool):
    agent_id, token = await register(operator, "tiered", pool)
    async with GraphQLClient(server, token) as agent:
        await agent(APPEND, role="system", content="Never push to main.", pinned=True)
        await agent(APPEND, role="user", content="Ticket OPS-12 is open.", pinned=False)
    tiers = (await operator(TIERS, id=agent_id))["contextTiers"]
    assert [m["content"] for m in tiers["pinned"]] == ["Never push to main."]
    assert [m["content"] for m in tiers["hot"]] == ["Ticket OPS-12 is open."]
    assert tiers["pinnedTokens"] > 0 and tiers["hotTokens"] > 0
    assert (tiers["coldChunks"], tiers["coldMessages"], tiers["coldTokens"], tiers["hibernated"]) == (0, 0, 0, False)


async def test_verify_and_log_head(operator):
    report = (await operator("{ verify { ok eventsChecked decisionsChecked pools "
                             "firstViolation { position } } }"))["verify"]
    assert report["ok"] is True and report["firstViolation"] is None
    assert report["decisionsChecked"] > 0 and "default" in report["pools"]
    head = (await operator("{ logHead }"))["logHead"]
    last = (await operator("query($a: Int!) { events(after: $a, limit: 1) { position } }", a=head - 1))["events"]
    assert [e["position"] for e in last] == [head]


async def test_console_fields_are_for_the_operator_and_refuse_bad_input(server, operator, pool):
    agent_id, token = await register(operator, "nosy", pool)
    async with GraphQLClient(server, token) as agent:
        for query in ("{ logHead }", "{ verify { ok } }", "{ agentActivity { agentId } }",
                      f'{{ contextTiers(agentId: "{agent_id}") {{ hibernated }} }}',
                      f'{{ agentTurns(agentId: "{agent_id}") {{ id }} }}'):
            with pytest.raises(GraphQLError) as err:
                await agent(query)
            assert err.value.code == "FORBIDDEN", query
    with pytest.raises(GraphQLError) as err:
        await operator('{ contextTiers(agentId: "no-such-agent") { hibernated } }')
    assert err.value.code == "NOT_FOUND"
    with pytest.raises(GraphQLError) as err:
        await operator(f'{{ agentTurns(agentId: "{agent_id}", limit: 0) {{ id }} }}')
    assert err.value.code == "BAD_USER_INPUT"
    with pytest.raises(GraphQLError) as err:
        await operator('{ verify(pool: "no-such-pool") { ok } }')
    assert err.value.code == "NOT_FOUND"

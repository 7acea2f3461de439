"""Threat-model row: an agent hides its gateway spend by completing (or cancelling, or
heartbeating) the turn the gateway holds for its call. Gateway turns are the gateway's:
the agent's own GraphQL commands on them are refused, and the call is settled with the
provider's real usage."""
from __future__ import annotations

import asyncio

import openai
import pytest_asyncio

from app.domain import events as ev
from tests.client import GraphQLClient, GraphQLError
from tests.fake_upstream import FakeUpstream
from tests.integration.test_gateway import MESSAGES, make_agent, make_pool, turns_of
from tests.waiting import until


@pytest_asyncio.fixture
async def upstream():
    fake = await FakeUpstream().start()
    yield fake
    await fake.stop()


async def test_an_agent_cannot_complete_cancel_or_heartbeat_its_gateway_turn(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool, "spend-hider")
    client = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key=token, max_retries=0)
    # Long enough that the agent's three commands all meet the call still running, on a
    # loaded machine too (a command on a finished turn would be refused for another reason).
    upstream.delay_next(8.0)
    call = asyncio.create_task(client.chat.completions.create(model="fake-gpt", messages=MESSAGES))
    await upstream.wait_for(lambda seen: len(seen) == 1)
    [turn] = turns_of(server, agent_id)
    async with GraphQLClient(server, token) as agent:
        for mutation in ('mutation($t: ID!) { completeTurn(input: {turnId: $t, promptTokens: 0, '
                         'completionTokens: 0}) { id } }',
                         'mutation($t: ID!) { cancelTurn(turnId: $t) { id } }',
                         'mutation($t: ID!) { heartbeat(turnId: $t) { id } }'):
            try:
                await agent(mutation, t=turn["turn_id"])
            except GraphQLError as exc:
                assert exc.code == "FORBIDDEN", exc
            else:
                raise AssertionError(f"the agent changed its gateway turn: {mutation}")
    reply = await call
    await until(lambda: turns_of(server, agent_id)[0]["status"] == ev.COMPLETED)
    [done] = turns_of(server, agent_id)
    assert done["status"] == ev.COMPLETED and done["outcome"] == ev.OK
    assert done["completion_tokens"] == reply.usage.completion_tokens > 0   # the provider's real usage
    await client.close()

"""Threat-model row: one agent stops a whole pool by reporting a 429 it never got.
completeTurn(outcome: RATE_LIMITED, retryAfterSeconds: 3600) from an agent paused every
agent of its pool for an hour, and rateLimitHeaders saying remaining 0 could do the same.
An agent's report is a claim: its retry-after is capped (agentRetryAfterCapSeconds, 30 s
by default) and it pauses only that agent, unless the gateway or another agent reported
a 429 within the cap. The other agents' turns are granted at once."""
from __future__ import annotations

import uuid

from tests.client import COMPLETE, REQUEST, GraphQLClient, register
from tests.integration.test_api import events_of, head

CAP = 5.0   # the cap (30 s by default), short here so the claimant's own wait is short too


async def test_an_agents_hour_long_429_claim_pauses_only_itself_and_briefly(server, operator):
    pool = "claims_" + uuid.uuid4().hex[:8]
    await operator("mutation($i: PoolInput!) { createPool(input: $i) { name } }",
                   i={"name": pool, "lanes": 2, "rpm": 6000, "tpm": 1_000_000, "agentRetryAfterCapSeconds": CAP})
    liar_id, liar_token = await register(operator, "claims-429", pool)
    _, other_token = await register(operator, "honest", pool)
    start = await head(server)
    async with GraphQLClient(server, liar_token) as liar, GraphQLClient(server, other_token) as other:
        for claim in ({"retry": 3600.0, "headers": None},
                      {"retry": None, "headers": {"retry-after": "3600", "x-ratelimit-remaining-requests": "0",
                                                  "x-ratelimit-reset-requests": "1h"}}):
            turn = (await liar(REQUEST, est=10, out=10, wait=30))["requestTurn"]
            assert turn["status"] == "GRANTED"
            await liar(COMPLETE, id=turn["id"], outcome="RATE_LIMITED", p=0, c=0, **claim)
            # Another agent's turn is granted at once: the pool is not paused.
            honest = (await other(REQUEST, est=10, out=10, wait=10))["requestTurn"]
            assert honest["status"] == "GRANTED", honest
            await other(COMPLETE, id=honest["id"], outcome="OK", p=10, c=10, retry=None, headers=None)
            # The claimant's own next turn waits (its claim paused it), and is not cancelled.
            waiting = (await liar(REQUEST, est=10, out=10, wait=0))["requestTurn"]
            assert waiting["status"] == "QUEUED"
            await liar("mutation($id: ID!) { cancelTurn(turnId: $id) { id } }", id=waiting["id"])
    log = await events_of(operator, start, ["AgentPaused", "PoolPaused", "ModelPaused"])
    assert [e["type"] for e in log] == ["AgentPaused", "AgentPaused"]
    for paused in log:
        data = paused["data"]
        assert data["agent_id"] == liar_id and data["retry_after"] == CAP and data["claimed_retry_after"] == 3600.0
        assert data["until"] - data["at"] <= CAP

"""A real third-party GraphQL client (gql, websockets transport) drives a whole turn."""
from __future__ import annotations

import asyncio

from gql import Client, gql
from gql.transport.websockets import WebsocketsTransport

from tests.client import register


async def test_gql_client_registers_requests_heartbeats_completes_and_subscribes(server, operator):
    agent_id, token = await register(operator, "gql-agent")
    start = await server.runtime.store.head()
    op_transport = WebsocketsTransport(url=server.ws, init_payload={"authorization": "Bearer op_test_token_7f3a9c1e5b"},
                                       subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL])
    agent_transport = WebsocketsTransport(url=server.ws, init_payload={"authorization": f"Bearer {token}"},
                                          subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL])
    wanted = ["TurnRequested", "TurnQueued", "TurnGranted", "HeartbeatSent", "LeaseExtended",
              "CompletionReported", "TurnCompleted"]
    received: list[str] = []
    async with Client(transport=op_transport) as op_session, Client(transport=agent_transport) as session:
        async def watch():
            sub = gql("subscription($after: Int, $agent: ID) { events(after: $after, agentId: $agent) "
                      "{ position type data } }")
            async for item in op_session.subscribe(sub, variable_values={"after": start, "agent": agent_id}):
                if item["events"]["type"] in wanted:
                    received.append(item["events"]["type"])
                if len(received) == len(wanted):
                    return

        watcher = asyncio.create_task(watch())
        turn = (await session.execute(gql(
            "mutation { requestTurn(input: {estimatedTokens: 120, maxOutputTokens: 40, waitSeconds: 5}) "
            "{ id status lane } }")))["requestTurn"]
        assert turn["status"] == "GRANTED"
        beat = await session.execute(gql("mutation($id: ID!) { heartbeat(turnId: $id) { status leaseExpiresAt } }"),
                                     variable_values={"id": turn["id"]})
        assert beat["heartbeat"]["status"] == "GRANTED"
        done = await session.execute(gql(
            "mutation($id: ID!) { completeTurn(input: {turnId: $id, outcome: OK, promptTokens: 110, "
            "completionTokens: 30, rateLimitHeaders: {x_ratelimit_remaining_requests: \"99\"}}) { status } }"),
            variable_values={"id": turn["id"]})
        assert done["completeTurn"]["status"] == "COMPLETED"
        await asyncio.wait_for(watcher, 20)
    assert received == wanted

"""Threat-model row: an anonymous caller grew server memory without bound, because
hibernateAgent / wakeAgent made a lock entry for the agent id it named before checking
the caller. Nothing is held for a caller that may not act, or an id that names no agent."""
from __future__ import annotations

import asyncio

from tests.client import GraphQLClient, GraphQLError


async def test_anonymous_and_unknown_ids_leave_no_lock_entries(server, operator):
    service = server.runtime.service
    before = len(service._agent_locks)
    async with GraphQLClient(server, None) as anonymous:
        async def attempt(i: int) -> str | None:
            try:
                await anonymous("mutation($a: ID!) { hibernateAgent(agentId: $a) { id } }",
                                a=f"{i:06d}" + "x" * 10_000)
            except GraphQLError as exc:
                return exc.code
            return None
        codes = await asyncio.gather(*(attempt(i) for i in range(200)))
    assert set(codes) == {"UNAUTHENTICATED"}
    async with GraphQLClient(server, operator.token) as op:   # an operator naming no agent
        for i in range(50):
            try:
                await op("mutation($a: ID!) { wakeAgent(agentId: $a) { id } }", a=f"missing-{i}")
            except GraphQLError as exc:
                assert exc.code == "NOT_FOUND"
    assert len(service._agent_locks) == before == 0

"""Threat-model row: `resources` showed every resource's holders and waiters, with their
agent and lease ids, across pools, to any agent: one agent could map what every other
agent holds and waits for.

An agent sees who holds or waits only for its own leases; the other entries keep their
mode, level and expiry, but their agentId and leaseId read "hidden" (the contract keeps
agentId non-null). The operator sees every id."""
from __future__ import annotations

import uuid

from tests.client import CREATE_POOL, GraphQLClient, admitted, register

DEFINE = """mutation($name: String!) { defineResource(input: {name: $name, capacity: 1, leaseSeconds: 3600}) {
  name } }"""
ACQUIRE = """mutation($name: String!, $wait: Float!) {
  acquireResource(input: {name: $name, mode: EXCLUSIVE, waitSeconds: $wait}) { id status agentId } }"""
RESOURCES = """{ resources { name capacity holders { agentId leaseId mode level mine }
  waiters { agentId leaseId mode level mine } } }"""


async def new_pool(operator) -> str:
    name = f"holders{uuid.uuid4().hex[:8]}"
    await operator(CREATE_POOL, name=name, lanes=2, rpm=10_000, tpm=1_000_000, lease=3600.0,
                   boost=None, limiter=None)
    return name


def the(resources: dict, name: str) -> dict:
    return next(r for r in resources["resources"] if r["name"] == name)


async def test_an_agent_sees_whose_lease_only_for_its_own(server, operator):
    name = f"tool:{uuid.uuid4().hex[:8]}"
    await operator(DEFINE, name=name)
    holder_pool, other_pool = await new_pool(operator), await new_pool(operator)
    holder_id, holder_token = await register(operator, "holder", holder_pool)
    waiter_id, waiter_token = await register(operator, "waiter", holder_pool)
    stranger_id, stranger_token = await register(operator, "stranger", other_pool)
    for agent in (holder_id, waiter_id, stranger_id):
        await admitted(operator, agent)
    async with GraphQLClient(server, holder_token) as holder, GraphQLClient(server, waiter_token) as waiter, \
            GraphQLClient(server, stranger_token) as stranger:
        held = (await holder(ACQUIRE, name=name, wait=5.0))["acquireResource"]
        assert held["status"] == "HELD"
        waiting = (await waiter(ACQUIRE, name=name, wait=0.2))["acquireResource"]
        assert waiting["status"] == "WAITING"

        seen = the(await stranger(RESOURCES), name)
        assert seen["holders"] == [{"agentId": "hidden", "leaseId": "hidden", "mode": "EXCLUSIVE",
                                    "level": seen["holders"][0]["level"], "mine": False}]
        assert [(w["agentId"], w["leaseId"], w["mine"]) for w in seen["waiters"]] == [("hidden", "hidden", False)]

        own = the(await holder(RESOURCES), name)
        assert [(h["agentId"], h["leaseId"], h["mine"]) for h in own["holders"]] == [(holder_id, held["id"], True)]
        assert [(w["agentId"], w["leaseId"], w["mine"]) for w in own["waiters"]] == [("hidden", "hidden", False)]

        theirs = the(await waiter(RESOURCES), name)
        assert [h["agentId"] for h in theirs["holders"]] == ["hidden"]
        assert [(w["agentId"], w["leaseId"]) for w in theirs["waiters"]] == [(waiter_id, waiting["id"])]

    everything = the(await operator(RESOURCES), name)
    assert [(h["agentId"], h["leaseId"]) for h in everything["holders"]] == [(holder_id, held["id"])]
    assert [(w["agentId"], w["leaseId"]) for w in everything["waiters"]] == [(waiter_id, waiting["id"])]

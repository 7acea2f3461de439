"""The resource manager through the real API and the real database: exclusive holds never
overlap under concurrent agents (and `audit verify` says so from the log), shared holds
and capacity, a reaped hold frees its waiter, two- and three-agent deadlocks refused with
the cycle named, and waiters granted in MLFQ order."""
from __future__ import annotations

import asyncio
import random
import uuid

import pytest

from app.audit.resource_verify import verify_resources
from app.domain import resource_events as rev
from app.domain.streams import RESOURCE_DECISIONS_STREAM, lease_stream
from tests.client import (
    GraphQLClient,
    GraphQLError,
    admitted,
    appended_outside_pools,
    register,
)
from tests.integration.test_audit import agentrm

LEASE = "id resource mode status leaseExpiresAt agentId level"
DEFINE = """mutation($name: String!, $capacity: Int!, $lease: Float!) {
  defineResource(input: {name: $name, capacity: $capacity, leaseSeconds: $lease}) {
    name capacity holders { agentId mode } waiters { agentId mode } } }"""
ACQUIRE = f"""mutation($name: String!, $mode: ResourceMode!, $wait: Float!) {{
  acquireResource(input: {{name: $name, mode: $mode, waitSeconds: $wait}}) {{ {LEASE} }} }}"""
RELEASE = f"mutation($id: ID!) {{ releaseResource(leaseId: $id) {{ {LEASE} }} }}"
HEARTBEAT = f"mutation($id: ID!) {{ heartbeatResource(leaseId: $id) {{ {LEASE} }} }}"
RESOURCES = "{ resources { name capacity holders { agentId mode } waiters { agentId mode } } }"


def unique(prefix: str) -> str:
    return f"{prefix}:{uuid.uuid4().hex[:8]}"


async def define(operator, prefix: str, capacity: int = 1, lease: float = 30.0) -> str:
    name = unique(prefix)
    created = (await operator(DEFINE, name=name, capacity=capacity, lease=lease))["defineResource"]
    assert created == {"name": name, "capacity": capacity, "holders": [], "waiters": []}
    return name


async def acquire(agent, name: str, mode: str = "EXCLUSIVE", wait: float = 0.0) -> dict:
    return (await agent(ACQUIRE, name=name, mode=mode, wait=wait))["acquireResource"]


def resource(data: dict, name: str) -> dict:
    return next(r for r in data["resources"] if r["name"] == name)


async def decisions_of(server, lease_id: str) -> list:
    return [e for e in await server.runtime.store.read(0, 100_000, streams=[RESOURCE_DECISIONS_STREAM])
            if e.data.get("lease_id") == lease_id]


async def test_exclusive_holds_never_overlap_under_concurrent_agents(server, operator):
    """Five agents, each taking a repository (capacity 2) eight times in a mode a seeded
    random choice gives: what each agent sees while it holds, and the log afterwards (by
    the independent verifier and by `audit verify`), never has an exclusive hold beside
    another hold, nor more shared holds than the capacity."""
    name = await define(operator, "repo", capacity=2)
    agents = [await register(operator, f"coder{i}") for i in range(5)]
    inside: list[tuple[str, str]] = []
    broken: list[list[tuple[str, str]]] = []
    granted: list[str] = []

    async def work(index: int, agent_id: str, token: str) -> None:
        rng = random.Random(index)
        async with GraphQLClient(server, token) as agent:
            for _ in range(8):
                mode = rng.choice(["EXCLUSIVE", "SHARED"])
                lease = await acquire(agent, name, mode, wait=120)
                assert lease["status"] == "HELD" and lease["agentId"] == agent_id
                inside.append((agent_id, mode))
                modes = [m for _a, m in inside]
                if ("EXCLUSIVE" in modes and len(modes) > 1) or len(modes) > 2:
                    broken.append(list(inside))
                granted.append(lease["id"])
                await asyncio.sleep(0)        # let the other agents run while this one holds
                inside.remove((agent_id, mode))
                released = (await agent(RELEASE, id=lease["id"]))["releaseResource"]
                assert released["status"] == "RELEASED"
    await asyncio.gather(*(work(i, agent_id, token) for i, (agent_id, token) in enumerate(agents)))
    assert broken == [] and len(granted) == 40
    records = await _resource_records(server)
    report = verify_resources(records)
    assert report.ok, report.first
    assert report.grants_checked >= 40
    code, out = await agentrm(server.url, "audit", "verify")
    assert code == 0 and "all resource invariants hold: exclusive holds never overlap" in out, out


async def _resource_records(server):
    from app.audit import Record
    from app.audit.resource_verify import CATEGORIES
    events = await server.runtime.store.read(0, 1_000_000, categories=CATEGORIES)
    return [Record(e.position, e.stream, e.version, e.type, e.data) for e in events]


async def test_shared_holds_coexist_and_capacity_is_honoured(server, operator):
    name = await define(operator, "tool", capacity=3)
    agents = [await register(operator, f"browser{i}") for i in range(5)]
    clients = [await GraphQLClient(server, token).__aenter__() for _, token in agents]
    try:
        leases = [await acquire(c, name, "SHARED") for c in clients[:4]]
        assert [x["status"] for x in leases] == ["HELD", "HELD", "HELD", "WAITING"]
        writer = await acquire(clients[4], name, "EXCLUSIVE")
        assert writer["status"] == "WAITING"
        view = resource(await operator(RESOURCES), name)
        assert view["holders"] == [{"agentId": a, "mode": "SHARED"} for a, _ in agents[:3]]
        assert view["waiters"] == [{"agentId": agents[3][0], "mode": "SHARED"},
                                   {"agentId": agents[4][0], "mode": "EXCLUSIVE"}]
        await clients[0](RELEASE, id=leases[0]["id"])
        view = resource(await operator(RESOURCES), name)
        assert [h["agentId"] for h in view["holders"]] == [agents[1][0], agents[2][0], agents[3][0]]
        for client, lease in zip(clients[1:4], leases[1:4]):
            await client(RELEASE, id=lease["id"])
        view = resource(await operator(RESOURCES), name)
        assert view["holders"] == [{"agentId": agents[4][0], "mode": "EXCLUSIVE"}] and view["waiters"] == []
        await clients[4](RELEASE, id=writer["id"])
    finally:
        for c in clients:
            await c.__aexit__(None, None, None)


async def test_a_reaped_hold_frees_its_waiter(server, operator):
    name = await define(operator, "env", lease=1.0)
    (a_id, a_token), (b_id, b_token) = [await register(operator, f"stager{i}") for i in range(2)]
    async with GraphQLClient(server, a_token) as a, GraphQLClient(server, b_token) as b:
        held = await acquire(a, name)
        assert held["status"] == "HELD"
        beat = (await a(HEARTBEAT, id=held["id"]))["heartbeatResource"]
        assert beat["status"] == "HELD" and beat["leaseExpiresAt"] >= held["leaseExpiresAt"]
        # a then goes silent; b blocks in its request until the reaper frees the hold
        waited = await acquire(b, name, wait=60)
        assert waited["status"] == "HELD" and waited["agentId"] == b_id
        a_story = [e.type for e in await decisions_of(server, held["id"])]
        assert a_story == [rev.RESOURCE_GRANTED, rev.RESOURCE_LEASE_EXTENDED, rev.RESOURCE_REAPED]
        b_story = await decisions_of(server, waited["id"])
        assert [e.type for e in b_story] == [rev.RESOURCE_WAITING, rev.RESOURCE_GRANTED]
        reap = (await decisions_of(server, held["id"]))[-1]
        assert reap.metadata["causation"] == "timer" and reap.position < b_story[-1].position
        assert reap.data["at"] >= reap.data["lease_expires_at"]
        with pytest.raises(GraphQLError) as refused:
            await a(RELEASE, id=held["id"])
        assert refused.value.code == "CONFLICT" and "REAPED" in str(refused.value)
        await b(RELEASE, id=waited["id"])


async def test_two_and_three_agent_deadlocks_are_refused_with_the_cycle_named(server, operator):
    for size in (2, 3):
        names = [await define(operator, f"r{i}") for i in range(size)]
        agents = [await register(operator, f"dl{size}-{i}") for i in range(size)]
        clients = [await GraphQLClient(server, token).__aenter__() for _, token in agents]
        try:
            held = [await acquire(c, n) for c, n in zip(clients, names)]
            assert all(x["status"] == "HELD" for x in held)
            for i in range(size - 1):          # agent i waits for agent i+1's resource
                assert (await acquire(clients[i], names[i + 1]))["status"] == "WAITING"
            head = await server.runtime.store.head()
            with pytest.raises(GraphQLError) as refused:
                await acquire(clients[-1], names[0])   # closes the cycle
            assert refused.value.code == "DEADLOCK"
            message = str(refused.value)
            assert "would deadlock" in message and all(a in message for a, _ in agents)
            [event] = await server.runtime.store.read(head, 100, types=[rev.RESOURCE_REFUSED])
            cycle = event.data["cycle"]
            assert [(c["agent_id"], c["waits_for"]) for c in cycle] == \
                [(agents[-1][0], agents[0][0])] + [(agents[i][0], agents[i + 1][0]) for i in range(size - 1)]
            assert [c["resource"] for c in cycle] == [names[0]] + names[1:]
            lease_id = event.data["lease_id"]
            story = await server.runtime.store.read(0, 10, streams=[lease_stream(lease_id)])
            assert [e.type for e in story] == [rev.RESOURCE_ACQUIRE_REQUESTED]   # the request is on record
            # the others still hold and wait as before: nothing hangs, release unwinds it
            for c, lease in zip(clients, held):
                await c(RELEASE, id=lease["id"])
        finally:
            for c in clients:
                await c.__aexit__(None, None, None)


async def test_waiters_are_granted_in_mlfq_order(server, operator):
    name = await define(operator, "api")
    holder = await register(operator, "holder")
    batch = await register(operator, "nightly", cls="BATCH")
    background = await register(operator, "indexer", cls="BACKGROUND")
    interactive = await register(operator, "chat")
    order = [holder, background, batch, interactive]      # the order they ask in
    clients = {agent_id: await GraphQLClient(server, token).__aenter__() for agent_id, token in order}
    try:
        leases = {}
        for agent_id, _ in order:
            leases[agent_id] = await acquire(clients[agent_id], name)
        assert [leases[a]["level"] for a, _ in order] == [0, 2, 1, 0]
        view = resource(await operator(RESOURCES), name)
        expected = [interactive[0], batch[0], background[0]]
        assert [w["agentId"] for w in view["waiters"]] == expected
        current = holder[0]
        granted = []
        for _ in expected:
            await clients[current](RELEASE, id=leases[current]["id"])
            [h] = resource(await operator(RESOURCES), name)["holders"]
            granted.append(h["agentId"])
            current = h["agentId"]
        assert granted == expected
        await clients[current](RELEASE, id=leases[current]["id"])
    finally:
        for c in clients.values():
            await c.__aexit__(None, None, None)


async def test_bad_resource_requests_get_clear_errors_and_append_nothing(server, operator):
    name = await define(operator, "bad")
    agent_id, token = await register(operator, "clumsy")
    await admitted(operator, agent_id)     # the scheduler's answer to the registration is in
    head = await server.runtime.store.head()
    async with GraphQLClient(server, token) as agent:
        cases = [
            (agent, DEFINE, dict(name="x:y", capacity=1, lease=30.0), "FORBIDDEN"),
            (operator, DEFINE, dict(name=name, capacity=1, lease=30.0), "CONFLICT"),
            (operator, DEFINE, dict(name="pool:sneaky", capacity=1, lease=30.0), "BAD_USER_INPUT"),
            (operator, DEFINE, dict(name="z:z", capacity=0, lease=30.0), "BAD_USER_INPUT"),
            (operator, ACQUIRE, dict(name=name, mode="SHARED", wait=0.0), "FORBIDDEN"),
            (agent, ACQUIRE, dict(name="nowhere:x", mode="SHARED", wait=0.0), "NOT_FOUND"),
            (agent, ACQUIRE, dict(name=name, mode="SHARED", wait=-1.0), "BAD_USER_INPUT"),
            (agent, RELEASE, dict(id="no-such-lease"), "NOT_FOUND"),
        ]
        for client, query, variables, code in cases:
            with pytest.raises(GraphQLError) as error:
                await client(query, **variables)
            assert error.value.code == code, (variables, error.value.errors)
    assert await appended_outside_pools(server, head) == []

"""Threat-model row: an agent's `events(after: 0)` subscription read every agent's events
and filtered them in Python, on every wake-up, with no cap on how many it held open; and
`schedulerAt` folded a pool's whole stream once per alias, up to 20 in one document.

An agent's subscription reads its own rows only (the filter is the log's read), still gets
every one of them in order; its ninth subscription is refused; a document asking for
schedulerAt more than twice is refused before anything is read."""
from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid

import pytest

from tests.client import CANCEL, CREATE_POOL, REQUEST, GraphQLClient, GraphQLError, admitted, register

OWN_EVENTS = "query($a: ID!) { events(after: 0, limit: 1000, agentId: $a) { position type } }"
FOLLOW = "subscription($a: ID) { events(after: 0, agentId: $a) { position type data } }"


async def new_pool(operator, lanes: int = 4) -> str:
    name = f"reads{uuid.uuid4().hex[:8]}"
    await operator(CREATE_POOL, name=name, lanes=lanes, rpm=100_000, tpm=10_000_000, lease=3600.0,
                   boost=None, limiter=None)
    return name


async def turns(server, token: str, count: int) -> None:
    """`count` turns requested and cancelled: a few events each that name the agent."""
    async with GraphQLClient(server, token) as agent:
        for _ in range(count):
            turn = (await agent(REQUEST, est=5, out=None, wait=5.0))["requestTurn"]
            with contextlib.suppress(GraphQLError):   # granted and cancelled, or already ended
                await agent(CANCEL, id=turn["id"])


@contextlib.contextmanager
def rows_read_by_followers(store, agent_id: str):
    """Every row the log's reads returned to a live subscription's follower of ``agent_id``.
    Other tests' subscriptions on the shared server follow the log too (other pools, other
    agents), so only reads that name the agent count; a follower that read the whole log
    and filtered afterwards names no agent, reads nothing here, and fails the test."""
    rows: list = []
    real = store.read

    async def counting(*args, **kwargs):
        found = await real(*args, **kwargs)
        if sys._getframe(1).f_code.co_name == "follow" and kwargs.get("agent_id") == agent_id:
            rows.extend(found)
        return found
    store.read = counting
    try:
        yield rows
    finally:
        del store.read


async def test_an_agents_events_from_zero_read_only_its_own_rows(server, operator):
    pool = await new_pool(operator)
    a_id, a_token = await register(operator, "reader", pool)
    b_id, b_token = await register(operator, "noisy", pool)
    await admitted(operator, a_id)
    await admitted(operator, b_id)
    await turns(server, b_token, 25)   # the noise: another agent's events
    await turns(server, a_token, 3)
    await turns(server, b_token, 25)
    await asyncio.sleep(0.5)           # the scheduler's decisions on A's last turn
    own = (await operator(OWN_EVENTS, a=a_id))["events"]
    assert len(own) >= 6
    with rows_read_by_followers(server.runtime.store, a_id) as rows:
        async with GraphQLClient(server, a_token) as a, a.subscribe(FOLLOW, a=None) as sub:
            got = [(await sub.next())["events"] for _ in own]
            # And live: a new turn of A's comes after everything before it.
            await turns(server, a_token, 1)
            live = (await sub.next())["events"]
    assert [(e["position"], e["type"]) for e in got] == [(e["position"], e["type"]) for e in own]
    assert live["position"] > own[-1]["position"] and live["data"]["agent_id"] == a_id
    assert all(e["data"]["agent_id"] == a_id for e in got)
    assert rows, "the follower read nothing"
    foreign = [r for r in rows if r.data.get("agent_id") != a_id]
    assert not foreign, f"the subscription read {len(foreign)} rows of others ({len(rows)} in all)"


async def test_an_agents_subscriptions_beyond_the_cap_are_refused(server, operator):
    cap = 8   # AGENTRM_MAX_SUBSCRIPTIONS_PER_AGENT's default, which the test server keeps
    pool = await new_pool(operator)
    a_id, a_token = await register(operator, "greedy", pool)
    await admitted(operator, a_id)
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(GraphQLClient(server, a_token))
        open_ = []
        for _ in range(cap):
            sub = await stack.enter_async_context(a.subscribe(FOLLOW, a=None))
            assert (await sub.next())["events"]["data"]["agent_id"] == a_id   # each one works
            open_.append(sub)
        async with a.subscribe(FOLLOW, a=None) as extra:
            with pytest.raises(GraphQLError) as refused:
                await extra.next()
        assert refused.value.code == "LIMIT_EXCEEDED"
        turn_doc = f"subscription {{ turn(turnId: \"{uuid.uuid4()}\") {{ id }} }}"
        async with a.subscribe(turn_doc) as extra:   # the turn subscription counts too
            with pytest.raises(GraphQLError) as refused:
                await extra.next()
        assert refused.value.code == "LIMIT_EXCEEDED"
        # The operator is not counted against the agent's cap.
        async with operator.subscribe(FOLLOW, a=a_id) as watching:
            assert (await watching.next())["events"]["data"]["agent_id"] == a_id
        # A closed subscription gives its slot back.
        await open_.pop().__aexit__(None, None, None)
        await asyncio.sleep(0.3)
        async with a.subscribe(FOLLOW, a=None) as again:
            assert (await again.next())["events"]["data"]["agent_id"] == a_id


@contextlib.contextmanager
def log_queries_of_followers(store, agent_id: str):
    """Each query of the log a live subscription's follower of ``agent_id`` makes itself
    (a read of the shared tail, or of the tail cache, is not one)."""
    queries: list = []
    real = store._read_log

    async def counting(*args, **kwargs):
        frame = sys._getframe(1)
        for _ in range(4):   # follow -> read -> _read_log
            if frame is None:
                break
            if frame.f_code.co_name == "follow" and kwargs.get("agent_id") == agent_id:
                queries.append(args)
                break
            frame = frame.f_back
        return await real(*args, **kwargs)
    store._read_log = counting
    try:
        yield queries
    finally:
        del store._read_log


async def test_an_agents_open_subscriptions_cost_no_query_per_commit_of_others(server, operator):
    # The subscriber of `agentrm bench abuse` holds its eight subscriptions open while its
    # pool commits: each follower of the agent queried the log on every commit anyone made.
    cap = 8
    pool = await new_pool(operator)
    a_id, a_token = await register(operator, "watcher", pool)
    b_id, b_token = await register(operator, "busy", pool)
    await admitted(operator, a_id)
    before = await admitted(operator, b_id)
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(GraphQLClient(server, a_token))
        subs = [await stack.enter_async_context(a.subscribe(FOLLOW, a=None)) for _ in range(cap)]
        for sub in subs:   # each is live: it answered with the agent's registration
            assert (await sub.next())["events"]["data"]["agent_id"] == a_id
        with log_queries_of_followers(server.runtime.store, a_id) as queries:
            await turns(server, b_token, 20)   # another agent's commits, none naming A
            await asyncio.sleep(0.3)
        commits = (await operator("query($a: Int!) { events(after: $a, limit: 1000) { position } }",
                                  a=before))["events"]
        assert len(commits) >= 40
        assert len(queries) < len(commits) // 2, (
            f"{cap} followers of an agent queried the log {len(queries)} times over {len(commits)} events of others")
        # And they still follow: the agent's next events reach every one of them, in order.
        await turns(server, a_token, 1)
        for sub in subs:
            seen = [(await sub.next())["events"]]
            while seen[-1]["position"] <= commits[-1]["position"]:   # its earlier events first
                seen.append((await asyncio.wait_for(sub.next(), 10))["events"])
            assert all(e["data"]["agent_id"] == a_id for e in seen)
            assert [e["position"] for e in seen] == sorted({e["position"] for e in seen})


async def test_twenty_scheduler_at_aliases_are_refused_and_read_nothing(server, operator):
    pool = await new_pool(operator)
    a_id, a_token = await register(operator, "scrubber", pool)
    position = await admitted(operator, a_id)
    fields = " ".join(f"s{i}: schedulerAt(position: {position}, pool: \"{pool}\") {{ position }}"
                      for i in range(20))
    store = server.runtime.store
    reads: list = []
    real = store.read

    async def counting(*args, **kwargs):
        if kwargs.get("streams") == [f"pool-{pool}"]:
            reads.append(args)
        return await real(*args, **kwargs)
    store.read = counting
    try:
        async with GraphQLClient(server, a_token) as a:
            body = await a.raw(f"{{ {fields} }}")
            assert body.get("data") is None
            assert [e["extensions"]["code"] for e in body["errors"]] == ["LIMIT_EXCEEDED"]
            assert not reads, "the refused document folded the pool's stream"
            # Two are allowed; the same past moment asked again is folded once.
            two = " ".join(f"s{i}: schedulerAt(position: {position}, pool: \"{pool}\") {{ position }}"
                           for i in range(2))
            first = await a(f"{{ {two} }}")
            again = await a(f"{{ {two} }}")
    finally:
        del store.read
    assert first == again and first["s0"]["position"] <= position
    assert len(reads) == 1, f"the pool's stream was folded {len(reads)} times for one past moment"

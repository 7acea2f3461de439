"""The GraphQL API over real HTTP and WebSocket, against the real database."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.client import (
    CANCEL,
    COMPLETE,
    CREATE_POOL,
    HEARTBEAT,
    REQUEST,
    SCHEDULER,
    TURN_FIELDS,
    GraphQLClient,
    GraphQLError,
    admitted,
    appended_about,
    register,
)

ROOT = Path(__file__).resolve().parents[2]


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def new_pool(operator, lanes=2, lease=30.0, rpm=6000, tpm=1_000_000, boost=None, limiter=None) -> str:
    name = unique("p")
    await operator(CREATE_POOL, name=name, lanes=lanes, rpm=rpm, tpm=tpm, lease=lease, boost=boost, limiter=limiter)
    return name


async def head(server) -> int:
    return await server.runtime.store.head()


async def fate_after_grant(agent, turn_id: str, timeout: float) -> dict:
    """Subscribe to a granted turn and return how it ended. The subscription starts after
    the grant, so on a loaded machine the turn may already have ended: that end is its
    first state then."""
    async with agent.subscribe(f"subscription($id: ID!) {{ turn(turnId: $id) {{ {TURN_FIELDS} }} }}",
                               id=turn_id) as sub:
        first = (await sub.next())["turn"]
        if first["finishedAt"] is not None:
            return first
        assert first["status"] == "GRANTED", first
        return (await sub.next(timeout=timeout))["turn"]


async def events_of(operator, after: int, types: list[str], agent_id: str | None = None) -> list[dict]:
    found = await operator("query($a: Int!, $t: [String!], $id: ID) { events(after: $a, limit: 1000, types: $t, "
                           "agentId: $id) { position type data } }", a=after, t=types, id=agent_id)
    return found["events"]


async def test_turn_lifecycle_request_heartbeat_complete(server, operator):
    pool = await new_pool(operator)
    agent_id, token = await register(operator, "worker", pool)
    async with GraphQLClient(server, token) as agent:
        me = await agent("{ me { id name pool level state priorityClass } }")
        assert me["me"] == {"id": agent_id, "name": "worker", "pool": pool, "level": 0,
                            "state": "ACTIVE", "priorityClass": "INTERACTIVE"}
        turn = (await agent(REQUEST, est=1000, out=200, wait=5))["requestTurn"]
        assert turn["status"] == "GRANTED" and turn["lane"] in (0, 1) and turn["leaseExpiresAt"]
        beat = (await agent(HEARTBEAT, id=turn["id"]))["heartbeat"]
        assert beat["leaseExpiresAt"] > turn["leaseExpiresAt"]
        done = (await agent(COMPLETE, id=turn["id"], outcome="OK", p=900, c=150))["completeTurn"]
        assert done["status"] == "COMPLETED" and done["outcome"] == "OK" and done["finishedAt"]
        state = (await agent(SCHEDULER, pool=pool))["scheduler"]
        assert all(lane["turnId"] is None for lane in state["lanes"])


async def test_completion_refunds_the_reservation_minus_real_usage(server, operator):
    """Exact numbers from the log: a pool of 6000 tpm refills 100 tokens/s, so a grant of
    4000 reserved tokens leaves the bucket far from full, and the refund of 4000 - 1500 is
    visible to the token (no refund: 2000 left; doubled: capped at 6000; 10x refill: off
    by the elapsed seconds times 900)."""
    tpm, rpm = 6000, 600
    pool = await new_pool(operator, lanes=1, rpm=rpm, tpm=tpm, limiter="TOKEN_BUCKET")
    _, token = await register(operator, "frugal", pool)
    start = await head(server)
    async with GraphQLClient(server, token) as agent:
        turn = (await agent(REQUEST, est=3000, out=1000, wait=5))["requestTurn"]
        assert turn["status"] == "GRANTED"
        await agent(COMPLETE, id=turn["id"], outcome="OK", p=1000, c=500)
    log = {e["type"]: e for e in await events_of(operator, start, ["TurnGranted", "TurnCompleted"])}
    granted, completed = log["TurnGranted"], log["TurnCompleted"]
    assert granted["data"]["reserved_tokens"] == 4000
    elapsed = completed["data"]["at"] - granted["data"]["at"]
    # What the rule gives, by hand: full bucket, minus the reservation, refilled at tpm/60
    # per second while the call ran, plus the reservation back, minus what was used.
    assert elapsed * tpm / 60 < 1500, "the call ran so long that the bucket refilled to its cap"
    expected_tokens = tpm - 4000 + elapsed * tpm / 60 + 4000 - 1500
    expected_requests = min(rpm, rpm - 1 + elapsed * rpm / 60)   # a bucket holds at most a minute's worth
    query = ("query($p: Int!, $pool: String!) { schedulerAt(position: $p, pool: $pool) { "
             "rateLimit { availableTokens availableRequests } } }")
    at_completion = (await operator(query, p=completed["position"], pool=pool))["schedulerAt"]["rateLimit"]
    assert at_completion["availableTokens"] == pytest.approx(expected_tokens, abs=0.01)
    assert at_completion["availableRequests"] == pytest.approx(expected_requests, abs=0.01)


async def test_queueing_when_lanes_are_full_and_wait_timeout_keeps_it_queued(server, operator):
    pool = await new_pool(operator, lanes=1)
    _, t1 = await register(operator, "first", pool)
    _, t2 = await register(operator, "second", pool)
    async with GraphQLClient(server, t1) as a1, GraphQLClient(server, t2) as a2:
        held = (await a1(REQUEST, est=10, out=10, wait=5))["requestTurn"]
        assert held["status"] == "GRANTED"
        waiting = (await a2(REQUEST, est=10, out=10, wait=0.3))["requestTurn"]
        assert waiting["status"] == "QUEUED" and waiting["level"] == 0
        state = (await operator(SCHEDULER, pool=pool))["scheduler"]
        assert state["levels"][0]["queued"] == [{"turnId": waiting["id"], "agentId": waiting["agentId"]}]
        async with a2.subscribe(f"subscription($id: ID!) {{ turn(turnId: $id) {{ {TURN_FIELDS} }} }}",
                                id=waiting["id"]) as sub:
            first = (await sub.next())["turn"]
            assert first["status"] == "QUEUED"
            await a1(COMPLETE, id=held["id"], outcome="OK", p=10, c=10)
            granted = (await sub.next())["turn"]
            assert granted["status"] == "GRANTED" and granted["lane"] == 0
            await a2(COMPLETE, id=waiting["id"], outcome="OK", p=10, c=10)
            assert (await sub.next())["turn"]["status"] == "COMPLETED"


async def test_auth_rules(server, operator):
    pool = await new_pool(operator)
    alice_id, t1 = await register(operator, "alice", pool)
    other_pool = await new_pool(operator)
    bob_id, t2 = await register(operator, "bob", other_pool)
    for agent_id in (alice_id, bob_id):
        await admitted(operator, agent_id)
    async with GraphQLClient(server, None) as anon, GraphQLClient(server, "Bearer-nonsense") as bad, \
            GraphQLClient(server, t1) as alice, GraphQLClient(server, t2) as bob:
        before = await head(server)
        for client in (anon, bad):
            with pytest.raises(GraphQLError) as err:
                await client(REQUEST, est=1, out=1, wait=0)
            assert err.value.code == "UNAUTHENTICATED"
            with pytest.raises(GraphQLError) as err:
                await client(CREATE_POOL, name=unique("x"), lanes=1, rpm=1, tpm=1, lease=5.0)
            assert err.value.code == "UNAUTHENTICATED"
        with pytest.raises(GraphQLError) as err:
            await alice(CREATE_POOL, name=unique("x"), lanes=1, rpm=1, tpm=1, lease=5.0)
        assert err.value.code == "FORBIDDEN"
        with pytest.raises(GraphQLError) as err:
            await alice("{ agents { id } }")
        assert err.value.code == "FORBIDDEN"
        after = await appended_about(server, before, alice_id, bob_id) + \
            await events_of(operator, before, ["PoolCreated"])
        assert after == [], f"an unauthenticated or forbidden request appended events: {after}"
        turn = (await alice(REQUEST, est=1, out=1, wait=5))["requestTurn"]
        before = await head(server)
        for query, variables in ((HEARTBEAT, {"id": turn["id"]}), (CANCEL, {"id": turn["id"]}),
                                 (COMPLETE, {"id": turn["id"], "outcome": "OK"})):
            with pytest.raises(GraphQLError) as err:
                await bob(query, **variables)
            assert err.value.code == "FORBIDDEN"
        with pytest.raises(GraphQLError) as err:
            await bob(SCHEDULER, pool=pool)
        assert err.value.code == "FORBIDDEN"
        refused = await appended_about(server, before, alice_id, bob_id, turn["id"])
        assert refused == [], f"a refused request appended events: {refused}"
        await alice(COMPLETE, id=turn["id"], outcome="OK", p=1, c=1)


async def test_bad_input_gets_a_clear_error_and_appends_nothing(server, operator):
    pool = await new_pool(operator, tpm=10_000)
    agent_id, token = await register(operator, "careless", pool)
    async with GraphQLClient(server, token) as agent:
        turn = (await agent(REQUEST, est=10, out=10, wait=5))["requestTurn"]
        before = await head(server)
        cases = [
            (REQUEST, {"est": -5, "out": 0, "wait": 0}, "BAD_USER_INPUT", "estimatedTokens"),
            (REQUEST, {"est": 9_000, "out": 5_000, "wait": 0}, "BAD_USER_INPUT", "exceeds"),
            (REQUEST, {"est": 1, "out": 1, "wait": 10_000}, "BAD_USER_INPUT", "waitSeconds"),
            (HEARTBEAT, {"id": str(uuid.uuid4())}, "FORBIDDEN", "no turn of yours"),   # as for a foreign turn
            (COMPLETE, {"id": turn["id"], "outcome": "OK", "p": -1}, "BAD_USER_INPUT", "promptTokens"),
            (COMPLETE, {"id": turn["id"], "outcome": "OK", "headers": "{not json"}, "BAD_USER_INPUT", "JSON"),
            (COMPLETE, {"id": turn["id"], "outcome": "OK", "headers": [1, 2]}, "BAD_USER_INPUT", "object"),
            (COMPLETE, {"id": turn["id"], "outcome": "MAYBE"}, None, "MAYBE"),
        ]
        for query, variables, code, words in cases:
            with pytest.raises(GraphQLError) as err:
                await agent(query, **variables)
            if code:
                assert err.value.code == code, (variables, err.value.errors)
            assert words in str(err.value), (words, str(err.value))
        with pytest.raises(GraphQLError) as err:
            await operator(CREATE_POOL, name="bad name!", lanes=0, rpm=1, tpm=1, lease=5.0)
        assert err.value.code == "BAD_USER_INPUT" and "lanes" in str(err.value)
        with pytest.raises(GraphQLError) as err:
            await operator(CREATE_POOL, name=pool, lanes=1, rpm=1, tpm=1, lease=5.0)
        assert err.value.code == "CONFLICT"
        with pytest.raises(GraphQLError) as err:
            await operator("mutation { registerAgent(input: {name: \"x\", pool: \"nope\"}) { token } }")
        assert err.value.code == "NOT_FOUND"
        assert await appended_about(server, before, agent_id, turn["id"], "bad name!", "nope") == []
        assert await events_of(operator, before, ["PoolCreated", "AgentRegistered"]) == []
        await agent(COMPLETE, id=turn["id"], outcome="OK", p=1, c=1)
        before = await head(server)
        with pytest.raises(GraphQLError) as err:
            await agent(COMPLETE, id=turn["id"], outcome="OK", p=1, c=1)
        assert err.value.code == "CONFLICT" and "already completed" in str(err.value)
        assert await appended_about(server, before, agent_id, turn["id"]) == []
    # a body that is not JSON at all
    async with GraphQLClient(server, None) as raw:
        response = await raw._http.post(server.http, content=b"{oops", headers={"content-type": "application/json"})
        assert response.status_code == 400 and response.json()["errors"][0]["extensions"]["code"] == "BAD_REQUEST"


TURN_TYPES = ["TurnRequested", "TurnQueued", "TurnGranted", "CompletionReported", "TurnCompleted"]


async def test_events_query_and_subscription_replay_then_live_without_gaps(server, operator):
    pool = await new_pool(operator)
    agent_id, token = await register(operator, "watched", pool)
    start = await head(server)
    async with GraphQLClient(server, token) as agent:
        t1 = (await agent(REQUEST, est=5, out=5, wait=5))["requestTurn"]
        async with operator.subscribe(
                "subscription($after: Int, $agent: ID, $types: [String!]) { events(after: $after, "
                "agentId: $agent, types: $types) { position type data } }", after=start, agent=agent_id,
                types=TURN_TYPES) as sub:
            replayed = [(await sub.next())["events"] for _ in range(3)]
            assert [e["type"] for e in replayed] == ["TurnRequested", "TurnQueued", "TurnGranted"]
            await agent(COMPLETE, id=t1["id"], outcome="OK", p=5, c=5)
            live = [(await sub.next())["events"] for _ in range(2)]
            assert [e["type"] for e in live] == ["CompletionReported", "TurnCompleted"]
            positions = [e["position"] for e in replayed + live]
            assert positions == sorted(set(positions))
    listed = (await operator("query($a: Int!, $id: ID, $t: [String!]) { events(after: $a, agentId: $id, "
                             "types: $t) { position type } }", a=start, id=agent_id, t=TURN_TYPES))["events"]
    assert [e["position"] for e in listed] == positions


async def test_cancel_queued_and_granted_turns(server, operator):
    pool = await new_pool(operator, lanes=1)
    _, token = await register(operator, "canceller", pool)
    async with GraphQLClient(server, token) as agent:
        granted = (await agent(REQUEST, est=1, out=1, wait=5))["requestTurn"]
        queued = (await agent(REQUEST, est=1, out=1, wait=0))["requestTurn"]
        assert queued["status"] == "QUEUED"
        assert (await agent(CANCEL, id=queued["id"]))["cancelTurn"]["status"] == "CANCELLED"
        assert (await operator(CANCEL, id=granted["id"]))["cancelTurn"]["status"] == "CANCELLED"
        state = (await operator(SCHEDULER, pool=pool))["scheduler"]
        assert state["lanes"][0]["turnId"] is None


async def test_zombie_is_reaped_and_repeat_offender_quarantined_until_released(server, operator):
    # Three hung calls at once, each on its own lane, so that one 5 s lease covers all three.
    pool = await new_pool(operator, lanes=3, lease=5.0)
    agent_id, token = await register(operator, "zombie", pool)
    async with GraphQLClient(server, token) as agent:
        turns = [(await agent(REQUEST, est=1, out=1, wait=5))["requestTurn"] for _ in range(3)]  # the default threshold
        assert [t["status"] for t in turns] == ["GRANTED"] * 3
        for turn in turns:
            reaped = await fate_after_grant(agent, turn["id"], timeout=30)
            assert reaped["status"] == "REAPED" and reaped["reason"] == "lease expired"
        me = (await agent("{ me { state reaps } }"))["me"]
        assert me == {"state": "QUARANTINED", "reaps": 3}
        with pytest.raises(GraphQLError) as err:
            await agent(REQUEST, est=1, out=1, wait=0)
        assert err.value.code == "FORBIDDEN"
        released = (await operator("mutation($id: ID!) { releaseAgent(agentId: $id) { state } }", id=agent_id))
        assert released["releaseAgent"]["state"] == "ACTIVE"
        turn = (await agent(REQUEST, est=1, out=1, wait=5))["requestTurn"]
        assert turn["status"] == "GRANTED"
        await agent(COMPLETE, id=turn["id"], outcome="OK", p=1, c=1)


async def test_an_agents_429_pauses_that_agent_and_a_second_agents_pauses_the_pool(server, operator):
    # Two lanes, both held by the agents that will report a 429. The first report is a
    # claim: only its agent pauses, and the bystander is granted the lane it frees. The
    # second, from another agent within the cap, pauses the pool: the bystander's next turn
    # is queued while the lane is free, and granted only once the pause is over.
    pool = await new_pool(operator, lanes=2)
    _, t1 = await register(operator, "hit429", pool)
    _, t2 = await register(operator, "hit429-too", pool)
    _, t3 = await register(operator, "bystander", pool)
    start = await head(server)
    async with GraphQLClient(server, t1) as a1, GraphQLClient(server, t2) as a2, GraphQLClient(server, t3) as a3:
        first = (await a1(REQUEST, est=10, out=10, wait=5))["requestTurn"]
        second = (await a2(REQUEST, est=10, out=10, wait=5))["requestTurn"]
        assert first["status"] == second["status"] == "GRANTED"
        await a1(COMPLETE, id=first["id"], outcome="RATE_LIMITED", retry=3600,
                 headers={"x-ratelimit-remaining-requests": "0", "retry-after": "1"})
        alone = (await a3(REQUEST, est=10, out=10, wait=10))["requestTurn"]
        assert alone["status"] == "GRANTED"
        state = (await operator(SCHEDULER, pool=pool))["scheduler"]
        assert state["rateLimit"]["rateFactor"] == 1.0 and state["rateLimit"]["pausedUntil"] is None
        await a3(COMPLETE, id=alone["id"], outcome="OK", p=10, c=10)
        await a2(COMPLETE, id=second["id"], outcome="RATE_LIMITED", retry=1.5)
        state = (await operator(SCHEDULER, pool=pool))["scheduler"]
        assert state["rateLimit"]["rateFactor"] == 0.5
        waiting = (await a3(REQUEST, est=10, out=10, wait=0))["requestTurn"]
        async with a3.subscribe(f"subscription($id: ID!) {{ turn(turnId: $id) {{ {TURN_FIELDS} }} }}",
                                id=waiting["id"]) as sub:
            if waiting["status"] == "QUEUED" and (await sub.next())["turn"]["status"] == "QUEUED":
                granted = (await sub.next(timeout=15))["turn"]
                assert granted["status"] == "GRANTED"
        await a3(COMPLETE, id=waiting["id"], outcome="OK", p=10, c=10)
    log = await events_of(operator, start, ["AgentPaused", "PoolPaused", "PoolResumed", "TurnGranted"])
    claim = next(e for e in log if e["type"] == "AgentPaused")
    paused = next(e for e in log if e["type"] == "PoolPaused")
    resumed = next(e for e in log if e["type"] == "PoolResumed")
    bystander = next(e for e in log if e["type"] == "TurnGranted" and e["data"]["turn_id"] == waiting["id"])
    # The claim is capped at 30 s; the corroborated report keeps its own retry-after (within
    # the cap), plus at most a second of jitter.
    assert claim["data"]["retry_after"] == 30.0 and claim["data"]["claimed_retry_after"] == 3600.0
    assert paused["data"]["retry_after"] == 1.5 and 0 <= paused["data"]["jitter"] < 1.0
    assert paused["data"]["reporter"] == second["agentId"]
    # Nobody hammers the provider during the pause: a lane was free, yet the queued turn was
    # granted only once the pause was over.
    assert paused["position"] < resumed["position"] < bystander["position"]
    assert bystander["data"]["at"] >= paused["data"]["until"]


async def test_scheduler_at_a_past_position(server, operator):
    pool = await new_pool(operator, lanes=1)
    _, token = await register(operator, "traveller", pool)
    async with GraphQLClient(server, token) as agent:
        turn = (await agent(REQUEST, est=1, out=1, wait=5))["requestTurn"]
        granted_at = await head(server)
        await agent(COMPLETE, id=turn["id"], outcome="OK", p=1, c=1)
    query = "query($p: Int!, $pool: String!) { schedulerAt(position: $p, pool: $pool) { position lanes { turnId } } }"
    past = (await operator(query, p=granted_at, pool=pool))["schedulerAt"]
    assert past["lanes"][0]["turnId"] == turn["id"]
    now = (await operator(SCHEDULER, pool=pool))["scheduler"]
    assert now["lanes"][0]["turnId"] is None


async def test_replay_check_query(server, operator):
    report = (await operator("{ replayCheck { eventsReplayed liveHash replayHash matches } }"))["replayCheck"]
    assert report["matches"] and report["eventsReplayed"] > 0 and report["liveHash"] == report["replayHash"]


async def test_exported_sdl_matches_the_code():
    from app.api.schema import schema
    exported = (ROOT / "schema" / "agentrm.graphql").read_text()
    assert exported.strip() == schema.as_str().strip(), "schema/agentrm.graphql drifted: run `make schema`"


STREAMING_REQUEST = f"""mutation($est: Int!, $wait: Float!) {{
  requestTurn(input: {{estimatedTokens: $est, maxOutputTokens: 10, waitSeconds: $wait, streams: true}}) {{
    {TURN_FIELDS} streams }} }}"""


async def test_streaming_turn_that_never_starts_is_reaped_at_its_start_deadline(server, operator):
    name = unique("p")
    created = await operator("""mutation($name: String!) { createPool(input: {name: $name, lanes: 2, rpm: 6000,
        tpm: 1000000, leaseSeconds: 60, startTimeoutFloorSeconds: 0.5}) { startTimeoutFloorSeconds } }""", name=name)
    assert created["createPool"]["startTimeoutFloorSeconds"] == 0.5
    _, token = await register(operator, "streamer", name)
    async with GraphQLClient(server, token) as agent:
        # Warm the estimator: 8 streaming calls whose first chunk comes at once.
        for _ in range(8):
            turn = (await agent(STREAMING_REQUEST, est=100, wait=5))["requestTurn"]
            assert turn["status"] == "GRANTED" and turn["streams"] is True
            await agent(HEARTBEAT, id=turn["id"])
            await agent(COMPLETE, id=turn["id"], outcome="OK", p=100, c=5)
        plain = (await agent(REQUEST, est=100, out=10, wait=5))["requestTurn"]   # not streaming
        hung = (await agent(STREAMING_REQUEST, est=100, wait=5))["requestTurn"]
        assert hung["status"] == "GRANTED"
        # Reaped long before the 60 s lease: the start deadline is about the floor here.
        reaped = await fate_after_grant(agent, hung["id"], timeout=15)
        assert reaped["status"] == "REAPED" and reaped["reason"] == "no first chunk by the start deadline"
        still = (await agent("query($id: ID!) { turn(id: $id) { status } }", id=plain["id"]))["turn"]
        assert still["status"] == "GRANTED"      # a non-streaming turn keeps its whole lease
        await agent(COMPLETE, id=plain["id"], outcome="OK", p=100, c=5)
    with pytest.raises(GraphQLError) as err:
        await operator("""mutation($name: String!) { createPool(input: {name: $name, lanes: 1, rpm: 60,
            tpm: 1000, startTimeoutFloorSeconds: 0}) { name } }""", name=unique("p"))
    assert err.value.code == "BAD_USER_INPUT" and "startTimeoutFloorSeconds" in str(err.value)


RUN_REQUEST = (f"""mutation($run: String) {{
  requestTurn(input: {{estimatedTokens: 10, maxOutputTokens: 10, waitSeconds: 5, runId: $run}}) """
               f"{{ {TURN_FIELDS} }} }}")


async def test_a_run_id_travels_from_graphql_into_the_log_and_a_bad_one_is_refused(server, operator):
    pool = await new_pool(operator)
    agent_id, token = await register(operator, "runner", pool)
    async with GraphQLClient(server, token) as agent:
        before = await head(server)
        turn = (await agent(RUN_REQUEST, run="job-42"))["requestTurn"]
        assert turn["status"] == "GRANTED"
        found = await events_of(operator, before, ["TurnRequested", "TurnQueued"])
        assert [(e["type"], e["data"]["turn_id"], e["data"]["run_id"]) for e in found] == \
            [("TurnRequested", turn["id"], "job-42"), ("TurnQueued", turn["id"], "job-42")]
        before = await head(server)
        with pytest.raises(GraphQLError) as err:
            await agent(RUN_REQUEST, run="x" * 201)
        assert err.value.code == "BAD_USER_INPUT" and "runId" in str(err.value.errors)
        assert await appended_about(server, before, agent_id) == []

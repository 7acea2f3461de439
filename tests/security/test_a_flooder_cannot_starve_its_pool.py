"""Threat-model row: one agent keeps its queue full and every other agent of its pool
waits behind its whole backlog. The deadline order was first come, first served among
turns of one class: a flooder refilling its 32 queued turns as each was granted put an
honest agent's turn behind all of them, every time. The order's backlog slack
(agentBacklogSlackSeconds, app/domain/ordering.py) puts every turn of an agent that holds
or queues n turns 2 s x (n - 1) later, at most 60 s: the honest agent's single turn goes
ahead of the flooder's backlog, its oldest turn included, while the flooder still gets
every lane nobody else asks for.

When the provider's rate budget is what is short, the order alone is not enough: the
flooder spent the budget to its last request and the honest agent's next call waited for
the window to slide (about 100 ms per grant at 600 RPM). The light-agent reserve
(lightAgentReserve, app/domain/limiter.py) keeps the last tenth of the budget for agents
with one turn at a time.

When lanes are what is short, the flooder took every lane the moment it freed (its queue is
never empty) and held each while its client got round to completing: an honest agent's
turn waited for the next completion. The same reserve keeps ceil(0.1 x lanes) lanes free
for agents with one turn at a time."""
from __future__ import annotations

import asyncio
import uuid

from tests.client import CANCEL, COMPLETE, REQUEST, GraphQLClient, register
from tests.integration.test_api import events_of, head

QUEUE_CAP = 32   # the per-agent cap on queued turns (app/service.py)


async def test_an_honest_turn_is_granted_next_after_the_flooders_turn_in_flight(server, operator):
    pool = "flood_" + uuid.uuid4().hex[:8]
    await operator("mutation($i: PoolInput!) { createPool(input: $i) { name } }",
                   i={"name": pool, "lanes": 1, "rpm": 6000, "tpm": 10_000_000, "leaseSeconds": 60})
    _, flood_token = await register(operator, "flooder", pool)
    honest_id, honest_token = await register(operator, "honest", pool)
    start = await head(server)
    async with GraphQLClient(server, flood_token) as flood, GraphQLClient(server, honest_token) as honest:
        turns = [(await flood(REQUEST, est=10, out=10, wait=0))["requestTurn"] for _ in range(QUEUE_CAP + 1)]
        assert [t["status"] for t in turns] == ["GRANTED"] + ["QUEUED"] * QUEUE_CAP   # it holds the one lane
        mine = (await honest(REQUEST, est=10, out=10, wait=0))["requestTurn"]
        assert mine["status"] == "QUEUED"
        await flood(COMPLETE, id=turns[0]["id"], outcome="OK", p=10, c=10, retry=None, headers=None)
        grants: list[dict] = []
        for _ in range(100):
            grants = await events_of(operator, start, ["TurnGranted"])
            if len(grants) >= 2:
                break
            await asyncio.sleep(0.1)
        # The lane's next grant is the honest agent's, not the flooder's oldest queued turn.
        assert [g["data"]["turn_id"] for g in grants] == [turns[0]["id"], mine["id"]]
        assert grants[1]["data"]["agent_id"] == honest_id
        await honest(COMPLETE, id=mine["id"], outcome="OK", p=10, c=10, retry=None, headers=None)
        for turn in turns[1:]:
            await flood(CANCEL, id=turn["id"])


async def flooder_and_honest(operator, *, lanes: int, rpm: int) -> tuple[str, str]:
    """(the flooder's token, the honest agent's token) in a new pool of fixed lanes."""
    pool = "flood_" + uuid.uuid4().hex[:8]
    await operator("mutation($i: PoolInput!) { createPool(input: $i) { name } }",
                   i={"name": pool, "lanes": lanes, "rpm": rpm, "tpm": 10_000_000, "leaseSeconds": 60,
                      "adaptiveLanes": False})
    _, flood_token = await register(operator, "flooder", pool)
    _, honest_token = await register(operator, "honest", pool)
    return flood_token, honest_token


async def test_an_honest_turn_finds_budget_the_flooder_could_not_spend(server, operator):
    # 20 requests a minute and lanes to spare: the flooder's 25 turns are granted only down
    # to the reserve (18 of 20), and the honest agent's one turn is granted at once.
    flood_token, honest_token = await flooder_and_honest(operator, lanes=64, rpm=20)
    async with GraphQLClient(server, flood_token) as flood, GraphQLClient(server, honest_token) as honest:
        turns = [(await flood(REQUEST, est=10, out=10, wait=0))["requestTurn"] for _ in range(25)]
        assert [t["status"] for t in turns].count("GRANTED") == 18
        mine = (await honest(REQUEST, est=10, out=10, wait=0))["requestTurn"]
        assert mine["status"] == "GRANTED"
        for turn in turns:
            await flood(CANCEL, id=turn["id"])
        await honest(CANCEL, id=mine["id"])


async def test_an_honest_turn_takes_a_lane_the_flooder_had_to_leave_free(server, operator):
    # 4 lanes and budget to spare: the flooder's backlog fills 3 of them and leaves the
    # fourth (ceil(0.1 x 4) = 1) free, so the honest agent's one turn is granted at once
    # rather than after the flooder's next completion.
    flood_token, honest_token = await flooder_and_honest(operator, lanes=4, rpm=6000)
    async with GraphQLClient(server, flood_token) as flood, GraphQLClient(server, honest_token) as honest:
        turns = [(await flood(REQUEST, est=10, out=10, wait=0))["requestTurn"] for _ in range(QUEUE_CAP)]
        mine = (await honest(REQUEST, est=10, out=10, wait=0))["requestTurn"]
        assert mine["status"] == "GRANTED"
        assert [t["status"] for t in turns].count("GRANTED") == 3
        for turn in turns:
            await flood(CANCEL, id=turn["id"])
        await honest(CANCEL, id=mine["id"])

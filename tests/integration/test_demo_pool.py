"""The demo fleet works in a pool of its own, so the `default` pool serves a newcomer's
first gateway call at full speed; and `serve --no-demo` stops the fleet but keeps the demo
echo model as the `default` pool's upstream when no upstream is configured."""
from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest_asyncio
from openai import AsyncOpenAI

from app.demo import DEMO_POOL, FLEET
from app.domain import events as ev
from app.eventstore.listener import follow
from tests.client import GraphQLClient, register, start_serve
from tests.conftest import OPERATOR_TOKEN, Server


@pytest_asyncio.fixture
async def demo_server(fresh_database, monkeypatch):
    """The server as `make run` starts it: the demo fleet on, and the demo echo model both
    the `default` pool's upstream and the `demo` pool's (app/bootstrap.py)."""
    srv = Server(fresh_database, demo=True)
    echo = f"{srv.base}/demo-upstream/v1"
    monkeypatch.setenv("AGENTRM_UPSTREAM_BASE_URL", echo)
    monkeypatch.setenv("AGENTRM_DEMO_UPSTREAM_URL", echo)
    monkeypatch.delenv("AGENTRM_UPSTREAM_API_KEY", raising=False)
    await srv.start()
    yield srv
    await srv.stop()


async def test_the_demo_fleets_429s_leave_the_default_pool_at_full_rate(demo_server):
    rt = demo_server.runtime
    names: dict[str, str] = {}
    fleet_pools: set[str] = set()

    async def first_fleet_429() -> str:
        # The fleet is seeded: demo-chat-1's first call is answered 429 (app/demo.py), so
        # this comes within seconds of the start.
        wanted = {ev.AGENT_REGISTERED, ev.TURN_COMPLETED}
        async for event in follow(rt.store, rt.listener, 0, accept=lambda e: e.type in wanted):
            if event.type == ev.AGENT_REGISTERED:
                names[event.data["agent_id"]] = event.data["name"]
                fleet_pools.add(event.data["pool"])
            elif event.data["outcome"] == ev.RATE_LIMITED:
                return event.stream
        raise AssertionError("the log ended")

    stream = await asyncio.wait_for(first_fleet_429(), 120)
    assert stream == f"pool-{DEMO_POOL.name}"
    assert fleet_pools == {DEMO_POOL.name}
    pools = rt.projector.model.pools
    # An agent's own 429 report is a claim: it pauses that agent in the demo pool (and is
    # kept as a report others may corroborate), never the pool, never the default pool.
    assert pools[DEMO_POOL.name].rate_reports
    assert pools[DEMO_POOL.name].agent_pauses
    assert pools["default"].rate_factor == 1.0
    assert not pools["default"].paused_until
    assert not pools["default"].agent_pauses and not pools["default"].rate_reports
    assert {v["name"] for v in rt.projector.model.agents.values()} == {name for name, _ in FLEET}

    # README example 1's call, in the default pool, while the fleet keeps working.
    async with GraphQLClient(demo_server, OPERATOR_TOKEN) as operator:
        agent_id, token = await register(operator, "readme-openai")
    client = AsyncOpenAI(base_url=f"{demo_server.base}/v1", api_key=token)
    reply = await client.chat.completions.create(model="demo-echo",
                                                 messages=[{"role": "user", "content": "hello gateway"}])
    await client.close()
    assert reply.choices[0].message.content.strip() == "echo: hello gateway"
    turns = [t for t in rt.projector.model.turns.values() if t["agent_id"] == agent_id]
    assert [(t["pool"], t["status"]) for t in turns] == [("default", ev.COMPLETED)]
    fleet_turns = [t for t in rt.projector.model.turns.values() if t["agent_id"] != agent_id]
    assert fleet_turns and {t["pool"] for t in fleet_turns} == {DEMO_POOL.name}
    assert pools["default"].rate_factor == 1.0


async def test_serve_without_the_demo_keeps_the_echo_model_as_the_default_upstream(
        fresh_database, tmp_path, monkeypatch):
    for name in ("AGENTRM_UPSTREAM_BASE_URL", "AGENTRM_UPSTREAM_API_KEY", "AGENTRM_DEMO_UPSTREAM_URL"):
        monkeypatch.delenv(name, raising=False)
    proc, port = await start_serve(fresh_database, tmp_path, OPERATOR_TOKEN, workers=1)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(1200):   # up to 120 s for the process to start
                assert proc.returncode is None, "serve exited"
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{base}/readyz", timeout=2)).status_code == 200:
                        break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("serve never became ready")
            answer = await http.post(f"{base}/graphql", headers={"authorization": f"Bearer {OPERATOR_TOKEN}"},
                                     json={"query": "{ pools { name } agents { name } }"})
            data = answer.json()["data"]
            assert [p["name"] for p in data["pools"]] == ["default"]    # no fleet, no demo pool
            assert data["agents"] == []
            token = (await http.post(f"{base}/graphql", headers={"authorization": f"Bearer {OPERATOR_TOKEN}"},
                                     json={"query": 'mutation { registerAgent(input: {name: "solo"}) { token } }'})
                     ).json()["data"]["registerAgent"]["token"]
        client = AsyncOpenAI(base_url=f"{base}/v1", api_key=token)
        reply = await client.chat.completions.create(model="demo-echo",
                                                     messages=[{"role": "user", "content": "hello alone"}])
        await client.close()
        assert reply.choices[0].message.content.strip() == "echo: hello alone"
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 60)

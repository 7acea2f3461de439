"""The per-agent queued-turn cap and request-id retries across two separately started
`agentrm serve` processes on one database: requests and retries that reach both workers at
the same moment, as behind a load balancer."""
from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from tests.client import CREATE_POOL, REQUEST, GraphQLClient, GraphQLError, register
from tests.conftest import OPERATOR_TOKEN
from tests.faults.cluster import free_port, until

ROOT = Path(__file__).resolve().parents[2]
CAP = 3
EVENTS = """query($a: ID!) { events(after: 0, limit: 1000, agentId: $a) { type data } }"""


TURN = "id status leaseExpiresAt finishedAt"
HEARTBEAT = f"mutation($id: ID!, $rid: String) {{ heartbeat(turnId: $id, requestId: $rid) {{ {TURN} }} }}"
CANCEL = f"mutation($id: ID!, $rid: String) {{ cancelTurn(turnId: $id, requestId: $rid) {{ {TURN} }} }}"
COMPLETE = (f"""mutation($id: ID!, $rid: String) {{
  completeTurn(input: {{turnId: $id, outcome: OK, promptTokens: 5, completionTokens: 5, requestId: $rid}}) """
            f"{{ {TURN} }} }}")


@pytest.fixture
async def two_workers(fresh_database, tmp_path):
    env = {**os.environ, "DATABASE_URL": fresh_database, "AGENTRM_OPERATOR_TOKEN": OPERATOR_TOKEN,
           "AGENTRM_DATA_DIR": str(tmp_path), "AGENTRM_MAX_QUEUED_PER_AGENT": str(CAP)}
    workers = []
    try:
        for name in ("a", "b"):
            port = free_port()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--no-demo",
                cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL,
                stderr=open(tmp_path / f"{name}.log", "ab"))
            worker = SimpleNamespace(proc=proc, http=f"http://127.0.0.1:{port}/graphql",
                                     ws=f"ws://127.0.0.1:{port}/graphql", port=port)
            workers.append(worker)

            async def up(worker=worker, name=name) -> bool:
                assert worker.proc.returncode is None, (tmp_path / f"{name}.log").read_text()[-2000:]
                try:
                    async with httpx.AsyncClient() as http:
                        return (await http.get(f"http://127.0.0.1:{worker.port}/readyz", timeout=2)).status_code == 200
                except httpx.HTTPError:
                    return False
            await until(up, 120, f"worker {name} ready", interval=0.1)
        yield workers
    finally:
        for worker in workers:
            if worker.proc.returncode is None:
                worker.proc.terminate()
                try:
                    await asyncio.wait_for(worker.proc.wait(), 30)
                except TimeoutError:
                    worker.proc.kill()
                    await worker.proc.wait()


async def agent_on_one_lane(workers, name: str) -> tuple[str, str]:
    async with GraphQLClient(workers[0], OPERATOR_TOKEN) as operator:
        await operator(CREATE_POOL, name=name, lanes=1, rpm=100_000, tpm=10_000_000, lease=60.0)
        return await register(operator, f"{name}-agent", pool=name)


async def agent_events(workers, agent_id: str) -> list[dict]:
    async with GraphQLClient(workers[1], OPERATOR_TOKEN) as operator:
        return (await operator(EVENTS, a=agent_id))["events"]


async def test_the_queue_cap_holds_when_requests_reach_both_workers_at_once(two_workers):
    agent_id, token = await agent_on_one_lane(two_workers, "capped")
    async with GraphQLClient(two_workers[0], token) as agent:
        holding = (await agent(REQUEST, est=10, out=0, wait=10))["requestTurn"]
    assert holding["status"] == "GRANTED"   # it holds the one lane: every request after it queues

    async def one_request(worker) -> str:
        async with GraphQLClient(worker, token) as agent:   # a connection of its own
            try:
                return (await agent(REQUEST, est=10, out=0, wait=0))["requestTurn"]["status"]
            except GraphQLError as exc:
                return exc.code
    answers = Counter(await asyncio.gather(*(one_request(w) for _ in range(2 * CAP) for w in two_workers)))
    assert answers == {"QUEUED": CAP, "LIMIT_EXCEEDED": 3 * CAP}, answers
    # The log agrees: the scheduler queued no more than the cap, whatever each worker let through.
    queued = [e for e in await agent_events(two_workers, agent_id) if e["type"] == "TurnQueued"]
    assert len(queued) == CAP + 1   # the holder was queued (then granted) first


async def test_retries_with_one_request_id_on_both_workers_append_one_input(two_workers):
    agent_id, token = await agent_on_one_lane(two_workers, "retried")
    async def on_both(document: str, **variables) -> list[dict]:
        async def one(worker):
            async with GraphQLClient(worker, token) as agent:
                return (await agent(document, **variables))
        return await asyncio.gather(*(one(w) for w in two_workers))

    rounds = 5
    for i in range(rounds):
        async with GraphQLClient(two_workers[i % 2], token) as agent:
            turn = (await agent(REQUEST, est=10, out=0, wait=10))["requestTurn"]
        beats = await on_both(HEARTBEAT, id=turn["id"], rid=f"hb-{i}")
        assert beats[0]["heartbeat"]["leaseExpiresAt"] == beats[1]["heartbeat"]["leaseExpiresAt"]
        done = await on_both(COMPLETE, id=turn["id"], rid=f"done-{i}")
        assert [d["completeTurn"]["status"] for d in done] == ["COMPLETED"] * 2
        assert done[0]["completeTurn"]["finishedAt"] == done[1]["completeTurn"]["finishedAt"]
    async with GraphQLClient(two_workers[0], token) as agent:
        holder = (await agent(REQUEST, est=10, out=0, wait=10))["requestTurn"]
        queued = (await agent(REQUEST, est=10, out=0, wait=0))["requestTurn"]
    assert queued["status"] == "QUEUED"
    cancelled = await on_both(CANCEL, id=queued["id"], rid="stop")
    assert [c["cancelTurn"]["status"] for c in cancelled] == ["CANCELLED"] * 2
    inputs = Counter(e["type"] for e in await agent_events(two_workers, agent_id)
                     if e["type"] in ("HeartbeatSent", "CompletionReported", "CancelRequested"))
    assert inputs == {"HeartbeatSent": rounds, "CompletionReported": rounds, "CancelRequested": 1}, inputs
    assert holder["status"] == "GRANTED"

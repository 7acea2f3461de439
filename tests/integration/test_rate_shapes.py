"""The default limiter against every shape of provider limiter, through the gateway and three
workers (three `agentrm serve` processes on one database, as behind a load balancer).

A pool that modelled its provider as a token bucket starting full answered the first refill
after its burst with a call the provider refused, when the provider enforced a sliding
window; the pool then paused and halved its rate. Here three pools of rpm 12 with the
default limiter (a sliding 60 s window) each front a fake provider of one shape: a strict
sliding window, a token bucket and fixed windows. 12 agents per pool call through the
gateway for 150 s, as fast as they are let: no provider may answer 429, and each pool gets
at least 27 calls through (12 in each window of 61 s: 36 by 122 s and its calls' answers).
The three run at once to keep the suite's cost at one run.

And a provider's own word: remaining 0 with a reset of 5 s holds the pool's next call
until then."""
from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import openai
import pytest

from tests.client import GraphQLClient
from tests.conftest import OPERATOR_TOKEN
from tests.fake_upstream import FakeUpstream
from tests.faults.cluster import free_port, until
from tests.integration.test_gateway import MESSAGES, make_agent, make_pool, openai_client

ROOT = Path(__file__).resolve().parents[2]
RPM, AGENTS, RUN_S = 12, 12, 150.0
SHAPES = {"sliding-window": {}, "token-bucket": {}, "fixed-window": {"phase_s": 23.0}}


@pytest.fixture
async def three_workers(fresh_database, tmp_path):
    env = {**os.environ, "DATABASE_URL": fresh_database, "AGENTRM_OPERATOR_TOKEN": OPERATOR_TOKEN,
           "AGENTRM_DATA_DIR": str(tmp_path)}
    workers = []
    try:
        for name in ("a", "b", "c"):
            port = free_port()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--no-demo",
                cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL,
                stderr=open(tmp_path / f"{name}.log", "ab"))
            worker = SimpleNamespace(proc=proc, http=f"http://127.0.0.1:{port}/graphql",
                                     ws=f"ws://127.0.0.1:{port}/graphql", base=f"http://127.0.0.1:{port}", port=port)
            workers.append(worker)

            async def up(worker=worker, name=name) -> bool:
                assert worker.proc.returncode is None, (tmp_path / f"{name}.log").read_text()[-2000:]
                try:
                    async with httpx.AsyncClient() as http:
                        return (await http.get(f"{worker.base}/readyz", timeout=2)).status_code == 200
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


async def _calls_until(worker, token: str, end: float) -> int:
    """One agent calling as fast as it is let until `end`: its successful calls. A call still
    queued at the end gives up (x-agentrm-max-wait), which the gateway answers itself."""
    ok = 0
    client = openai_client(worker, token, timeout=RUN_S + 60)
    try:
        while (left := end - time.monotonic()) > 0:
            try:
                await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16,
                                                     extra_headers={"x-agentrm-max-wait": f"{left:.3f}"})
                ok += 1
            except openai.RateLimitError:
                pass   # the gateway's "queued too long" at the end, or a provider 429 (counted there)
    finally:
        await client.close()
    return ok


@pytest.mark.timeout(600)
async def test_the_default_window_draws_no_429_from_any_provider_shape(three_workers):
    fakes = {shape: await FakeUpstream(rpm=RPM, tpm=10_000_000, limiter=shape, **extra).start()
             for shape, extra in SHAPES.items()}
    try:
        agents: dict[str, list[str]] = {}
        async with GraphQLClient(three_workers[0], OPERATOR_TOKEN) as operator:
            for shape, fake in fakes.items():
                pool = await make_pool(operator, fake, lanes=AGENTS, rpm=RPM, tpm=10_000_000)   # the default limiter
                agents[shape] = [(await make_agent(operator, pool, f"{shape}-{i}"))[1] for i in range(AGENTS)]
        end = time.monotonic() + RUN_S
        runs = {shape: [asyncio.create_task(_calls_until(three_workers[i % 3], token, end))
                        for i, token in enumerate(tokens)] for shape, tokens in agents.items()}
        served = {shape: sum(await asyncio.gather(*tasks)) for shape, tasks in runs.items()}
        statuses = {shape: [s.status for s in fake.seen] for shape, fake in fakes.items()}
        print("\n" + "; ".join(f"{shape}: {served[shape]} served, provider saw {len(statuses[shape])}, "
                               f"{statuses[shape].count(429)} answered 429" for shape in SHAPES))
        for shape in SHAPES:
            assert statuses[shape].count(429) == 0, (shape, statuses[shape])
            assert served[shape] >= 27, (shape, served[shape])
    finally:
        for fake in fakes.values():
            await fake.stop()


async def test_remaining_zero_with_a_reset_holds_the_next_call_until_the_reset(server, operator):
    fake = await FakeUpstream().start()
    try:
        pool = await make_pool(operator, fake)
        _agent_id, token = await make_agent(operator, pool, "after-the-reset")
        client = openai_client(server, token)
        fake.exhaust_next(5.0)   # the next answer: remaining 0, reset 5 s; anything sooner is refused
        await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16)
        await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16)
        await client.close()
        first, second = fake.seen
        assert [first.status, second.status] == [200, 200]
        assert second.received_at - first.received_at >= 5.0   # it waited for the reset
    finally:
        await fake.stop()


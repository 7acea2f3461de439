"""The fake provider's scenario behaviours, over real HTTP on loopback: a slow call,
an outage window, a concurrency limit and the saturating engine. Nothing here asserts a
duration: each test reads the stream and the provider's access log."""
from __future__ import annotations

import asyncio
import json
import time

import httpx

from agentrm_bench.fake_provider import FakeProvider
from agentrm_bench.sim import Saturation


def _body(**fake) -> dict:
    return {"model": "fake", "prompt_tokens": 10, "max_tokens": 20,
            "fake": {"output_tokens": 5, "latency_s": 0.05, "first_chunk_s": 0.0, **fake}}


async def _lines_until(response, predicate) -> list[str]:
    seen = []
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            seen.append(line)
            if predicate(seen):
                break
    return seen


async def test_a_slow_call_answers_and_an_outage_hangs_every_admitted_call():
    provider = await FakeProvider(1000, 1_000_000, chunk_interval_s=0.01, outages=((0.0, 3600.0),)).start()
    provider.outage_origin = time.time() + 3600.0           # the outage has not begun yet
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(None)) as http:
            async with http.stream("POST", f"{provider.url}/v1/chat/completions",
                                   headers={"x-client-request-id": "slow"},
                                   json=_body(fault="slow", slow_extra_s=0.02)) as response:
                lines = await _lines_until(response, lambda seen: seen[-1] == "data: [DONE]")
            assert lines[-1] == "data: [DONE]"
            assert json.loads(lines[-2][6:])["usage"]["completion_tokens"] == 5
            provider.outage_origin = time.time() - 1.0      # now inside the window
            request = http.build_request("POST", f"{provider.url}/v1/chat/completions",
                                         headers={"x-client-request-id": "out"}, json=_body())
            sending = asyncio.create_task(http.send(request, stream=True))
            while len(provider.access_log) < 2 or not provider.access_log[1].hung:
                await asyncio.sleep(0.01)
            sending.cancel()
        slow, out = provider.access_log
        assert slow.finished_at is not None and not slow.hung
        assert out.hung and out.first_chunk_at is None and out.finished_at is None
    finally:
        await provider.stop()


async def test_beyond_its_concurrency_limit_the_provider_answers_429_with_retry_after_1():
    provider = await FakeProvider(1000, 1_000_000, chunk_interval_s=0.01, max_concurrent=1).start()
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(None)) as http:
            request = http.build_request("POST", f"{provider.url}/v1/chat/completions", json=_body(hang=True))
            holding = asyncio.create_task(http.send(request, stream=True))
            while not provider.access_log or not provider.access_log[0].hung:
                await asyncio.sleep(0.01)
            refused = await http.post(f"{provider.url}/v1/chat/completions", json=_body())
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            holding.cancel()
    finally:
        await provider.stop()


async def test_the_saturating_engine_runs_at_most_max_running_and_queues_the_rest():
    model = Saturation(x_max_tokens_per_s=20_000.0, k=2.0, max_running=2, ttft_base_s=0.0, ttft_quad_s=0.0,
                       prefill_tokens_per_s=1e9)
    provider = await FakeProvider(1000, 1_000_000, chunk_interval_s=0.01, saturation=model).start()
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(None)) as http:
            async def one(i: int) -> list[str]:
                async with http.stream("POST", f"{provider.url}/v1/chat/completions",
                                       headers={"x-client-request-id": f"c{i}"},
                                       json=_body(output_tokens=200)) as response:
                    return await _lines_until(response, lambda seen: seen[-1] == "data: [DONE]")
            serving = asyncio.ensure_future(asyncio.gather(*(one(i) for i in range(5))))
            queued_seen = False
            while not serving.done():
                assert len(provider.engine.running) <= 2
                queued_seen = queued_seen or bool(provider.engine.waiting)
                await asyncio.sleep(0)
            answers = serving.result()
        assert queued_seen
        assert all(a[-1] == "data: [DONE]" for a in answers)
        assert all(e.finished_at is not None for e in provider.access_log)
        assert provider.engine.running == [] and provider.engine.waiting == []
    finally:
        await provider.stop()


async def test_a_fault_in_the_last_message_and_a_503_outage_that_charges_nothing():
    provider = await FakeProvider(1000, 1_000_000, chunk_interval_s=0.01, honour_stream=True, fake_in_messages=True,
                                  defaults={"latency_s": 0.0}, outages=((0.0, 3600.0),),
                                  outage_status=503).start()
    provider.outage_origin = time.time() + 3600.0           # the outage has not begun yet

    def body(text: str) -> dict:   # OpenAI's fields only, as a gateway forwards them
        return {"model": "fake", "messages": [{"role": "user", "content": text}]}
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(None)) as http:
            url = f"{provider.url}/v1/chat/completions"
            request = http.build_request("POST", url, json=body('Hi. FAKE:{"fault": "hang", "tag": "h"}'))
            hanging = asyncio.create_task(http.send(request, stream=True))
            plain = await http.post(url, json=body("Hi."))
            assert plain.status_code == 200 and plain.json()["choices"]
            while len(provider.access_log) < 2 or not any(e.hung for e in provider.access_log):
                await asyncio.sleep(0.01)
            hanging.cancel()
            provider.outage_origin = time.time() - 1.0      # now inside the window
            refused = await http.post(url, json=body('Hi. FAKE:{"tag": "o"}'))
            assert refused.status_code == 503 and refused.json()["error"]["type"] == "server_error"
        hung = next(e for e in provider.access_log if e.tag == "h")
        assert hung.hung and hung.first_chunk_at is None
        out = provider.access_log[-1]
        assert out.tag == "o" and out.status == 503 and out.finished_at is not None
        assert provider.stats()["admitted"] == 2     # the plain and the hung call: the refusal never entered
    finally:
        await provider.stop()

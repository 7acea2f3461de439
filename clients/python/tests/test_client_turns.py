"""`async with rm.turn(...)`: the grant, heartbeats from chunk(), and how the block's end
completes the turn."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

import httpx
import pytest
from agentrm_fake import AGENT_TOKEN, FakeAgentRM

import agentrm_client.client
from agentrm_client import AgentRM, QueueTimeout, RateLimited, Turn, TurnNotGranted


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


async def test_a_free_lane_grants_at_once_and_the_block_completes_ok_with_the_usage(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as rm:
        async with rm.turn(estimated_tokens=30, max_output_tokens=64, run_id="run-7") as turn:
            assert isinstance(turn, Turn)
            assert fake.status(turn.id) == "GRANTED" and turn.lane == 0 and turn.lease_seconds == 30.0
            turn.report(SimpleNamespace(prompt_tokens=21, completion_tokens=9))
    assert fake.requests == [{"estimatedTokens": 30, "maxOutputTokens": 64, "streams": True, "runId": "run-7"}]
    assert fake.completions[turn.id] == {"turnId": turn.id, "outcome": "OK", "promptTokens": 21,
                                         "completionTokens": 9}
    assert fake.status(turn.id) == "COMPLETED"
    assert fake.watching(turn.id) == 0    # granted at once: no subscription was needed


async def test_usage_from_a_dict_in_anthropic_names_and_the_estimate_without_a_report(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as rm:
        async with rm.turn(estimated_tokens=40, streams=False) as reported:
            reported.report({"input_tokens": 12, "output_tokens": 5},
                            headers={"X-RateLimit-Remaining-Tokens": 900, "Content-Type": "text/plain"})
        async with rm.turn(estimated_tokens=40, streams=False) as silent:
            pass
    assert fake.completions[reported.id] == {"turnId": reported.id, "outcome": "OK", "promptTokens": 12,
                                             "completionTokens": 5,
                                             "rateLimitHeaders": {"x-ratelimit-remaining-tokens": "900"}}
    # No report: the estimate stands for the prompt, no completion tokens.
    assert fake.completions[silent.id] == {"turnId": silent.id, "outcome": "OK", "promptTokens": 40,
                                           "completionTokens": 0}
    assert fake.requests[0] == {"estimatedTokens": 40, "maxOutputTokens": None, "streams": False}


async def test_a_queued_turn_enters_when_the_subscription_says_granted(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as first, AgentRM(fake.base, AGENT_TOKEN) as second:
        async with first.turn(estimated_tokens=10) as held:
            waiting = asyncio.create_task(second.turn(estimated_tokens=10).__aenter__())
            queued = "turn-2"
            await until(lambda: fake.watching(queued) == 1)
            await asyncio.sleep(0.05)
            assert not waiting.done() and fake.status(queued) == "QUEUED"
        granted = await asyncio.wait_for(waiting, 10)   # the lane freed: the subscription delivers
        assert granted.id == queued and granted.lane == 0 and fake.status(held.id) == "COMPLETED"
        await until(lambda: fake.watching(queued) == 0)  # the client closed its subscription
        await second._complete(granted.id, {"outcome": "OK"})
    # The subscription authenticates with the agent's token.
    assert fake.connection_payloads == [{"authorization": f"Bearer {AGENT_TOKEN}"}]


@pytest.mark.parametrize("streams, every", [(True, 2.0), (False, 10.0)])
async def test_the_first_chunk_heartbeats_at_once_and_later_ones_a_third_of_what_each_extends(
        fake: FakeAgentRM, monkeypatch: pytest.MonkeyPatch, streams: bool, every: float):
    # Lease 30 s, stall deadline 6 s: a stream's heartbeat after its first chunk extends the
    # lease by 6 s only, so they go every 2 s; a call that does not stream, every 10 s.
    clock = [100.0]     # the client's clock only, so the throttle is checked without sleeping
    monkeypatch.setattr(agentrm_client.client, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    async with AgentRM(fake.base, AGENT_TOKEN) as rm:
        async with rm.turn(estimated_tokens=10, streams=streams) as turn:
            for _ in range(50):
                turn.chunk()
            await until(lambda: len(fake.heartbeats) == 1)
            clock[0] = 100.0 + every - 0.1
            turn.chunk()
            await asyncio.sleep(0.05)
            assert len(fake.heartbeats) == 1
            clock[0] = 100.0 + every + 0.1
            fake.delays["heartbeat"] = 0.2
            turn.chunk()
        # The block waited for the (slow) heartbeat it started before completing.
        assert [t for t, _ in fake.heartbeats] == [turn.id, turn.id]
        assert fake.served[-2:] == ["heartbeat", "completeTurn"] and fake.status(turn.id) == "COMPLETED"


async def test_a_heartbeat_after_a_reap_is_not_an_error(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as rm:
        async with rm.turn(estimated_tokens=10) as turn:
            fake.end(turn.id, "REAPED", "lease expired")
            turn.chunk()
        # The completion met CONFLICT (already reaped) and said nothing: its lane is free anyway.
    assert fake.status(turn.id) == "REAPED" and fake.heartbeats == [] and turn.id not in fake.completions


async def test_a_rate_limited_raised_in_the_block_completes_rate_limited_and_propagates(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as rm:
        with pytest.raises(RateLimited):
            async with rm.turn(estimated_tokens=30) as turn:
                turn.report(prompt_tokens=30, completion_tokens=2)
                raise RateLimited(1.5, {"X-RateLimit-Remaining-Tokens": 0})
    assert fake.completions[turn.id] == {"turnId": turn.id, "outcome": "RATE_LIMITED", "promptTokens": 0,
                                         "completionTokens": 0, "retryAfterSeconds": 1.5,
                                         "rateLimitHeaders": {"x-ratelimit-remaining-tokens": "0"}}


async def test_an_sdk_429_escaping_the_block_carries_retry_after_and_the_rate_headers(fake: FakeAgentRM):
    request = httpx.Request("POST", "https://provider.example/v1/chat/completions")
    response = httpx.Response(429, request=request, headers={
        "Retry-After": "3", "x-ratelimit-remaining-requests": "0", "anthropic-ratelimit-tokens-reset": "soon",
        "content-type": "application/json"})
    async with AgentRM(fake.base, AGENT_TOKEN) as rm:
        with pytest.raises(httpx.HTTPStatusError):
            async with rm.turn(estimated_tokens=30) as turn:
                response.raise_for_status()
    assert fake.completions[turn.id] == {
        "turnId": turn.id, "outcome": "RATE_LIMITED", "promptTokens": 0, "completionTokens": 0,
        "retryAfterSeconds": 3.0, "rateLimitHeaders": {"retry-after": "3", "x-ratelimit-remaining-requests": "0",
                                                       "anthropic-ratelimit-tokens-reset": "soon"}}


async def test_a_429_without_retry_after_and_another_status_code(fake: FakeAgentRM):
    class ProviderError(Exception):
        def __init__(self, status_code: int):
            super().__init__(f"HTTP {status_code}")
            self.status_code = status_code

    async with AgentRM(fake.base, AGENT_TOKEN) as rm:
        with pytest.raises(ProviderError):
            async with rm.turn(estimated_tokens=30) as limited:
                raise ProviderError(429)
        with pytest.raises(ProviderError):
            async with rm.turn(estimated_tokens=30) as failed:
                raise ProviderError(500)
    assert fake.completions[limited.id]["outcome"] == "RATE_LIMITED"
    assert "retryAfterSeconds" not in fake.completions[limited.id]   # unknown: not sent
    assert fake.completions[failed.id]["outcome"] == "ERROR"


async def test_any_other_exception_completes_error_and_propagates(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as rm:
        with pytest.raises(ValueError, match="the tool blew up"):
            async with rm.turn(estimated_tokens=30) as turn:
                turn.report(prompt_tokens=30, completion_tokens=4)
                raise ValueError("the tool blew up")
    assert fake.completions[turn.id] == {"turnId": turn.id, "outcome": "ERROR", "promptTokens": 30,
                                         "completionTokens": 4}
    assert fake.holders == [None]


async def test_a_cancellation_inside_the_block_completes_error(fake: FakeAgentRM):
    entered = asyncio.Event()
    turns: list[Turn] = []

    async def stuck() -> None:
        async with AgentRM(fake.base, AGENT_TOKEN) as rm:
            async with rm.turn(estimated_tokens=30) as turn:
                turns.append(turn)
                entered.set()
                await asyncio.Event().wait()

    task = asyncio.create_task(stuck())
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fake.completions[turns[0].id]["outcome"] == "ERROR" and fake.holders == [None]


async def test_a_cancellation_while_queued_cancels_the_turn(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as first, AgentRM(fake.base, AGENT_TOKEN) as second:
        async with first.turn(estimated_tokens=10):
            waiting = asyncio.create_task(second.turn(estimated_tokens=10).__aenter__())
            await until(lambda: fake.watching("turn-2") == 1)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert fake.cancels == ["turn-2"] and fake.status("turn-2") == "CANCELLED"
    assert "turn-2" not in fake.completions and fake.holders == [None]


async def test_a_bounded_wait_that_runs_out_raises_queue_timeout_and_cancels(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as first, AgentRM(fake.base, AGENT_TOKEN) as second:
        async with first.turn(estimated_tokens=10):
            with pytest.raises(QueueTimeout) as raised:
                async with second.turn(estimated_tokens=10, max_wait=0.2):
                    pytest.fail("the block ran without a grant")
    assert raised.value.code == "QUEUE_TIMEOUT" and "still queued after 0.2s" in str(raised.value)
    assert fake.cancels == ["turn-2"] and fake.status("turn-2") == "CANCELLED"


async def test_a_turn_that_ends_while_queued_raises_turn_not_granted(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as first, AgentRM(fake.base, AGENT_TOKEN) as second:
        async with first.turn(estimated_tokens=10):
            waiting = asyncio.create_task(second.turn(estimated_tokens=10).__aenter__())
            await until(lambda: fake.watching("turn-2") == 1)
            fake.end("turn-2", "REAPED", "agent quarantined")
            with pytest.raises(TurnNotGranted) as raised:
                await asyncio.wait_for(waiting, 10)
    assert raised.value.code == "REAPED" and "agent quarantined" in str(raised.value)
    assert "turn-2" not in fake.completions

"""The agent-side client (agentrm_client) against the real server, wrapping direct calls to a
fake provider on loopback with the official openai SDK."""
from __future__ import annotations

import asyncio

import openai
import pytest
import pytest_asyncio

from agentrm_client import AgentRM, QueueTimeout, RateLimited, SyncAgentRM
from app.domain import events as ev
from tests.fake_upstream import FakeUpstream
from tests.integration.test_gateway import MESSAGES, REPLY, events_of, make_agent, make_pool, wait_model


@pytest_asyncio.fixture
async def provider():
    fake = await FakeUpstream().start()
    yield fake
    await fake.stop()


def direct(fake: FakeUpstream, sync: bool = False):
    cls = openai.OpenAI if sync else openai.AsyncOpenAI
    return cls(base_url=f"{fake.url}/v1", api_key="sk-direct", max_retries=0)


async def test_a_turn_wraps_a_streamed_call_and_completes_with_its_usage(server, operator, provider):
    pool = await make_pool(operator, provider)
    agent_id, token = await make_agent(operator, pool)
    llm = direct(provider)
    async with AgentRM(server.base, token) as rm:
        async with rm.turn(estimated_tokens=30, max_output_tokens=64, run_id="run-7") as turn:
            assert server.runtime.projector.model.turns[turn.id]["status"] == ev.GRANTED
            stream = await llm.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=64,
                                                       stream=True, stream_options={"include_usage": True})
            text = ""
            async for chunk in stream:
                turn.chunk()
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                if chunk.usage:
                    turn.report(chunk.usage)
    assert text == REPLY
    done = (await events_of(server, {ev.TURN_COMPLETED}, turn_id=turn.id))[0]
    assert done.data["outcome"] == ev.OK
    assert (done.data["prompt_tokens"], done.data["completion_tokens"]) == \
        (provider.seen[0].prompt_tokens, chunk.usage.completion_tokens)
    beats = await events_of(server, {ev.LEASE_EXTENDED}, turn_id=turn.id)
    assert beats and beats[0].data.get("first_chunk_s") is not None   # heartbeat at the first chunk
    requested = (await events_of(server, {ev.TURN_REQUESTED}, turn_id=turn.id))[0]
    assert requested.data["run_id"] == "run-7" and requested.data["streams"] is True
    await llm.close()


async def test_the_grant_comes_over_the_subscription_after_a_wait(server, operator, provider):
    pool = await make_pool(operator, provider, lanes=1)
    _a, first_token = await make_agent(operator, pool, "first")
    _b, second_token = await make_agent(operator, pool, "second")
    async with AgentRM(server.base, first_token) as first, AgentRM(server.base, second_token) as second:
        async with first.turn(estimated_tokens=10, max_output_tokens=10, streams=False) as held:
            waiting = asyncio.create_task(second.turn(estimated_tokens=10, max_output_tokens=10,
                                                      streams=False).__aenter__())
            await wait_model(server, lambda: any(t["status"] == ev.QUEUED and t["agent_id"] == _b
                                                 for t in server.runtime.projector.model.turns.values()))
            assert not waiting.done()
        granted = await asyncio.wait_for(waiting, 30)   # the lane freed: the subscription delivers
        assert server.runtime.projector.model.turns[granted.id]["status"] == ev.GRANTED
        assert server.runtime.projector.model.turns[held.id]["status"] == ev.COMPLETED
        await second._complete(granted.id, {"outcome": "OK"})
        # A bounded wait that runs out cancels the queued turn.
        async with first.turn(estimated_tokens=10, max_output_tokens=10, streams=False):
            with pytest.raises(QueueTimeout):
                async with second.turn(estimated_tokens=10, max_output_tokens=10, max_wait=0.2):
                    pass
        mine = [t for t in server.runtime.projector.model.turns.values() if t["agent_id"] == _b]
        assert sorted(t["status"] for t in mine) == [ev.CANCELLED, ev.COMPLETED]


async def test_a_429_inside_the_block_is_reported_rate_limited(server, operator, provider):
    pool = await make_pool(operator, provider)
    _agent_id, token = await make_agent(operator, pool)
    llm = direct(provider)
    provider.reject_next(1, retry_after=3)
    async with AgentRM(server.base, token) as rm:
        with pytest.raises(openai.RateLimitError):
            async with rm.turn(estimated_tokens=30, max_output_tokens=64) as turn:
                await llm.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=64)
        reported = (await events_of(server, {ev.COMPLETION_REPORTED}, turn_id=turn.id))[0]
        assert reported.data["outcome"] == ev.RATE_LIMITED and reported.data["retry_after_seconds"] == 3.0
        assert reported.data["rate_limit_headers"]["retry-after"] == "3"
        assert "x-ratelimit-remaining-requests" in reported.data["rate_limit_headers"]
        # An agent's own report is a claim: it pauses that agent, not the pool.
        paused = [e for e in await events_of(server, {ev.POOL_PAUSED, ev.AGENT_PAUSED}) if e.stream == f"pool-{pool}"]
        assert [e.type for e in paused] == [ev.AGENT_PAUSED] and paused[0].data["retry_after"] == 3.0
        # Any client's 429 can say so with RateLimited.
        with pytest.raises(RateLimited):
            async with rm.turn(estimated_tokens=30, max_output_tokens=64) as second:
                raise RateLimited(1.5, {"x-ratelimit-remaining-tokens": "0"})
        reported = (await events_of(server, {ev.COMPLETION_REPORTED}, turn_id=second.id))[0]
        assert reported.data["outcome"] == ev.RATE_LIMITED and reported.data["retry_after_seconds"] == 1.5
    await llm.close()


async def test_exceptions_and_cancellation_complete_the_turn(server, operator, provider):
    pool = await make_pool(operator, provider, lanes=1)
    agent_id, token = await make_agent(operator, pool)
    async with AgentRM(server.base, token) as rm:
        with pytest.raises(ValueError):
            async with rm.turn(estimated_tokens=30, max_output_tokens=64) as failed:
                raise ValueError("the tool blew up")
        entered = asyncio.Event()

        async def stuck():
            async with rm.turn(estimated_tokens=30, max_output_tokens=64) as turn:
                entered.set()
                stuck.turn = turn
                await asyncio.Event().wait()

        task = asyncio.create_task(stuck())
        await asyncio.wait_for(entered.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    model = server.runtime.projector.model
    await wait_model(server, lambda: model.turns[stuck.turn.id]["status"] == ev.COMPLETED)
    outcomes = [(await events_of(server, {ev.TURN_COMPLETED}, turn_id=t))[0].data["outcome"]
                for t in (failed.id, stuck.turn.id)]
    assert outcomes == [ev.ERROR, ev.ERROR]
    # The lane is free: nothing was left holding it.
    assert model.pools[pool].lanes == [None]


async def test_the_sync_wrapper_and_the_context_helpers(server, operator, provider):
    pool = await make_pool(operator, provider)
    agent_id, token = await make_agent(operator, pool)

    def agent_code():
        llm = direct(provider, sync=True)
        with SyncAgentRM(server.base, token) as rm:
            with rm.turn(estimated_tokens=30, max_output_tokens=64) as turn:
                text = ""
                for chunk in llm.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=64,
                                                         stream=True, stream_options={"include_usage": True}):
                    turn.chunk()
                    if chunk.choices:
                        text += chunk.choices[0].delta.content or ""
                    if chunk.usage:
                        turn.report(chunk.usage)
            rm.append("Remember: the deploy key is DK-4411.", pinned=True)
            rm.append(text, role="assistant")
            view = rm.view(budget=500, query="deploy key")
        llm.close()
        return turn.id, text, view

    turn_id, text, view = await asyncio.to_thread(agent_code)
    assert text == REPLY
    done = (await events_of(server, {ev.TURN_COMPLETED}, turn_id=turn_id))[0]
    from app.context.tokens import count_text
    assert done.data["outcome"] == ev.OK and done.data["completion_tokens"] == count_text(REPLY)
    assert done.data["prompt_tokens"] == provider.seen[0].prompt_tokens
    assert view["pinned"] == ["Remember: the deploy key is DK-4411."]
    assert view["tokens"] <= 500 and any(REPLY.strip() in i["content"] for i in view["items"])

"""Slow models are not zombies: the gateway holds its calls' turns and renews their leases
while the upstream is working, so a call slower than any lease or learned deadline
succeeds with one provider call, and the agent is never quarantined for it."""
from __future__ import annotations

import asyncio

import openai
import pytest_asyncio

from app.domain import events as ev
from tests.fake_upstream import FakeUpstream
from tests.integration.test_gateway import MESSAGES, REPLY, events_of, make_agent, make_pool, turns_of


@pytest_asyncio.fixture
async def upstream():
    fake = await FakeUpstream().start()
    yield fake
    await fake.stop()


async def test_slow_calls_succeed_once_with_the_sdks_defaults_and_nobody_is_quarantined(server, operator, upstream):
    # Default pool settings: a 30 s lease, the learned start deadline. Default SDK settings:
    # its own retries (2) and timeout (600 s) - a 504 would have been retried.
    slow_pool = await make_pool(operator, upstream)
    stream_pool = await make_pool(operator, upstream)
    slow_agent, slow_token = await make_agent(operator, slow_pool, "slow-reply")
    stream_agent, stream_token = await make_agent(operator, stream_pool, "slow-stream")
    slow_client = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key=slow_token)
    stream_client = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key=stream_token)

    async def answered_after_45_s() -> str:
        upstream.delay_next(45.0, "fake-reasoner")
        reply = await slow_client.chat.completions.create(model="fake-reasoner", messages=MESSAGES)
        return reply.choices[0].message.content

    async def first_chunk_after_20_s() -> str:
        for _ in range(12):        # a warm pool: its first-chunk deadline is learned (about 0.1 s)
            stream = await stream_client.chat.completions.create(model="fake-gpt", messages=MESSAGES, stream=True)
            async for _chunk in stream:
                pass
        upstream.delay_next(20.0, "fake-gpt")
        stream = await stream_client.chat.completions.create(model="fake-gpt", messages=MESSAGES, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    slow, streamed = await asyncio.gather(answered_after_45_s(), first_chunk_after_20_s())
    assert slow == REPLY and streamed == REPLY
    assert [s.model for s in upstream.seen].count("fake-reasoner") == 1      # one provider call each
    assert len([s for s in upstream.seen if s.model == "fake-gpt"]) == 13
    model = server.runtime.projector.model
    for agent_id in (slow_agent, stream_agent):
        assert model.agent_view(agent_id)["state"] == ev.ACTIVE
        assert {t["status"] for t in turns_of(server, agent_id)} == {ev.COMPLETED}
        assert not await events_of(server, {ev.TURN_REAPED}, agent_id=agent_id)
    # The slow stream was a suspect (its lane freed) and was not cut; the 45 s call's lease
    # was renewed by the gateway's keepalives.
    assert await events_of(server, {ev.TURN_SUSPECTED}, agent_id=stream_agent)
    [slow_turn] = turns_of(server, slow_agent)
    keepalives = await events_of(server, {ev.HEARTBEAT_SENT}, turn_id=slow_turn["turn_id"], keepalive=True)
    assert len(keepalives) >= 4
    await slow_client.close()
    await stream_client.close()


async def test_fifty_concurrent_calls_on_one_token_all_succeed_with_the_sdks_defaults(server, operator):
    # Slow enough answers that the agent's queue reaches its cap (32) behind 4 lanes.
    fake = await FakeUpstream(first_chunk_s=0.2).start()
    try:
        pool = await make_pool(operator, fake, lanes=4, adaptiveLanes=False)
        agent_id, token = await make_agent(operator, pool, "burst")
        client = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key=token)   # default retries, timeout
        replies = await asyncio.gather(*(client.chat.completions.create(model="fake-gpt", messages=MESSAGES)
                                         for _ in range(50)))
        assert [r.choices[0].message.content for r in replies] == [REPLY] * 50
        assert len(fake.seen) == 50 and {s.status for s in fake.seen} == {200}   # none twice, none refused
        assert server.runtime.projector.model.pools[pool].queued_count() == 0
        refused = await events_of(server, {ev.TURN_CANCELLED}, agent_id=agent_id)
        assert all("queue full" not in e.data["reason"] for e in refused)
        await client.close()
    finally:
        await fake.stop()


async def test_a_stream_that_stalls_after_its_first_chunk_gives_up_its_lane_until_the_idle_cut(server, operator,
                                                                                                 upstream):
    # One lane. The first stream stops after two words and never resumes; the second call
    # waits for the lane. The stall suspicion (1 s of silence) frees it; the gateway still
    # closes the stalled call at its idle limit (15 s here), as an error inside the stream.
    pool = await make_pool(operator, upstream, lanes=1, adaptiveLanes=False, stallTimeoutSeconds=1.0,
                           streamIdleTimeoutSeconds=15.0)
    stalled_agent, stalled_token = await make_agent(operator, pool, "stalls")
    other_agent, other_token = await make_agent(operator, pool, "waits")
    stalled_client = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key=stalled_token, max_retries=0)
    other_client = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key=other_token)
    upstream.stall_next_after(2)
    finished: list[str] = []

    async def stalls() -> None:
        stream = await stalled_client.chat.completions.create(model="fake-gpt", messages=MESSAGES, stream=True)
        try:
            async for _chunk in stream:
                pass
        except openai.APIError:
            finished.append("stalled call cut")

    async def waits() -> None:
        await upstream.wait_for(lambda seen: any(s.hung for s in seen))
        reply = await other_client.chat.completions.create(model="fake-gpt", messages=MESSAGES)
        assert reply.choices[0].message.content == REPLY
        finished.append("other call answered")

    await asyncio.gather(stalls(), waits())
    assert finished == ["other call answered", "stalled call cut"]   # the lane did not wait for the cut
    [stalled_turn] = turns_of(server, stalled_agent)
    [suspect] = await events_of(server, {ev.TURN_SUSPECTED}, turn_id=stalled_turn["turn_id"])
    assert suspect.data["stalled_s"] >= 1.0 and suspect.data["lane_freed"] is True
    [told] = [e for e in await events_of(server, {ev.HEARTBEAT_SENT}, turn_id=stalled_turn["turn_id"], keepalive=True)
              if e.data.get("idle_s", 0) >= 1.0][:1]
    assert told.position < suspect.position
    assert stalled_turn["status"] == ev.COMPLETED and stalled_turn["outcome"] == ev.ERROR
    assert server.runtime.projector.model.agent_view(stalled_agent)["state"] == ev.ACTIVE
    assert not await events_of(server, {ev.TURN_SUSPECTED}, agent_id=other_agent)
    await stalled_client.close()
    await other_client.close()

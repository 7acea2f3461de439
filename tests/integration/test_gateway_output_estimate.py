"""A gateway call that names no output bound reserves its model's learned typical answer:
the prior before any sample, then the 90th percentile of the answers relayed in its pool.
What it reserved is recorded in the TurnRequested, so replay never needs the estimator."""
from __future__ import annotations

import pytest_asyncio

from app.context.tokens import count_text
from app.domain import events as ev
from app.gateway.output_estimate import PRIOR_TOKENS
from tests.fake_upstream import FakeUpstream
from tests.integration.test_gateway import MESSAGES, events_of, make_agent, make_pool, openai_client


@pytest_asyncio.fixture
async def upstream():
    fake = await FakeUpstream().start()
    yield fake
    await fake.stop()


def words(n: int) -> int:
    return count_text("".join(f"word{i} " for i in range(n)))


async def test_a_call_without_max_tokens_reserves_the_learned_answer_length(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)

    async def reserved() -> list[int]:
        found = await events_of(server, {ev.TURN_REQUESTED}, agent_id=agent_id)
        return [e.data["max_output_tokens"] for e in found]

    upstream.words = 12
    await client.chat.completions.create(model="fake-gpt", messages=MESSAGES)
    stream = await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, stream=True)
    async for _ in stream:
        pass
    await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=5)   # cut: no sample
    await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=64)
    upstream.words = 40
    await client.chat.completions.create(model="fake-gpt", messages=MESSAGES)
    await client.chat.completions.create(model="fake-gpt", messages=MESSAGES)
    await client.chat.completions.create(model="other-model", messages=MESSAGES)   # learns apart
    await client.close()
    short, long = words(12), words(40)
    assert short < long < PRIOR_TOKENS
    assert await reserved() == [
        PRIOR_TOKENS,          # nothing learned yet
        short,                 # the first answer (not streamed)
        5, 64,                 # bounds the calls named themselves
        short,                 # samples: short, short (streamed), short (under 64): p90 = short
        long,                  # samples: short x3, long: the 4th of 4 by nearest rank
        PRIOR_TOKENS]          # another model starts from the prior
    # The grants reserved what the requests recorded: the decision's input is in the log.
    granted = await events_of(server, {ev.TURN_GRANTED}, agent_id=agent_id)
    requested = await events_of(server, {ev.TURN_REQUESTED}, agent_id=agent_id)
    assert [g.data["reserved_tokens"] for g in granted] == [
        r.data["estimated_tokens"] + r.data["max_output_tokens"] for r in requested]

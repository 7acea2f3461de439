"""Errors keep the server's extensions.code, from queries and from the subscription."""
from __future__ import annotations

import asyncio

import pytest
from agentrm_fake import AGENT_TOKEN, OPERATOR_TOKEN, FakeAgentRM

from agentrm_client import AgentRM, AgentRMError, TurnNotGranted, register_agent


async def test_a_refused_token_raises_agentrm_error_with_its_code(fake: FakeAgentRM):
    async with AgentRM(fake.base, "not-a-token") as rm:
        with pytest.raises(AgentRMError) as raised:
            async with rm.turn(estimated_tokens=10):
                pytest.fail("entered without a turn")
    assert raised.value.code == "UNAUTHENTICATED" and str(raised.value) == "unknown token"
    assert fake.turns == {}


async def test_a_completion_refused_for_another_reason_than_conflict_propagates(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as rm:
        fake.fail_next("completeTurn", "the log is read-only", "UNAVAILABLE")
        with pytest.raises(AgentRMError) as raised:
            async with rm.turn(estimated_tokens=10):
                pass
    assert raised.value.code == "UNAVAILABLE"


async def test_an_error_on_the_subscription_keeps_its_code(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as first, AgentRM(fake.base, AGENT_TOKEN) as second:
        async with first.turn(estimated_tokens=10):
            fake.fail_next("turn", "not your turn", "FORBIDDEN")
            with pytest.raises(AgentRMError) as raised:
                await asyncio.wait_for(second.turn(estimated_tokens=10).__aenter__(), 10)
    assert raised.value.code == "FORBIDDEN" and str(raised.value) == "not your turn"
    assert not isinstance(raised.value, TurnNotGranted)


async def test_an_answer_without_json_is_unavailable(fake: FakeAgentRM):
    async with AgentRM(fake.base + "/elsewhere", AGENT_TOKEN) as rm:   # the fake answers 404 in text
        with pytest.raises(AgentRMError) as raised:
            await rm.append("hello")
    assert raised.value.code == "UNAVAILABLE" and "HTTP 404" in str(raised.value)


def test_register_agent_returns_the_agents_token_and_refuses_an_agent(fake: FakeAgentRM):
    token = register_agent(fake.base + "/", OPERATOR_TOKEN, "scout", pool="research", priority_class="BATCH")
    assert token == "token-scout" and fake.agents[token] == "scout"
    with pytest.raises(AgentRMError) as raised:
        register_agent(fake.base, AGENT_TOKEN, "intruder")
    assert raised.value.code == "FORBIDDEN"

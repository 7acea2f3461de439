"""SyncAgentRM: the same turn and context calls from synchronous code."""
from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest
from agentrm_fake import AGENT_TOKEN, FakeAgentRM

from agentrm_client import AgentRM, SyncAgentRM, SyncTurn


async def test_a_sync_turn_heartbeats_reports_and_completes(fake: FakeAgentRM):
    def agent_code() -> str:
        with SyncAgentRM(fake.base, AGENT_TOKEN) as rm:
            with rm.turn(estimated_tokens=30, max_output_tokens=64, run_id="job-1") as turn:
                assert isinstance(turn, SyncTurn) and fake.status(turn.id) == "GRANTED"
                for _ in range(5):
                    turn.chunk()
                turn.report(SimpleNamespace(prompt_tokens=25, completion_tokens=7))
            return turn.id

    turn_id = await asyncio.to_thread(agent_code)
    assert [t for t, _ in fake.heartbeats] == [turn_id]
    assert fake.completions[turn_id] == {"turnId": turn_id, "outcome": "OK", "promptTokens": 25,
                                         "completionTokens": 7}
    assert fake.requests == [{"estimatedTokens": 30, "maxOutputTokens": 64, "streams": True, "runId": "job-1"}]


async def test_a_sync_turn_waits_for_its_grant_and_an_exception_completes_error(fake: FakeAgentRM):
    granted = threading.Event()

    def agent_code() -> str:
        with SyncAgentRM(fake.base, AGENT_TOKEN) as rm:
            with pytest.raises(KeyError):
                with rm.turn(estimated_tokens=10, streams=False) as turn:
                    granted.set()
                    raise KeyError("missing")
            return turn.id

    async with AgentRM(fake.base, AGENT_TOKEN) as other:
        async with other.turn(estimated_tokens=10):
            waiting = asyncio.create_task(asyncio.to_thread(agent_code))
            while fake.watching("turn-2") == 0:
                await asyncio.sleep(0.01)
            assert not granted.is_set() and fake.status("turn-2") == "QUEUED"
        turn_id = await asyncio.wait_for(waiting, 10)
    assert turn_id == "turn-2" and fake.completions[turn_id]["outcome"] == "ERROR"


async def test_the_sync_context_helpers(fake: FakeAgentRM):
    def agent_code() -> tuple[dict, dict]:  # type: ignore[type-arg]
        with SyncAgentRM(fake.base, AGENT_TOKEN) as rm:
            rm.append("Remember: the deploy key is DK-4411.", pinned=True)
            stats = rm.append("The deploy went out at noon.", role="assistant")
            return stats, rm.view(budget=500, query="deploy key")

    stats, view = await asyncio.to_thread(agent_code)
    assert stats["messages"] == 2 and stats["agentId"] == "agent-1"
    assert fake.messages == [
        {"role": "user", "content": "Remember: the deploy key is DK-4411.", "pinned": True},
        {"role": "assistant", "content": "The deploy went out at noon.", "pinned": False}]
    assert view["pinned"] == ["Remember: the deploy key is DK-4411."]
    assert [i["content"] for i in view["items"]] == ["The deploy went out at noon."]


async def test_the_async_context_helpers_send_budget_and_query(fake: FakeAgentRM):
    async with AgentRM(fake.base, AGENT_TOKEN) as rm:
        await rm.append("a fact", pinned=True)
        view = await rm.view(100)
    assert view == {"agentId": "agent-1", "tokens": 0, "pinned": ["a fact"], "items": []}

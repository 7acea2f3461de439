"""Idempotency-Key at the gateway, through the real server, log and `gateway_replies` table:
a retry gets the first call's answer with no new turn and no second provider call (the
fake upstream's request log counts them), a concurrent retry joins the running call (also
on another worker), another body is a 409, and a failed first call is really retried."""
from __future__ import annotations

import asyncio
import uuid

import httpx
import openai
import pytest_asyncio

from app.domain import events as ev
from tests.conftest import Server
from tests.fake_upstream import FakeUpstream
from tests.integration.test_gateway import (
    MESSAGES,
    REPLY,
    anthropic_client,
    make_agent,
    make_pool,
    openai_client,
    turns_of,
)

BODY = {"model": "fake-gpt", "messages": MESSAGES, "max_tokens": 16}


@pytest_asyncio.fixture
async def upstream():
    fake = await FakeUpstream().start()
    yield fake
    await fake.stop()


def new_key() -> str:
    return f"key-{uuid.uuid4().hex}"


def post(http: httpx.AsyncClient, token: str, key: str | None, body: dict = BODY, **headers):
    sent = {"authorization": f"Bearer {token}", **headers}
    if key is not None:
        sent["Idempotency-Key"] = key
    return http.post("/v1/chat/completions", headers=sent, json=body)


def joining(server, monkeypatch) -> asyncio.Event:
    """An event set when a retry on `server` starts waiting for the first call of its key."""
    replies = server.app.state.holder.replies
    waiting = asyncio.Event()
    settled = replies.settled

    async def spy(agent_id, key, timeout):
        waiting.set()
        return await settled(agent_id, key, timeout)
    monkeypatch.setattr(replies, "settled", spy)
    return waiting


async def test_a_retry_with_the_key_gets_the_first_answer_and_calls_nobody(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool)
    key = new_key()
    async with httpx.AsyncClient(base_url=server.base) as http:
        first = await post(http, token, key, **{"x-request-id": "try-1"})
        again = await post(http, token, key, **{"x-request-id": "try-2"})
        # Any case: HTTP header names are case-insensitive, as the store's key is not.
        lower = await http.post("/v1/chat/completions", json=BODY,
                                headers={"authorization": f"Bearer {token}", "idempotency-key": key})
    assert first.status_code == again.status_code == lower.status_code == 200
    assert again.content == first.content == lower.content
    assert "x-agentrm-idempotent-replay" not in first.headers
    assert again.headers["x-agentrm-idempotent-replay"] == lower.headers["x-agentrm-idempotent-replay"] == "true"
    # The replay names the first call's turn and upstream request, and its own request id.
    [turn] = turns_of(server, agent_id)
    assert first.headers["x-agentrm-turn-id"] == again.headers["x-agentrm-turn-id"] == turn["turn_id"]
    assert again.headers["x-upstream-request-id"] == first.headers["x-upstream-request-id"]
    assert (first.headers["x-request-id"], again.headers["x-request-id"]) == ("try-1", "try-2")
    assert len(upstream.seen) == 1 and turn["status"] == ev.COMPLETED

    # The SDK's own calls: the key in extra_headers, the replay parsed as any answer.
    client = openai_client(server, token)
    replay = await client.chat.completions.with_raw_response.create(
        model="fake-gpt", messages=MESSAGES, max_tokens=16, extra_headers={"Idempotency-Key": key})
    assert replay.headers["x-agentrm-idempotent-replay"] == "true"
    assert replay.parse().choices[0].message.content == REPLY
    assert len(upstream.seen) == 1 and len(turns_of(server, agent_id)) == 1
    # Without a key, or with another, a call is a call.
    await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16)
    await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16,
                                         extra_headers={"Idempotency-Key": new_key()})
    assert len(upstream.seen) == 3 and len(turns_of(server, agent_id)) == 3
    await client.close()


async def test_concurrent_retries_join_the_running_call_on_any_worker(server, operator, upstream, database_url,
                                                                     monkeypatch):
    other = await Server(database_url).start()
    try:
        pool = await make_pool(operator, upstream)
        agent_id, token = await make_agent(operator, pool)
        key = new_key()
        gate = upstream.gate_next()
        here, there = joining(server, monkeypatch), joining(other, monkeypatch)
        async with httpx.AsyncClient(base_url=server.base) as http, \
                httpx.AsyncClient(base_url=other.base) as http_other:
            first = asyncio.create_task(post(http, token, key))
            await upstream.wait_for(lambda seen: len(seen) == 1)   # the first call is at the provider
            same_worker = asyncio.create_task(post(http, token, key))
            other_worker = asyncio.create_task(post(http_other, token, key))
            await asyncio.wait_for(asyncio.gather(here.wait(), there.wait()), 30)
            gate.set()
            answers = await asyncio.wait_for(asyncio.gather(first, same_worker, other_worker), 60)
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert answers[0].content == answers[1].content == answers[2].content
        assert [a.headers.get("x-agentrm-idempotent-replay") for a in answers] == [None, "true", "true"]
        assert len(upstream.seen) == 1 and len(turns_of(server, agent_id)) == 1
    finally:
        await other.stop()


async def test_the_key_with_another_body_is_a_409_in_the_wires_shape(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool)
    key = new_key()
    client = openai_client(server, token)
    await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16,
                                         extra_headers={"Idempotency-Key": key})
    try:
        await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=17,
                                             extra_headers={"Idempotency-Key": key})
    except openai.ConflictError as exc:
        assert exc.status_code == 409 and exc.body["code"] == "idempotency_key_reused"
        assert exc.body["type"] == "invalid_request_error"
    else:
        raise AssertionError("a reused key was served")
    # The same key on the other format is another request too; Anthropic's shape.
    async with httpx.AsyncClient(base_url=server.base) as http:
        claude = await http.post("/v1/messages", headers={"x-api-key": token, "Idempotency-Key": key},
                                 json={"model": "fake-claude", "max_tokens": 16, "messages": MESSAGES[1:]})
        bad_key = await post(http, token, "k" * 256)
    assert claude.status_code == 409 and claude.json()["error"]["type"] == "invalid_request_error"
    assert bad_key.status_code == 400 and "Idempotency-Key" in bad_key.json()["error"]["message"]
    assert len(upstream.seen) == 1 and len(turns_of(server, agent_id)) == 1
    # Keys are the agent's own: another agent's same key is its own call.
    _other_id, other_token = await make_agent(operator, pool, "gw-other")
    async with httpx.AsyncClient(base_url=server.base) as http:
        theirs = await post(http, other_token, key, {**BODY, "max_tokens": 17})
    assert theirs.status_code == 200 and "x-agentrm-idempotent-replay" not in theirs.headers
    assert len(upstream.seen) == 2
    await client.close()


async def test_a_stream_is_replayed_byte_for_byte(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool)
    key = new_key()
    streamed = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    bodies, heads = [], []
    async with httpx.AsyncClient(base_url=server.base) as http:
        for _ in range(2):
            async with http.stream("POST", "/v1/chat/completions", json=streamed,
                                   headers={"authorization": f"Bearer {token}", "Idempotency-Key": key}) as answer:
                bodies.append(b"".join([part async for part in answer.aiter_raw()]))
                heads.append(answer.headers)
    assert bodies[0] == bodies[1] and bodies[0].endswith(b"data: [DONE]\n\n")
    assert heads[1]["x-agentrm-idempotent-replay"] == "true" and heads[1]["content-type"].startswith(
        "text/event-stream")
    assert len(upstream.seen) == 1 and len(turns_of(server, agent_id)) == 1
    # The SDK reads the replayed stream as a stream.
    client = openai_client(server, token)
    stream = await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16, stream=True,
                                                  stream_options={"include_usage": True},
                                                  extra_headers={"Idempotency-Key": key})
    assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == REPLY
    assert len(upstream.seen) == 1
    await client.close()
    claude, claude_key = anthropic_client(server, token), new_key()
    for _ in range(2):
        async with claude.messages.stream(model="fake-claude", max_tokens=16, messages=MESSAGES[1:],
                                          extra_headers={"Idempotency-Key": claude_key}) as s:
            assert "".join([t async for t in s.text_stream]) == REPLY
    assert len(upstream.seen) == 2
    await claude.close()


async def test_a_failed_first_call_is_not_stored_so_the_retry_really_runs(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool)
    key = new_key()
    upstream.reject_next(1, retry_after=1)
    async with httpx.AsyncClient(base_url=server.base) as http:
        limited = await post(http, token, key)
        retried = await post(http, token, key)
        replayed = await post(http, token, key)
    assert limited.status_code == 429 and retried.status_code == 200
    assert "x-agentrm-idempotent-replay" not in retried.headers
    assert replayed.headers["x-agentrm-idempotent-replay"] == "true" and replayed.content == retried.content
    assert [s.status for s in upstream.seen] == [429, 200]
    assert [t["outcome"] for t in turns_of(server, agent_id)] == [ev.RATE_LIMITED, ev.OK]

"""Correlation at the gateway: every /v1 response names its request (`x-request-id`, the
client's when sane), its turn when it has one (`x-agentrm-turn-id`) and the upstream's own
request id (`x-upstream-request-id`); the request id reaches the upstream and the log line."""
from __future__ import annotations

import logging
import re

import httpx
import openai
import pytest_asyncio

from tests.fake_upstream import FakeUpstream
from tests.integration.test_gateway import MESSAGES, make_agent, make_pool, openai_client, turns_of

HEX_ID = re.compile(r"^[0-9a-f]{32}$")


@pytest_asyncio.fixture
async def upstream():
    fake = await FakeUpstream().start()
    yield fake
    await fake.stop()


def gateway_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "agentrm.gateway" and r.getMessage() == "gateway request"]


async def test_the_sdk_sees_its_request_id_its_turn_and_the_upstreams_id(server, operator, upstream: FakeUpstream,
                                                                        caplog):
    caplog.set_level(logging.INFO, logger="agentrm.gateway")
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    raw = await client.chat.completions.with_raw_response.create(
        model="fake-gpt", messages=MESSAGES, max_tokens=16, extra_headers={"x-request-id": "job-7 step-1"})
    reply = raw.parse()
    [turn] = turns_of(server, agent_id)
    assert raw.headers["x-request-id"] == "job-7 step-1" and reply._request_id == "job-7 step-1"
    assert raw.headers["x-agentrm-turn-id"] == turn["turn_id"]
    [seen] = upstream.seen
    assert seen.forwarded_request_id == "job-7 step-1"
    assert raw.headers["x-upstream-request-id"] == seen.upstream_request_id

    streamed = await client.chat.completions.with_raw_response.create(
        model="fake-gpt", messages=MESSAGES, max_tokens=16, stream=True, extra_headers={"x-request-id": "job-7-s"})
    chunks = [c async for c in streamed.parse()]
    assert chunks and streamed.headers["x-request-id"] == "job-7-s"
    second = turns_of(server, agent_id)[1]
    assert streamed.headers["x-agentrm-turn-id"] == second["turn_id"]
    assert streamed.headers["x-upstream-request-id"] == upstream.seen[1].upstream_request_id
    assert upstream.seen[1].forwarded_request_id == "job-7-s"

    # The gateway's log line of each call names the request, its turn and the upstream's id.
    lines = {r.request_id: r for r in gateway_lines(caplog)}
    assert lines["job-7 step-1"].turn_id == turn["turn_id"] and lines["job-7 step-1"].status == 200
    assert lines["job-7 step-1"].upstream_request_id == seen.upstream_request_id
    assert lines["job-7-s"].turn_id == second["turn_id"]
    await client.close()


async def test_errors_and_upstream_failures_are_named_too(server, operator, upstream: FakeUpstream):
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool)
    upstream.reject_next(1, retry_after=1)
    client = openai_client(server, token)
    try:
        await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=8,
                                             extra_headers={"x-request-id": "limited-1"})
    except openai.RateLimitError as exc:
        headers = exc.response.headers
    else:
        raise AssertionError("the upstream's 429 was not passed on")
    [turn] = turns_of(server, agent_id)
    assert headers["x-request-id"] == "limited-1" and headers["x-agentrm-turn-id"] == turn["turn_id"]
    assert headers["x-upstream-request-id"] == upstream.seen[0].upstream_request_id
    await client.close()


async def test_every_v1_answer_carries_a_request_id_over_raw_http(server, operator, upstream: FakeUpstream):
    pool = await make_pool(operator, upstream)
    _agent_id, token = await make_agent(operator, pool)
    auth = {"authorization": f"Bearer {token}"}
    body = {"model": "fake-gpt", "messages": MESSAGES, "max_tokens": 8}
    async with httpx.AsyncClient(base_url=server.base) as http:
        ok = await http.post("/v1/chat/completions", headers=auth, json=body)
        unnamed_error = await http.post("/v1/chat/completions", json=body)              # no token: 401
        bad = await http.post("/v1/chat/completions", headers={**auth, "x-request-id": "bad-json"}, content=b"{")
        too_long = await http.post("/v1/chat/completions", headers={**auth, "x-request-id": "x" * 129}, json=body)
        odd = await http.post("/v1/chat/completions", json=body,
                              headers={**auth, "x-request-id": "caf\u00e9".encode("latin-1")})
        models = await http.get("/v1/models", headers={**auth, "x-request-id": "list-1"})
        missing = await http.post("/v1/audio/speech", headers={**auth, "x-request-id": "nope-1"}, json={})
        missing_claude = await http.post("/v1/messages/batches", headers={"x-api-key": token})
        wrong_method = await http.get("/v1/chat/completions", headers=auth)
    assert ok.status_code == 200 and HEX_ID.match(ok.headers["x-request-id"])
    assert "x-agentrm-turn-id" in ok.headers and "x-upstream-request-id" in ok.headers
    assert unnamed_error.status_code == 401 and HEX_ID.match(unnamed_error.headers["x-request-id"])
    assert "x-agentrm-turn-id" not in unnamed_error.headers          # no turn was taken
    assert bad.status_code == 400 and bad.headers["x-request-id"] == "bad-json"
    # Not sane (over 128 characters, not printable ASCII): replaced by a fresh id.
    for answer in (too_long, odd):
        assert answer.status_code == 200 and HEX_ID.match(answer.headers["x-request-id"])
        assert upstream.seen[-1].forwarded_request_id is not None
    assert {too_long.headers["x-request-id"], odd.headers["x-request-id"]} <= \
        {s.forwarded_request_id for s in upstream.seen}
    assert models.status_code == 200 and models.headers["x-request-id"] == "list-1"
    # Paths and methods the gateway does not serve: the provider's shape, not a text page.
    assert missing.status_code == 404 and missing.headers["x-request-id"] == "nope-1"
    assert missing.json()["error"]["type"] == "invalid_request_error"
    assert missing_claude.status_code == 404 and missing_claude.json()["error"]["type"] == "not_found_error"
    assert HEX_ID.match(missing_claude.headers["x-request-id"])
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert HEX_ID.match(wrong_method.headers["x-request-id"])
    # Outside /v1 nothing changes.
    async with httpx.AsyncClient(base_url=server.base) as http:
        health = await http.get("/healthz", headers={"x-request-id": "probe"})
    assert "x-request-id" not in health.headers

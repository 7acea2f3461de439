"""The gateway's endpoints beyond chat completions and messages, and its answers to paths it
does not serve, driven by the official SDKs through the real server against the fake
upstream (tests/fake_upstream.py)."""
from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
import pytest_asyncio

from app.gateway.wire import ANTHROPIC
from tests.conftest import OPERATOR_TOKEN
from tests.fake_upstream import FakeUpstream
from tests.integration.test_gateway import UPSTREAM_KEY, anthropic_client, make_agent, make_pool, openai_client


@pytest_asyncio.fixture
async def upstream():
    fake = await FakeUpstream().start()
    yield fake
    await fake.stop()


async def test_unknown_paths_and_methods_get_json_errors_in_the_callers_shape(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    _agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    with pytest.raises(openai.NotFoundError) as raised:
        await client.post("/no/such/path", cast_to=object, body={})
    assert raised.value.body == {"message": raised.value.body["message"], "type": "invalid_request_error",
                                 "param": None, "code": "not_found"}
    assert "POST /v1/no/such/path" in raised.value.body["message"]
    claude = anthropic_client(server, token)
    with pytest.raises(anthropic.NotFoundError) as raised_a:
        await claude.post("/v1/no/such/path", cast_to=object, body={})
    assert raised_a.value.body == {"type": "error", "error": {"type": "not_found_error",
                                                              "message": raised_a.value.body["error"]["message"]}}
    async with httpx.AsyncClient() as http:
        wrong = await http.get(f"{server.base}/v1/chat/completions", headers={"authorization": f"Bearer {token}"})
        wrong_a = await http.delete(f"{server.base}/v1/messages", headers={"x-api-key": token,
                                                                            "anthropic-version": "2023-06-01"})
        bare = await http.get(f"{server.base}/v1/nothing")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    assert wrong_a.status_code == 405 and wrong_a.json()["type"] == "error"
    assert wrong_a.json()["error"]["type"] == "invalid_request_error"
    assert bare.status_code == 404 and bare.json()["error"]["type"] == "invalid_request_error"
    assert upstream.seen == []
    await client.close()
    await claude.close()


async def test_one_model_from_the_pools_upstream_list_or_a_404_in_the_wires_shape(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    _agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    found = await client.models.retrieve("fake-gpt")
    assert (found.id, found.object, found.owned_by) == ("fake-gpt", "model", "fake")
    with pytest.raises(openai.NotFoundError) as raised:
        await client.models.retrieve("no-such-model")
    assert raised.value.body["code"] == "model_not_found" and "no-such-model" in raised.value.body["message"]
    with pytest.raises(openai.NotFoundError) as raised:   # an id with a slash reaches the lookup too
        await client.models.retrieve("org/no-such-model")
    assert raised.value.body["code"] == "model_not_found"
    claude = anthropic_client(server, token)
    info = await claude.models.retrieve("fake-claude")
    assert (info.id, info.type, info.display_name) == ("fake-claude", "model", "fake-claude")
    with pytest.raises(anthropic.NotFoundError) as raised_a:
        await claude.models.retrieve("no-such-model")
    assert raised_a.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(openai.AuthenticationError):
        await openai_client(server, "agt_wrong").models.retrieve("fake-gpt")
    with pytest.raises(anthropic.AuthenticationError):
        await anthropic_client(server, "agt_wrong").models.retrieve("fake-gpt")
    await client.close()
    await claude.close()


COUNT_MESSAGES = [{"role": "user", "content": "How many tokens is this?"}]


@pytest.mark.parametrize("upstream_counts", [True, False])
async def test_count_tokens_asks_the_upstream_or_counts_locally_and_takes_no_turn(
        server, operator, upstream_counts):
    fake = await FakeUpstream(count_tokens=upstream_counts).start()
    try:
        pool = await make_pool(operator, fake)
        agent_id, token = await make_agent(operator, pool)
        claude = anthropic_client(server, token)
        counted = await claude.messages.count_tokens(model="fake-claude", system="Be brief.",
                                                     messages=COUNT_MESSAGES)
        expected = ANTHROPIC.count_prompt({"system": "Be brief.", "messages": COUNT_MESSAGES}, "cl100k_base")
        assert counted.input_tokens == expected
        raw = await claude.messages.with_raw_response.count_tokens(model="fake-claude", messages=COUNT_MESSAGES)
        assert raw.headers["x-agentrm-token-count"] == ("upstream" if upstream_counts else "local")
        # Asked of the upstream each time it serves the path; once when it lacks it (remembered).
        assert [s.path for s in fake.seen] == ["/v1/messages/count_tokens"] * (2 if upstream_counts else 0)
        assert all(s.api_key == UPSTREAM_KEY for s in fake.seen)
        assert [t for t in server.runtime.projector.model.turns.values() if t["agent_id"] == agent_id] == []
        with pytest.raises(anthropic.AuthenticationError):
            await anthropic_client(server, "agt_wrong").messages.count_tokens(model="m", messages=COUNT_MESSAGES)
        with pytest.raises(anthropic.PermissionDeniedError):
            await anthropic_client(server, OPERATOR_TOKEN).messages.count_tokens(model="m", messages=COUNT_MESSAGES)
        with pytest.raises(anthropic.BadRequestError) as raised:
            await claude.messages.count_tokens(model="fake-claude", messages=[])
        assert "messages" in raised.value.message
        await claude.close()
    finally:
        await fake.stop()

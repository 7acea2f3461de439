"""Threat-model rows about what crosses the gateway:
- an agent's `openai-organization`, `openai-project` and `anthropic-beta` headers reached the
  upstream, so an agent chose which organisation or project of the operator's key was billed,
  or turned on a beta that changes what a call costs;
- upstream error bodies were relayed verbatim, one quoting the pool's key ("Incorrect API key
  provided: sk-...");
- `/v1/models` sent the pool's key as both `Authorization: Bearer` and `x-api-key` to every
  upstream."""
from __future__ import annotations

import httpx
import pytest

from tests.integration.test_gateway import MESSAGES, UPSTREAM_KEY, make_agent, make_pool, upstream  # noqa: F401

CHOSEN_BY_THE_AGENT = {"openai-organization": "org-agents-pick", "openai-project": "proj-agents-pick",
                       "anthropic-beta": "context-1m-2025-08-07"}


async def test_billing_and_beta_headers_of_an_agent_never_reach_the_upstream(server, operator, upstream):  # noqa: F811
    pool = await make_pool(operator, upstream)
    _, token = await make_agent(operator, pool, "header-picker")
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
        chat = await http.post("/v1/chat/completions", json={"model": "fake-gpt", "messages": MESSAGES},
                               headers={"authorization": f"Bearer {token}", **CHOSEN_BY_THE_AGENT})
        claude = await http.post("/v1/messages", json={"model": "fake-claude", "max_tokens": 32,
                                                       "messages": MESSAGES[1:]},
                                 headers={"x-api-key": token, "anthropic-version": "2023-06-01", **CHOSEN_BY_THE_AGENT})
    assert chat.status_code == claude.status_code == 200
    for seen in upstream.seen[-2:]:
        assert not set(CHOSEN_BY_THE_AGENT) & set(seen.headers), seen.headers


@pytest.mark.parametrize("status", [401, 403, 500, 503])
async def test_an_upstream_error_about_the_key_or_the_provider_reaches_the_agent_generic(
        server, operator, upstream, status):  # noqa: F811
    pool = await make_pool(operator, upstream)
    _, token = await make_agent(operator, pool, f"sees-{status}")
    upstream.fail_next(status, {"error": {"message": f"Incorrect API key provided: {UPSTREAM_KEY}",
                                          "type": "invalid_request_error", "code": "invalid_api_key"}})
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
        answer = await http.post("/v1/chat/completions", json={"model": "fake-gpt", "messages": MESSAGES},
                                 headers={"authorization": f"Bearer {token}"})
    assert answer.status_code == status
    assert UPSTREAM_KEY not in answer.text and "Incorrect API key" not in answer.text
    assert answer.json()["error"]["message"]           # still the wire's shape, which SDKs parse


async def test_an_upstream_error_about_the_request_passes_with_secrets_redacted(server, operator, upstream):  # noqa: F811
    pool = await make_pool(operator, upstream)
    _, token = await make_agent(operator, pool, "sees-400")
    upstream.fail_next(400, {"error": {"message": f"max_tokens too large (key {UPSTREAM_KEY})",
                                       "type": "invalid_request_error", "code": None}})
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
        answer = await http.post("/v1/chat/completions", json={"model": "fake-gpt", "messages": MESSAGES},
                                 headers={"authorization": f"Bearer {token}"})
    assert answer.status_code == 400 and "max_tokens too large" in answer.text
    assert UPSTREAM_KEY not in answer.text


async def test_the_model_list_sends_the_key_in_one_form(server, operator, upstream):  # noqa: F811
    pool = await make_pool(operator, upstream)
    _, token = await make_agent(operator, pool, "lists-models")
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
        listed = await http.get("/v1/models", headers={"authorization": f"Bearer {token}"})
    assert listed.status_code == 200 and upstream.model_list_headers
    for headers in upstream.model_list_headers:
        assert ("authorization" in headers) != ("x-api-key" in headers), headers

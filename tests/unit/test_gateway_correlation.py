"""The correlation middleware on a bare ASGI app: which ids are kept, and an exception that
escapes before the response began still answers in the wire's shape, with the request id."""
from __future__ import annotations

import httpx
import pytest

from app.gateway.correlation import CorrelationMiddleware, sane_request_id


@pytest.mark.parametrize(("value", "kept"), [
    ("abc", True), ("job 7/step-1", True), ("x" * 128, True),
    ("", False), ("x" * 129, False), (" padded", False), ("tab\there", False), ("caf\u00e9", False), (None, False)])
def test_which_request_ids_are_kept(value, kept):
    assert sane_request_id(value) is kept


async def test_an_escaped_exception_is_a_wire_shaped_500_with_the_request_id():
    async def failing(scope, receive, send):
        raise RuntimeError("boom")

    transport = httpx.ASGITransport(app=CorrelationMiddleware(failing), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        openai_style = await http.post("/v1/chat/completions", headers={"x-request-id": "r-1"})
        anthropic_style = await http.post("/v1/messages")
    assert openai_style.status_code == 500 and openai_style.headers["x-request-id"] == "r-1"
    assert openai_style.json()["error"]["type"] == "api_error" and "r-1" in openai_style.json()["error"]["message"]
    assert anthropic_style.status_code == 500 and anthropic_style.json()["type"] == "error"
    assert len(anthropic_style.headers["x-request-id"]) == 32

"""Fixtures: a fake AgentRM (see agentrm_fake) the client under test talks to.

The client builds its own httpx clients; `fake` routes every httpx request made during
a test to the fake's handler, and serves the `turn` subscription on a loopback port that
the base URL names, as the real server serves both on one address."""
from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
import websockets
from agentrm_fake import FakeAgentRM


@pytest_asyncio.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeAgentRM]:
    server = FakeAgentRM()
    real_async, real_sync = httpx.AsyncClient, httpx.Client

    def async_client(*args: Any, **kwargs: Any) -> httpx.AsyncClient:
        return real_async(*args, transport=httpx.MockTransport(server.handle_async), **kwargs)

    def post(url: str, **kwargs: Any) -> httpx.Response:
        with real_sync(transport=httpx.MockTransport(server.handle)) as client:
            return client.post(url, **kwargs)

    monkeypatch.setattr(httpx, "AsyncClient", async_client)
    monkeypatch.setattr(httpx, "post", post)
    ws_server = await websockets.serve(server.serve_ws, "127.0.0.1", 0, subprotocols=["graphql-transport-ws"])
    port = next(iter(ws_server.sockets)).getsockname()[1]
    server.base = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        ws_server.close()
        await ws_server.wait_closed()

"""GraphQL over HTTP (httpx) and one subscription over graphql-transport-ws (websockets),
the two transports the agent-side client needs. Errors keep the server's
`extensions.code`, so callers can tell FORBIDDEN from UNAVAILABLE."""
from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import httpx
import websockets
from websockets.typing import Subprotocol

# A GraphQL answer's `data` (or one variable map): JSON objects keyed by field name.
Data = dict[str, Any]


class AgentRMError(Exception):
    """A GraphQL error from AgentRM; `code` is its extensions.code (e.g. FORBIDDEN)."""

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.code = code


def _raise_first(errors: list[Any]) -> NoReturn:
    """The first of a GraphQL answer's errors, raised with its extensions.code."""
    first = errors[0] if errors else {}
    raise AgentRMError(first.get("message", "error"), (first.get("extensions") or {}).get("code"))


class Transport:
    def __init__(self, url: str, token: str, *, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self.token = token
        self.http = httpx.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=timeout)

    async def query(self, document: str, **variables: Any) -> Data:
        response = await self.http.post(f"{self.url}/graphql", json={"query": document, "variables": variables})
        try:
            body = response.json()
        except ValueError:
            raise AgentRMError(f"AgentRM answered HTTP {response.status_code} without JSON", "UNAVAILABLE") from None
        if body.get("errors"):
            _raise_first(body["errors"])
        data: Data = body["data"]
        return data

    async def subscribe(self, document: str, **variables: Any) -> AsyncIterator[Data]:
        """Each `next` payload's data, until the server completes the subscription."""
        ws_url = "ws" + self.url[4:] + "/graphql" if self.url.startswith("http") else self.url + "/graphql"
        async with websockets.connect(ws_url, subprotocols=[Subprotocol("graphql-transport-ws")]) as ws:
            await ws.send(json.dumps({"type": "connection_init",
                                      "payload": {"authorization": f"Bearer {self.token}"}}))
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 30))
                if message["type"] == "connection_ack":
                    break
                if message["type"] == "ping":
                    await ws.send(json.dumps({"type": "pong"}))
            sub_id = str(uuid.uuid4())
            await ws.send(json.dumps({"id": sub_id, "type": "subscribe",
                                      "payload": {"query": document, "variables": variables}}))
            async for raw in ws:
                message = json.loads(raw)
                kind = message["type"]
                if kind == "ping":
                    await ws.send(json.dumps({"type": "pong"}))
                elif kind == "next":
                    payload = message["payload"]
                    if payload.get("errors"):
                        _raise_first(payload["errors"])
                    yield payload["data"]
                elif kind == "error":
                    _raise_first(message.get("payload") or [{}])
                elif kind == "complete":
                    return

    async def close(self) -> None:
        await self.http.aclose()

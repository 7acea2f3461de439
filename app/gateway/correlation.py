"""Correlation of a /v1 call: one request id on every response, forwarded to the upstream.

The request id is the client's `x-request-id` when it sent a sane one (1 to 128 printable
ASCII characters), else a new uuid4 hex. It is chosen once per request, by the middleware
below, which also writes it on the response: whatever answers the request (the gateway,
the models list, a 404 or 405 for a path under /v1, an unexpected 500) carries it, and no
handler can forget it. The gateway forwards it to the upstream as `x-request-id`, logs it
with the call's turn, and names the turn (`x-agentrm-turn-id`) and the upstream's own
request id (`x-upstream-request-id`) on its responses.
"""
from __future__ import annotations

import json
import uuid

from .wire import ANTHROPIC, OPENAI

REQUEST_ID_HEADER = "x-request-id"
TURN_ID_HEADER = "x-agentrm-turn-id"
UPSTREAM_REQUEST_ID_HEADER = "x-upstream-request-id"
# Where providers name their own request: OpenAI's header, then Anthropic's.
UPSTREAM_ID_HEADERS = ("x-request-id", "request-id")
MAX_REQUEST_ID_CHARS = 128
PREFIX = "/v1"
_SCOPE_KEY = "agentrm.request_id"


def sane_request_id(value: str | None) -> bool:
    """1 to 128 characters, each printable ASCII (a space inside is allowed, not at an end:
    header values lose them)."""
    return (value is not None and 1 <= len(value) <= MAX_REQUEST_ID_CHARS and value == value.strip()
            and all(" " <= c <= "~" for c in value))


def request_id_of(scope) -> str:
    """This request's id: chosen once, at the first ask, and kept in the ASGI scope."""
    found = scope.get(_SCOPE_KEY)
    if found is None:
        sent = None
        for name, value in scope.get("headers") or ():
            if name.lower() == REQUEST_ID_HEADER.encode():
                sent = value.decode("latin-1")
                break
        found = scope[_SCOPE_KEY] = sent if sane_request_id(sent) else uuid.uuid4().hex
    return found


def upstream_request_id(upstream_headers) -> str | None:
    for name in UPSTREAM_ID_HEADERS:
        value = upstream_headers.get(name)
        if value:
            return value
    return None


def _under_prefix(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def _error_body(path: str, status: int, message: str) -> dict:
    wire = ANTHROPIC if path.startswith("/v1/messages") else OPENAI
    return wire.error_body(status, message)


class CorrelationMiddleware:
    """Writes the request id on every response under /v1, and answers an exception that
    escaped before the response began with a 500 in the wire's shape (then re-raises it,
    so the server still logs it)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not _under_prefix(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        started = False

        async def send_with_id(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [(k, v) for k, v in message.get("headers") or ()
                           if k.lower() != REQUEST_ID_HEADER.encode()]
                headers.append((REQUEST_ID_HEADER.encode(), request_id.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            if started:
                raise
            body = json.dumps(_error_body(scope["path"], 500, "AgentRM failed to answer this request; "
                                          f"its request id is {request_id}")).encode()
            await send_with_id({"type": "http.response.start", "status": 500,
                                "headers": [(b"content-type", b"application/json"),
                                            (b"content-length", str(len(body)).encode())]})
            await send_with_id({"type": "http.response.body", "body": body, "more_body": False})
            raise

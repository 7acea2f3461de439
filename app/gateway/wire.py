"""The two wire formats the gateway speaks: OpenAI chat completions and Anthropic messages.

Everything that differs between them lives here, behind one small interface: where the
API key is, what an error body looks like, how the prompt is counted, how many output
tokens a request may take, and where the usage is in a reply or a stream. The proxy
(app/gateway/proxy.py) is written once against `WireFormat`.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from app.auth import parse_bearer
from app.context.tokens import REPLY_PRIMING_TOKENS, count_message, count_text

# The output bound of a request that names none, where a fixed one is needed (the gateway
# itself reserves a learned estimate instead: app/gateway/output_estimate.py). OpenAI's own
# default is "up to the context", which no admission can reserve.
DEFAULT_MAX_OUTPUT_TOKENS = 1024


def _content_text(content: Any) -> str:
    """The text of a message's content: a string, or a list of parts (text parts counted,
    other parts - images, tool blocks - by their JSON, a conservative stand-in)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
            else:
                out.append(json.dumps(part, sort_keys=True, ensure_ascii=False))
        return "".join(out)
    return json.dumps(content, sort_keys=True, ensure_ascii=False)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass
class StreamUsage:
    """What a stream has delivered so far: its text, and the usage the provider reported,
    which wins when present (a stream cut short has none: its text is counted, once, as a
    whole - deltas counted apart would split tokens and overcount)."""
    encoding: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    text: list[str] = field(default_factory=list)

    def completion(self) -> int:
        if self.completion_tokens is not None:
            return self.completion_tokens
        return count_text("".join(self.text), self.encoding)


class BadRequest(ValueError):
    """The client's request cannot be forwarded (not JSON, no messages, ...)."""


class WireFormat(ABC):
    """One provider's wire format: what the gateway reads from and writes to it."""
    name: str
    path: str                      # the upstream path, appended to the pool's base URL

    @abstractmethod
    def api_key(self, headers) -> str | None: ...

    @abstractmethod
    def error_body(self, status: int, message: str, code: str | None = None) -> dict:
        """The provider's error object for `status`; `code` overrides OpenAI's `code` field."""

    @abstractmethod
    def messages(self, body: dict) -> list[tuple[str, str]]: ...

    def count_prompt(self, body: dict, encoding: str) -> int:
        # The pool's tiktoken encoding is the estimate the turn reserves for every format
        # (Claude's tokenizer is not public); the completion then reports the provider's count.
        n = REPLY_PRIMING_TOKENS + sum(count_message(r, c, encoding) for r, c in self.messages(body))
        if body.get("tools"):
            n += count_text(json.dumps(body["tools"], sort_keys=True, ensure_ascii=False), encoding)
        return n

    @abstractmethod
    def output_bound(self, body: dict) -> int | None:
        """The output tokens the request allows itself, or None when it names no bound."""

    def max_output_tokens(self, body: dict) -> int:
        bound = self.output_bound(body)
        return DEFAULT_MAX_OUTPUT_TOKENS if bound is None else bound

    @abstractmethod
    def usage(self, reply: dict) -> tuple[int | None, int | None]: ...

    @abstractmethod
    def reply_text(self, reply: dict) -> str: ...

    @abstractmethod
    def on_event(self, payload: dict, usage: StreamUsage) -> None:
        """Fold one SSE `data:` object of the stream into `usage`."""

    @abstractmethod
    def upstream_headers(self, client_headers, api_key: str | None) -> dict[str, str]: ...

    def stream_error(self, status: int, message: str) -> bytes:
        """An error event that ends a stream already begun; both SDKs raise on it."""
        return b"data: " + json.dumps(self.error_body(status, message)).encode() + b"\n\n"

    def parse(self, raw: bytes) -> dict:
        try:
            body = json.loads(raw or b"")
        except ValueError as exc:
            raise BadRequest(f"the request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            raise BadRequest("messages must be a non-empty list")
        for m in body["messages"]:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise BadRequest("every message must be an object with a role")
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise BadRequest("model is required")
        return body


class OpenAIChat(WireFormat):
    name = "openai"
    path = "/v1/chat/completions"

    def api_key(self, headers) -> str | None:
        return parse_bearer(headers.get("authorization"))

    def error_body(self, status: int, message: str, code: str | None = None) -> dict:
        kind = {401: ("invalid_request_error", "invalid_api_key"), 403: ("invalid_request_error", "forbidden"),
                404: ("invalid_request_error", "not_found"), 405: ("invalid_request_error", "method_not_allowed"),
                429: ("requests", "rate_limit_exceeded"), 400: ("invalid_request_error", None),
                409: ("invalid_request_error", "idempotency_key_reused"),
                413: ("invalid_request_error", "request_too_large"),
                504: ("timeout", "upstream_timeout")}.get(status, ("api_error", None))
        return {"error": {"message": message, "type": kind[0], "param": None, "code": code or kind[1]}}

    def messages(self, body: dict) -> list[tuple[str, str]]:
        out = []
        for m in body["messages"]:
            text = _content_text(m.get("content"))
            if m.get("tool_calls"):
                text += json.dumps(m["tool_calls"], sort_keys=True, ensure_ascii=False)
            out.append((m["role"], text))
        return out

    def output_bound(self, body: dict) -> int | None:
        for key in ("max_completion_tokens", "max_tokens"):
            value = _int_or_none(body.get(key))
            if value is not None:
                return value
        return None

    def usage(self, reply: dict) -> tuple[int | None, int | None]:
        u = reply.get("usage") if isinstance(reply, dict) else None
        if not isinstance(u, dict):
            return None, None
        return _int_or_none(u.get("prompt_tokens")), _int_or_none(u.get("completion_tokens"))

    def reply_text(self, reply: dict) -> str:
        try:
            return _content_text(reply["choices"][0]["message"].get("content"))
        except (KeyError, IndexError, TypeError, AttributeError):
            return ""

    def on_event(self, payload: dict, usage: StreamUsage) -> None:
        prompt, completion = self.usage(payload)
        if completion is not None:
            usage.prompt_tokens, usage.completion_tokens = prompt, completion
        for choice in payload.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and isinstance(delta.get("content"), str) and delta["content"]:
                usage.text.append(delta["content"])

    def upstream_headers(self, client_headers, api_key: str | None) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        # An allowlist: which organisation or project of the pool's key is billed is the
        # operator's choice, so a client's openai-organization / openai-project never passes.
        for name in ("accept", "x-client-request-id"):
            if name in client_headers:
                headers[name] = client_headers[name]
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        return headers


class AnthropicMessages(WireFormat):
    name = "anthropic"
    path = "/v1/messages"

    def api_key(self, headers) -> str | None:
        return headers.get("x-api-key") or parse_bearer(headers.get("authorization"))

    def error_body(self, status: int, message: str, code: str | None = None) -> dict:
        kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 405: "invalid_request_error", 409: "invalid_request_error",
                413: "request_too_large", 429: "rate_limit_error", 504: "timeout_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def messages(self, body: dict) -> list[tuple[str, str]]:
        out = []
        system = body.get("system")
        if system:
            out.append(("system", _content_text(system)))
        out.extend((m["role"], _content_text(m.get("content"))) for m in body["messages"])
        return out

    def parse(self, raw: bytes) -> dict:
        body = super().parse(raw)
        if _int_or_none(body.get("max_tokens")) is None:
            raise BadRequest("max_tokens is required")
        return body

    def output_bound(self, body: dict) -> int | None:
        return _int_or_none(body.get("max_tokens")) or None

    def usage(self, reply: dict) -> tuple[int | None, int | None]:
        u = reply.get("usage") if isinstance(reply, dict) else None
        if not isinstance(u, dict):
            return None, None
        prompt = _int_or_none(u.get("input_tokens"))
        if prompt is not None:
            prompt += sum(_int_or_none(u.get(k)) or 0 for k in
                          ("cache_creation_input_tokens", "cache_read_input_tokens"))
        return prompt, _int_or_none(u.get("output_tokens"))

    def reply_text(self, reply: dict) -> str:
        return _content_text([b for b in reply.get("content") or () if isinstance(b, dict)
                              and b.get("type") == "text"])

    def on_event(self, payload: dict, usage: StreamUsage) -> None:
        kind = payload.get("type")
        if kind == "message_start":
            # Its output_tokens is a placeholder (1); the count comes with message_delta.
            usage.prompt_tokens, _ = self.usage(payload.get("message") or {})
        elif kind == "message_delta":
            _, completion = self.usage(payload)
            if completion is not None:
                usage.completion_tokens = completion
        elif kind == "content_block_delta":
            delta = payload.get("delta") or {}
            text = delta.get("text") if isinstance(delta, dict) else None
            if isinstance(text, str) and text:
                usage.text.append(text)

    def upstream_headers(self, client_headers, api_key: str | None) -> dict[str, str]:
        headers = {"content-type": "application/json",
                   "anthropic-version": client_headers.get("anthropic-version", "2023-06-01")}
        # anthropic-beta is not passed: a beta can change what a call costs (a longer
        # context, another billing), which is the operator's choice, not an agent's.
        for name in ("accept",):
            if name in client_headers:
                headers[name] = client_headers[name]
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def stream_error(self, status: int, message: str) -> bytes:
        return b"event: error\n" + super().stream_error(status, message)


OPENAI = OpenAIChat()
ANTHROPIC = AnthropicMessages()


def caller_wire(headers) -> WireFormat:
    """The format a request that names none by its path speaks (GET /v1/models, an unknown
    path): Anthropic's when it carries Anthropic's headers, as its SDK always sends, else OpenAI's."""
    return ANTHROPIC if "x-api-key" in headers or "anthropic-version" in headers else OPENAI


class SSEParser:
    """Splits a byte stream into Server-Sent Events' `data:` payloads, across chunk
    boundaries. The bytes themselves pass to the client untouched; this only reads them."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[dict]:
        self._buffer += chunk
        out: list[dict] = []
        while True:
            # Events end with a blank line; providers use \n, some proxies \r\n.
            cut = min((i for i in (self._buffer.find(b"\n\n"), self._buffer.find(b"\r\n\r\n")) if i >= 0),
                      default=-1)
            if cut < 0:
                return out
            event, self._buffer = self._buffer[:cut], self._buffer[cut:].lstrip(b"\r\n")
            data = b"\n".join(line[5:].strip() for line in event.splitlines() if line.startswith(b"data:"))
            if not data or data == b"[DONE]":
                continue
            try:
                payload = json.loads(data)
            except ValueError:
                continue
            if isinstance(payload, dict):
                out.append(payload)

"""OpenAI's embeddings as a wire format: a call like any other, with no output.

An embedding request is a model call the provider bills and rate-limits by its input, so it
takes a turn as chat completions do (GatewayEndpoint): the prompt is the inputs counted with
the pool's tokenizer (a token array counts its own length), it reserves no output tokens,
and it completes with the provider's `usage.prompt_tokens` (the local count when absent)
and no completion tokens. It never streams.
"""
from __future__ import annotations

import json
from typing import Any

from app.context.tokens import count_text

from .wire import BadRequest, OpenAIChat, StreamUsage, _int_or_none


def _is_tokens(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_int_or_none(t) is not None for t in value)


def _inputs(value: Any) -> list[str | list[int]]:
    """The request's inputs, one per vector asked for; BadRequest for any other shape."""
    if isinstance(value, str):
        return [value]
    if _is_tokens(value):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) or _is_tokens(v) for v in value):
        return value
    raise BadRequest("input must be a string, a list of strings, a token array or a list of token arrays")


class OpenAIEmbeddings(OpenAIChat):
    name = "embeddings"
    path = "/v1/embeddings"

    def parse(self, raw: bytes) -> dict:
        try:
            body = json.loads(raw or b"")
        except ValueError as exc:
            raise BadRequest(f"the request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise BadRequest("model is required")
        if "input" not in body:
            raise BadRequest("input is required")
        _inputs(body["input"])
        if body.get("stream"):
            raise BadRequest("embeddings do not stream: leave stream out")
        return body

    def messages(self, body: dict) -> list[tuple[str, str]]:
        return []   # nothing to record in the agent's context

    def count_prompt(self, body: dict, encoding: str) -> int:
        return sum(len(i) if isinstance(i, list) else count_text(i, encoding) for i in _inputs(body["input"]))

    def output_bound(self, body: dict) -> int | None:
        return 0   # an embedding generates nothing

    def usage(self, reply: dict) -> tuple[int | None, int | None]:
        u = reply.get("usage") if isinstance(reply, dict) else None
        if not isinstance(u, dict):
            return None, None
        return _int_or_none(u.get("prompt_tokens")), 0

    def reply_text(self, reply: dict) -> str:
        return ""

    def on_event(self, payload: dict, usage: StreamUsage) -> None:
        return None   # never streams (parse refuses stream)


EMBEDDINGS = OpenAIEmbeddings()

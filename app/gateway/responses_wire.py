"""OpenAI's Responses API (POST /v1/responses) as a wire format, for upstreams that serve it.

A call like chat completions: counted from `instructions`, `input` and `tools`, bounded by
`max_output_tokens`, completed with `usage.input_tokens` / `usage.output_tokens` of the
response (in a stream, of the `response.completed` event; `response.output_text.delta`
carries the text). Upstreams that lack the path get the request translated to chat
completions (app/gateway/responses.py, app/gateway/responses_endpoint.py).
"""
from __future__ import annotations

import json
from typing import Any

from .wire import BadRequest, OpenAIChat, StreamUsage, _content_text, _int_or_none

# Stream events that end a response and carry its usage.
FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")
# Ways to give a Responses request its context other than `input`.
STATEFUL_FIELDS = ("previous_response_id", "conversation", "prompt")


def _item_text(item: dict) -> tuple[str, str]:
    """(role, text) of one input item, for counting and for the context record."""
    kind = item.get("type", "message")
    if kind == "message":
        return str(item.get("role") or "user"), _content_text(item.get("content"))
    if kind == "function_call":
        return "assistant", f"{item.get('name', '')}{item.get('arguments', '')}"
    if kind == "function_call_output":
        return "tool", _content_text(item.get("output"))
    return "user", json.dumps(item, sort_keys=True, ensure_ascii=False)


class OpenAIResponses(OpenAIChat):
    name = "responses"
    path = "/v1/responses"

    def parse(self, raw: bytes) -> dict:
        try:
            body = json.loads(raw or b"")
        except ValueError as exc:
            raise BadRequest(f"the request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise BadRequest("model is required")
        items = body.get("input")
        if items is None and not any(body.get(k) for k in STATEFUL_FIELDS):
            raise BadRequest("input is required: a string or a list of items")
        if items is not None and not isinstance(items, str) and not (
                isinstance(items, list) and all(isinstance(i, dict) for i in items)):
            raise BadRequest("input must be a string or a list of item objects")
        if body.get("instructions") is not None and not isinstance(body["instructions"], str):
            raise BadRequest("instructions must be a string")
        return body

    def messages(self, body: dict) -> list[tuple[str, str]]:
        out = []
        if body.get("instructions"):
            out.append(("system", body["instructions"]))
        items: Any = body.get("input")
        if isinstance(items, str):
            out.append(("user", items))
        elif isinstance(items, list):
            out.extend(_item_text(i) for i in items)
        return out

    def output_bound(self, body: dict) -> int | None:
        return _int_or_none(body.get("max_output_tokens"))

    def usage(self, reply: dict) -> tuple[int | None, int | None]:
        u = reply.get("usage") if isinstance(reply, dict) else None
        if not isinstance(u, dict):
            return None, None
        return _int_or_none(u.get("input_tokens")), _int_or_none(u.get("output_tokens"))

    def reply_text(self, reply: dict) -> str:
        out: list[str] = []
        for item in reply.get("output") or () if isinstance(reply, dict) else ():
            if isinstance(item, dict) and item.get("type") == "message":
                out.extend(p["text"] for p in item.get("content") or ()
                           if isinstance(p, dict) and p.get("type") == "output_text" and isinstance(p.get("text"), str))
        return "".join(out)

    def on_event(self, payload: dict, usage: StreamUsage) -> None:
        kind = payload.get("type")
        if kind == "response.output_text.delta" and isinstance(payload.get("delta"), str):
            usage.text.append(payload["delta"])
        elif kind in FINAL_EVENTS:
            prompt, completion = self.usage(payload.get("response") or {})
            if completion is not None:
                usage.prompt_tokens, usage.completion_tokens = prompt, completion

    def stream_error(self, status: int, message: str) -> bytes:
        # The Responses stream's error event; its `error` object is what the SDK raises on.
        body = self.error_body(status, message)
        payload = {"type": "error", "code": body["error"]["code"], "message": message, "param": None, **body}
        return b"event: error\ndata: " + json.dumps(payload).encode() + b"\n\n"


RESPONSES = OpenAIResponses()

"""A stand-in LLM for `make run` on a machine with no provider key: the model `demo-echo`,
served by the server itself under /demo-upstream/v1, in both wire formats, streaming
or not. It echoes the last user message word by word (20 ms a word, as a small model
streams) and reports exact usage, so a newcomer's first gateway call works offline and
shows up in the console and in /metrics like any other. Mounted by `agentrm serve` when
no AGENTRM_UPSTREAM_BASE_URL is set (it is then the `default` pool's upstream, with or
without --no-demo) and with the demo fleet (the `demo` pool's upstream)."""
from __future__ import annotations

import asyncio
import json
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from app.context.tokens import count_text

from .wire import ANTHROPIC, OPENAI, BadRequest

PREFIX = "/demo-upstream"
MODEL = "demo-echo"
WORD_DELAY_S = 0.02


def _words(wire, body: dict) -> list[str]:
    last = wire.messages(body)[-1][1] if body.get("messages") else ""
    return [w + " " for w in ("echo: " + last).split()][:200]


def _sse(payload: dict, event: str | None = None) -> bytes:
    return (f"event: {event}\n".encode() if event else b"") + b"data: " + json.dumps(payload).encode() + b"\n\n"


async def chat_completions(request: Request):
    try:
        body = OPENAI.parse(await request.body())
    except BadRequest as exc:
        return JSONResponse(OPENAI.error_body(400, str(exc)), status_code=400)
    words = _words(OPENAI, body)
    prompt = OPENAI.count_prompt(body, "cl100k_base")
    completion = count_text("".join(words))
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    base = {"id": f"chatcmpl-demo-{time.time_ns()}", "created": int(time.time()), "model": body["model"]}
    if body.get("stream") is not True:
        await asyncio.sleep(WORD_DELAY_S * len(words))
        return JSONResponse({**base, "object": "chat.completion", "usage": usage, "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "".join(words)}, "finish_reason": "stop"}]})

    async def events():
        chunk = {**base, "object": "chat.completion.chunk"}
        yield _sse({**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        for w in words:
            await asyncio.sleep(WORD_DELAY_S)
            yield _sse({**chunk, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]})
        yield _sse({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            yield _sse({**chunk, "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"
    return StreamingResponse(events(), media_type="text/event-stream")


async def messages(request: Request):
    try:
        body = ANTHROPIC.parse(await request.body())
    except BadRequest as exc:
        return JSONResponse(ANTHROPIC.error_body(400, str(exc)), status_code=400)
    words = _words(ANTHROPIC, body)
    prompt = ANTHROPIC.count_prompt(body, "cl100k_base")
    completion = count_text("".join(words))
    message = {"id": f"msg_demo_{time.time_ns()}", "type": "message", "role": "assistant", "model": body["model"],
               "stop_sequence": None}
    if body.get("stream") is not True:
        await asyncio.sleep(WORD_DELAY_S * len(words))
        return JSONResponse({**message, "content": [{"type": "text", "text": "".join(words)}],
                             "stop_reason": "end_turn", "usage": {"input_tokens": prompt, "output_tokens": completion}})

    async def events():
        yield _sse({"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                         "usage": {"input_tokens": prompt, "output_tokens": 1}}},
                   "message_start")
        yield _sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                   "content_block_start")
        for w in words:
            await asyncio.sleep(WORD_DELAY_S)
            yield _sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}},
                       "content_block_delta")
        yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
        yield _sse({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": completion}}, "message_delta")
        yield _sse({"type": "message_stop"}, "message_stop")
    return StreamingResponse(events(), media_type="text/event-stream")


async def models(_request: Request):
    return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                     "owned_by": "agentrm-demo"}]})


def routes() -> list[Route]:
    return [Route(f"{PREFIX}/v1/chat/completions", chat_completions, methods=["POST"]),
            Route(f"{PREFIX}/v1/messages", messages, methods=["POST"]),
            Route(f"{PREFIX}/v1/models", models, methods=["GET"])]

"""A fake LLM provider on loopback that speaks both real wire formats, for the gateway tests.

Why not bench/agentrm_bench/fake_provider.py: that one speaks a benchmark protocol (the
workload tells it, per request, how long to take and whether to hang) and only OpenAI's
stream. The gateway must be tested with the official SDKs, which send real requests:
OpenAI chat completions and Anthropic messages, streaming and not. What it does share is
the limiter: `agentrm_bench.sim.Provider`, the simulation's model of a provider's RPM/TPM
buckets, 429 + retry-after and x-ratelimit-* headers (here also given in Anthropic's names),
or with `limiter=` one of its other shapes: a strict "sliding-window" or "fixed-window" of
`window_s` (sim.provider_of), whose headers say what is left of the window and when it frees.

Behaviour:
- time to first byte `first_chunk_s`, then one SSE event per word every `chunk_interval_s`
  (realistic latency, scaled down);
- `reject_next(n, retry_after)` answers the next n requests 429 with retry-after, as a
  provider that counts traffic AgentRM does not see would;
- `exhaust_next(reset_s)` answers the next admitted request with remaining 0 and that reset,
  and refuses (429) every request that arrives before the reset, as a provider whose budget
  other traffic spent would;
- `hang_next(n)` admits the next n requests and then sends nothing (not even headers)
  until the client hangs up;
- every request is logged with what identifies it, its status, and `closed`, an event set
  when the client hung up before the answer's end.
A raw ASGI app so it sees the client's disconnect (`http.disconnect`) the moment it happens.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field

import uvicorn

from agentrm_bench.sim import provider_of
from app.context.tokens import count_text
from app.gateway.wire import ANTHROPIC, OPENAI

REPLY_WORDS = 12


@dataclass
class Seen:
    """One request as the upstream saw it."""
    path: str
    request_id: str
    api_key: str | None
    model: str
    stream: bool
    received_at: float
    prompt_tokens: int
    max_tokens: int
    status: int = 0
    hung: bool = False
    words_sent: int = 0
    finished: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)


class FakeUpstream:
    def __init__(self, rpm: int = 10_000, tpm: int = 10_000_000, *, first_chunk_s: float = 0.02,
                 chunk_interval_s: float = 0.01, words: int = REPLY_WORDS, limiter: str = "token-bucket",
                 window_s: float = 60.0, **shape):
        self.limiter = provider_of(limiter, rpm, tpm, window_s=window_s, **shape)
        self._exhaust: list[float] = []
        self._exhausted_until = 0.0
        self.first_chunk_s, self.chunk_interval_s, self.words = first_chunk_s, chunk_interval_s, words
        self.seen: list[Seen] = []
        self._reject: list[float] = []
        self._hang = 0
        self._stall_after: list[int] = []
        self._delays: list[tuple[float, str | None]] = []
        self._t0 = time.time()
        self.arrived = asyncio.Condition()

    # -- knobs ---------------------------------------------------------------------------
    def reject_next(self, n: int = 1, retry_after: float = 1.0) -> None:
        self._reject.extend([retry_after] * n)

    def exhaust_next(self, reset_s: float) -> None:
        self._exhaust.append(reset_s)

    def delay_next(self, seconds: float, model: str | None = None) -> None:
        """The next answer's (to `model`, if named) first byte, headers included, comes after
        `seconds`: a slow model."""
        self._delays.append((seconds, model))

    def _delay_for(self, model: str) -> float:
        for i, (seconds, for_model) in enumerate(self._delays):
            if for_model in (None, model):
                del self._delays[i]
                return seconds
        return self.first_chunk_s

    def hang_next(self, n: int = 1) -> None:
        self._hang += n

    def stall_next_after(self, words: int) -> None:
        """The next streamed answer sends `words` words and then nothing, until the client leaves."""
        self._stall_after.append(words)

    async def wait_for(self, predicate, timeout: float = 30.0) -> None:
        """Until predicate(self.seen) holds (re-checked at each request's arrival or end)."""
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: predicate(self.seen)), timeout)

    async def _notify(self) -> None:
        async with self.arrived:
            self.arrived.notify_all()

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> FakeUpstream:
        config = uvicorn.Config(self, host="127.0.0.1", port=0, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            if self.task.done():
                self.task.result()
            await asyncio.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._t0 = time.time()
        return self

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task

    # -- ASGI ------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        path = scope["path"]
        if scope["method"] == "GET" and path == "/v1/models":
            await _json(send, 200, {"object": "list", "data": [
                {"id": "fake-gpt", "object": "model", "created": 0, "owned_by": "fake"},
                {"id": "fake-claude", "object": "model", "created": 0, "owned_by": "fake"}]}, {})
            return
        wire = {"/v1/chat/completions": OPENAI, "/v1/messages": ANTHROPIC}.get(path)
        if scope["method"] != "POST" or wire is None:
            await _json(send, 404, {"error": {"message": "not found"}}, {})
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(raw)
        prompt = wire.count_prompt(body, "cl100k_base")
        max_tokens = wire.max_output_tokens(body)
        key = headers.get("x-api-key") if wire is ANTHROPIC else headers.get("authorization", "")[7:] or None
        seen = Seen(path, headers.get("x-client-request-id") or str(uuid.uuid4()), key, body.get("model", ""),
                    body.get("stream") is True, time.time(), prompt, max_tokens)
        self.seen.append(seen)
        watch = asyncio.create_task(_watch_disconnect(receive, seen))
        try:
            await self._answer(send, wire, body, seen)
        finally:
            watch.cancel()
            await self._notify()

    async def _answer(self, send, wire, body: dict, seen: Seen) -> None:
        await self._notify()
        now = time.time() - self._t0
        if self._reject:
            retry = self._reject.pop(0)
            seen.status = 429
            await _json(send, 429, _rate_error(wire), {**self._rate_headers(wire), "retry-after": f"{retry:g}"})
            return
        answer = self.limiter.submit(now, seen.prompt_tokens, seen.max_tokens)
        if answer.admitted and now < self._exhausted_until:
            seen.status = 429
            headers = {**self._rate_headers(wire), **self._exhausted(wire, now)}
            await _json(send, 429, _rate_error(wire),
                        {**headers, "retry-after": f"{max(1, int(self._exhausted_until - now + 0.999))}"})
            return
        if not answer.admitted:
            seen.status = 429
            await _json(send, 429, _rate_error(wire), {**self._rate_headers(wire),
                                                       "retry-after": answer.headers["retry-after"]})
            return
        if self._hang:
            self._hang -= 1
            seen.status, seen.hung = 200, True
            await seen.closed.wait()      # admitted, charged, and silent until the client leaves
            return
        seen.status = 200
        await asyncio.sleep(self._delay_for(seen.model))
        words = [f"word{i} " for i in range(self.words)]
        completion = count_text("".join(words))
        headers = self._rate_headers(wire)
        if self._exhaust:
            self._exhausted_until = time.time() - self._t0 + self._exhaust.pop(0)
        if time.time() - self._t0 < self._exhausted_until:
            headers.update(self._exhausted(wire, time.time() - self._t0))
        if not seen.stream:
            text = "".join(words)
            await asyncio.sleep(self.chunk_interval_s * len(words))
            reply = _openai_reply(body, text, seen.prompt_tokens, completion) if wire is OPENAI \
                else _anthropic_reply(body, text, seen.prompt_tokens, completion)
            await _json(send, 200, reply, headers)
            seen.words_sent, seen.finished = len(words), True
            self.limiter.settle(time.time() - self._t0, seen.prompt_tokens + seen.max_tokens,
                                seen.prompt_tokens + completion)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": _raw({**headers, "content-type": "text/event-stream"})})
        events = _openai_events(body, words, seen.prompt_tokens, completion) if wire is OPENAI \
            else _anthropic_events(body, words, seen.prompt_tokens, completion)
        stall = self._stall_after.pop(0) if self._stall_after else None
        for is_word, data in events:
            if seen.closed.is_set():
                return
            if is_word and stall is not None and seen.words_sent >= stall:
                seen.hung = True
                await self._notify()
                await seen.closed.wait()   # a stream that stops mid-answer and never resumes
                return
            await send({"type": "http.response.body", "body": data, "more_body": True})
            if is_word:
                seen.words_sent += 1
                await self._notify()
                await asyncio.sleep(self.chunk_interval_s)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        seen.finished = True
        self.limiter.settle(time.time() - self._t0, seen.prompt_tokens + seen.max_tokens,
                            seen.prompt_tokens + completion)

    def _exhausted(self, wire, now: float) -> dict:
        """Remaining 0 until the exhaustion's reset, in the wire's names."""
        left = max(0.0, self._exhausted_until - now)
        if wire is OPENAI:
            return {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": f"{left:.3f}s"}
        reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + left + 1))
        return {"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": reset}

    def _rate_headers(self, wire) -> dict:
        h = self.limiter._headers()
        if wire is OPENAI:
            return h
        return {"anthropic-ratelimit-requests-limit": h["x-ratelimit-limit-requests"],
                "anthropic-ratelimit-requests-remaining": h["x-ratelimit-remaining-requests"],
                "anthropic-ratelimit-tokens-limit": h["x-ratelimit-limit-tokens"],
                "anthropic-ratelimit-tokens-remaining": h["x-ratelimit-remaining-tokens"]}


async def _watch_disconnect(receive, seen: Seen) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not seen.finished:
                seen.closed.set()
            return


def _raw(headers: dict) -> list[tuple[bytes, bytes]]:
    return [(k.encode(), str(v).encode()) for k, v in headers.items()]


async def _json(send, status: int, payload: dict, headers: dict) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": _raw({**headers, "content-type": "application/json", "content-length": len(body)})})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _rate_error(wire) -> dict:
    if wire is OPENAI:
        return {"error": {"message": "Rate limit reached for requests", "type": "requests",
                          "param": None, "code": "rate_limit_exceeded"}}
    return {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of requests has exceeded "
                                                                              "your rate limit"}}


def _sse(payload: dict, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(payload).encode() + b"\n\n"


def _openai_reply(body: dict, text: str, prompt: int, completion: int) -> dict:
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def _openai_events(body: dict, words: list[str], prompt: int, completion: int):
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": body["model"]}
    yield False, _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                             "finish_reason": None}]})
    for w in words:
        yield True, _sse({**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]})
    yield False, _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        yield False, _sse({**base, "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                                             "total_tokens": prompt + completion}})
    yield False, b"data: [DONE]\n\n"


def _anthropic_reply(body: dict, text: str, prompt: int, completion: int) -> dict:
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": completion}}


def _anthropic_events(body: dict, words: list[str], prompt: int, completion: int):
    message = {"id": "msg_fake", "type": "message", "role": "assistant", "model": body["model"], "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": prompt, "output_tokens": 1}}
    yield False, _sse({"type": "message_start", "message": message}, "message_start")
    yield False, _sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                      "content_block_start")
    for w in words:
        yield True, _sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}},
                         "content_block_delta")
    yield False, _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    yield False, _sse({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                       "usage": {"output_tokens": completion}}, "message_delta")
    yield False, _sse({"type": "message_stop"}, "message_stop")

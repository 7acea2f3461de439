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
- `gate_next()` holds the next answer (before its first byte) until the test opens the
  event it returns: a call that is certainly still running;
- every request is logged with what identifies it, its status, and `closed`, an event set
  when the client hung up before the answer's end;
- /v1/embeddings: deterministic vectors (`fake_vector`, in either encoding_format) and usage;
- `count_tokens`: serve /v1/messages/count_tokens, and `responses`: serve /v1/responses
  natively (else either answers 404, as most OpenAI-compatible servers do);
- tools, in chat completions and Responses, streaming or not: a request with tools whose
  last message is the user's is answered with one call, id "call_1", to the first tool with
  arguments {}; one whose last message is a tool's result, with "tool said: <result>".
- `context_window`: a request whose prompt (counted with cl100k_base) plus its output bound
  is over it gets the provider's context error (OpenAI's 400 `context_length_exceeded`,
  Anthropic's 400 "prompt is too long"), as a model with that window would answer;
- every request's body is kept (`Seen.body`);
- every answer names the request as the providers do (OpenAI's `x-request-id`, Anthropic's
  `request-id`), with a fresh `req_...` id kept in the log as `upstream_request_id`.
A raw ASGI app so it sees the client's disconnect (`http.disconnect`) the moment it happens.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import struct
import time
import uuid
from dataclasses import dataclass, field

import uvicorn

from agentrm_bench.sim import provider_of
from app.context.tokens import count_text
from app.gateway.embeddings import EMBEDDINGS
from app.gateway.responses_wire import RESPONSES
from app.gateway.wire import ANTHROPIC, OPENAI

REPLY_WORDS = 12
VECTOR_DIMENSIONS = 8


def fake_vector(item: str | list[int]) -> list[float]:
    """The fake's embedding of one input: bytes of its hash over 256, exact in float32."""
    digest = hashlib.sha256(json.dumps(item).encode()).digest()
    return [b / 256 for b in digest[:VECTOR_DIMENSIONS]]


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
    forwarded_request_id: str | None = None    # the x-request-id the gateway sent
    headers: dict = field(default_factory=dict)  # every header it came with, names in lower case
    body: dict = field(default_factory=dict)
    upstream_request_id: str = field(default_factory=lambda: f"req_{uuid.uuid4().hex}")
    status: int = 0
    hung: bool = False
    words_sent: int = 0
    finished: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)


class FakeUpstream:
    def __init__(self, rpm: int = 10_000, tpm: int = 10_000_000, *, first_chunk_s: float = 0.02,
                 chunk_interval_s: float = 0.01, words: int = REPLY_WORDS, count_tokens: bool = False,
                 responses: bool = False, limiter: str = "token-bucket", window_s: float = 60.0,
                 context_window: int | None = None, **shape):
        self.context_window = context_window
        self.limiter = provider_of(limiter, rpm, tpm, window_s=window_s, **shape)
        self.count_tokens, self.responses = count_tokens, responses
        self._exhaust: list[float] = []
        self._exhausted_until = 0.0
        self.first_chunk_s, self.chunk_interval_s, self.words = first_chunk_s, chunk_interval_s, words
        self.seen: list[Seen] = []
        self.missing: list[str] = []     # the paths answered 404
        self._reject: list[float] = []
        self._hang = 0
        self._stall_after: list[int] = []
        self._delays: list[tuple[float, str | None]] = []
        self._gates: list[asyncio.Event] = []
        self._t0 = time.time()
        self.arrived = asyncio.Condition()
        self._failures: list[tuple[int, dict]] = []
        self.model_list_headers: list[dict] = []   # the headers of each GET /v1/models

    # -- knobs ---------------------------------------------------------------------------
    def reject_next(self, n: int = 1, retry_after: float = 1.0) -> None:
        self._reject.extend([retry_after] * n)

    def fail_next(self, status: int, body: dict) -> None:
        """The next request is answered `status` with `body`, as a provider's own error."""
        self._failures.append((status, body))

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

    def gate_next(self) -> asyncio.Event:
        gate = asyncio.Event()
        self._gates.append(gate)
        return gate

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
            self.model_list_headers.append(headers)
            await _json(send, 200, {"object": "list", "data": [
                {"id": "fake-gpt", "object": "model", "created": 0, "owned_by": "fake"},
                {"id": "fake-claude", "object": "model", "created": 0, "owned_by": "fake"}]}, {})
            return
        if scope["method"] == "POST" and path == "/v1/messages/count_tokens" and self.count_tokens:
            body = json.loads(await _read(receive))
            counted = ANTHROPIC.count_prompt(body, "cl100k_base")
            self.seen.append(Seen(path, str(uuid.uuid4()), headers.get("x-api-key"), body.get("model", ""), False,
                                  time.time(), counted, 0, status=200, finished=True))
            await _json(send, 200, {"input_tokens": counted}, {})
            return
        wire = {"/v1/chat/completions": OPENAI, "/v1/messages": ANTHROPIC, "/v1/embeddings": EMBEDDINGS,
                "/v1/responses": RESPONSES if self.responses else None}.get(path)
        if scope["method"] != "POST" or wire is None:
            self.missing.append(path)
            await _json(send, 404, {"error": {"message": "not found"}}, {})
            return
        body = json.loads(await _read(receive))
        prompt = wire.count_prompt(body, "cl100k_base")
        max_tokens = wire.max_output_tokens(body)
        key = headers.get("x-api-key") if wire is ANTHROPIC else headers.get("authorization", "")[7:] or None
        seen = Seen(path, headers.get("x-client-request-id") or str(uuid.uuid4()), key, body.get("model", ""),
                    body.get("stream") is True, time.time(), prompt, max_tokens,
                    forwarded_request_id=headers.get("x-request-id"), headers=dict(headers), body=body)
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
        if self._failures:
            seen.status, failure = self._failures[0][0], self._failures.pop(0)[1]
            await _json(send, seen.status, failure, self._rate_headers(wire, seen))
            return
        if self.context_window is not None and wire in (OPENAI, ANTHROPIC, RESPONSES) \
                and seen.prompt_tokens + seen.max_tokens > self.context_window:
            seen.status = 400
            await _json(send, 400, _context_error(wire, seen, self.context_window), {})
            return
        if self._reject:
            retry = self._reject.pop(0)
            seen.status = 429
            await _json(send, 429, _rate_error(wire), {**self._rate_headers(wire, seen), "retry-after": f"{retry:g}"})
            return
        answer = self.limiter.submit(now, seen.prompt_tokens, seen.max_tokens)
        if answer.admitted and now < self._exhausted_until:
            seen.status = 429
            headers = {**self._rate_headers(wire, seen), **self._exhausted(wire, now)}
            await _json(send, 429, _rate_error(wire),
                        {**headers, "retry-after": f"{max(1, int(self._exhausted_until - now + 0.999))}"})
            return
        if not answer.admitted:
            seen.status = 429
            await _json(send, 429, _rate_error(wire), {**self._rate_headers(wire, seen),
                                                       "retry-after": answer.headers["retry-after"]})
            return
        if self._hang:
            self._hang -= 1
            seen.status, seen.hung = 200, True
            await seen.closed.wait()      # admitted, charged, and silent until the client leaves
            return
        seen.status = 200
        if self._gates:
            await self._gates.pop(0).wait()
        await asyncio.sleep(self._delay_for(seen.model))
        if wire is EMBEDDINGS:
            await _json(send, 200, _embeddings_reply(body, seen.prompt_tokens), self._rate_headers(wire, seen))
            seen.finished = True
            self.limiter.settle(time.time() - self._t0, seen.prompt_tokens, seen.prompt_tokens)
            return
        if wire is ANTHROPIC and isinstance(anthropic_call := tool_exchange(wire, body), ToolCall):
            await _send_tool_call(send, wire, body, anthropic_call, seen, self._rate_headers(wire, seen))
            self.limiter.settle(time.time() - self._t0, seen.prompt_tokens + seen.max_tokens, seen.prompt_tokens + 1)
            return
        words = [f"word{i} " for i in range(self.words)]
        tool, result = _tool_turn(wire, body)
        if result is not None:
            parts = f"tool said: {result}".split(" ")
            words = [w + " " for w in parts[:-1]] + [parts[-1]]
        if tool is not None:
            words = []
        completion = count_text(f"{tool}{{}}" if tool is not None else "".join(words))
        headers = self._rate_headers(wire, seen)
        if self._exhaust:
            self._exhausted_until = time.time() - self._t0 + self._exhaust.pop(0)
        if time.time() - self._t0 < self._exhausted_until:
            headers.update(self._exhausted(wire, time.time() - self._t0))
        if not seen.stream:
            text = "".join(words)
            await asyncio.sleep(self.chunk_interval_s * len(words))
            if wire is OPENAI:
                reply = _openai_reply(body, text, seen.prompt_tokens, completion, tool)
            elif wire is RESPONSES:
                reply = _responses_reply(body, text, seen.prompt_tokens, completion, tool)
            else:
                reply = _anthropic_reply(body, text, seen.prompt_tokens, completion)
            await _json(send, 200, reply, headers)
            seen.words_sent, seen.finished = len(words), True
            self.limiter.settle(time.time() - self._t0, seen.prompt_tokens + seen.max_tokens,
                                seen.prompt_tokens + completion)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": _raw({**headers, "content-type": "text/event-stream"})})
        if wire is OPENAI:
            events = _openai_events(body, words, seen.prompt_tokens, completion, tool)
        elif wire is RESPONSES:
            events = _responses_events(body, words, seen.prompt_tokens, completion, tool)
        else:
            events = _anthropic_events(body, words, seen.prompt_tokens, completion)
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

    def _rate_headers(self, wire, seen: Seen) -> dict:
        h = self.limiter._headers()
        if wire is not ANTHROPIC:
            return {**h, "x-request-id": seen.upstream_request_id}
        return {"request-id": seen.upstream_request_id,
                "anthropic-ratelimit-requests-limit": h["x-ratelimit-limit-requests"],
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


async def _read(receive) -> bytes:
    raw = b""
    while True:
        message = await receive()
        raw += message.get("body", b"")
        if not message.get("more_body"):
            return raw


def _raw(headers: dict) -> list[tuple[bytes, bytes]]:
    return [(k.encode(), str(v).encode()) for k, v in headers.items()]


async def _json(send, status: int, payload: dict, headers: dict) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": _raw({**headers, "content-type": "application/json", "content-length": len(body)})})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _rate_error(wire) -> dict:
    if wire is not ANTHROPIC:
        return {"error": {"message": "Rate limit reached for requests", "type": "requests",
                          "param": None, "code": "rate_limit_exceeded"}}
    return {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of requests has exceeded "
                                                                              "your rate limit"}}


def _context_error(wire, seen: Seen, window: int) -> dict:
    """The provider's own answer to a prompt over the model's window."""
    if wire is ANTHROPIC:
        return {"type": "error", "error": {"type": "invalid_request_error", "message":
                f"prompt is too long: {seen.prompt_tokens} tokens > {window - seen.max_tokens} maximum"}}
    return {"error": {"message": f"This model's maximum context length is {window} tokens. However, you "
                      f"requested {seen.prompt_tokens + seen.max_tokens} tokens ({seen.prompt_tokens} in the "
                      f"messages, {seen.max_tokens} in the completion). Please reduce the length of the "
                      "messages or completion.", "type": "invalid_request_error", "param": "messages",
                      "code": "context_length_exceeded"}}


def _sse(payload: dict, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(payload).encode() + b"\n\n"


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _tool_turn(wire, body: dict) -> tuple[str | None, str | None]:
    """(the tool to call, or the tool result to answer): see the module's tools rule."""
    if wire is OPENAI and body.get("messages"):
        last = body["messages"][-1]
        if last.get("role") == "tool":
            return None, _text(last.get("content"))
        if last.get("role") == "user" and body.get("tools"):
            return body["tools"][0]["function"]["name"], None
    if wire is ANTHROPIC and body.get("messages"):
        return None, _tool_result(wire, body["messages"][-1])
    if wire is RESPONSES:
        items = body.get("input")
        last = {"role": "user"} if isinstance(items, str) else (items[-1] if items else {})
        if last.get("type") == "function_call_output":
            return None, _text(last.get("output"))
        if last.get("role") == "user" and body.get("tools"):
            return body["tools"][0]["name"], None
    return None, None


def _openai_reply(body: dict, text: str, prompt: int, completion: int, tool: str | None = None) -> dict:
    message: dict = {"role": "assistant", "content": text}
    if tool is not None:
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": tool, "arguments": "{}"}}]}
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "stop" if tool is None else "tool_calls"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def _openai_events(body: dict, words: list[str], prompt: int, completion: int, tool: str | None = None):
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": body["model"]}
    yield False, _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                             "finish_reason": None}]})
    for w in words:
        yield True, _sse({**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]})
    if tool is not None:
        call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": tool, "arguments": ""}}
        yield False, _sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]})
        more = {"index": 0, "function": {"arguments": "{}"}}
        yield False, _sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [more]}, "finish_reason": None}]})
    finish = "stop" if tool is None else "tool_calls"
    yield False, _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        yield False, _sse({**base, "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                                             "total_tokens": prompt + completion}})
    yield False, b"data: [DONE]\n\n"


def _embeddings_reply(body: dict, prompt: int) -> dict:
    inputs = body["input"]
    if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
        inputs = [inputs]
    data = []
    for i, item in enumerate(inputs):
        vector: list[float] | str = fake_vector(item)
        if body.get("encoding_format") == "base64":
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": vector})
    return {"object": "list", "data": data, "model": body["model"],
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt}}


def _responses_output(text: str, tool: str | None) -> dict:
    if tool is not None:
        return {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": tool, "arguments": "{}",
                "status": "completed"}
    return {"type": "message", "id": "msg_fake", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _responses_reply(body: dict, text: str, prompt: int, completion: int, tool: str | None,
                     status: str = "completed") -> dict:
    return {"id": "resp_fake", "object": "response", "created_at": int(time.time()), "status": status,
            "model": body["model"], "output": [_responses_output(text, tool)] if status == "completed" else [],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools") or [],
            "usage": None if status != "completed" else {
                "input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + completion}}


def _responses_events(body: dict, words: list[str], prompt: int, completion: int, tool: str | None):
    n = iter(range(1_000_000))

    def event(kind: str, **fields) -> bytes:
        return _sse({"type": kind, "sequence_number": next(n), **fields}, kind)
    yield False, event("response.created", response=_responses_reply(body, "", prompt, 0, tool, "in_progress"))
    done = _responses_output("".join(words), tool)
    if tool is not None:
        yield False, event("response.output_item.added", output_index=0, item={**done, "arguments": "",
                                                                               "status": "in_progress"})
        yield False, event("response.function_call_arguments.delta", item_id="fc_1", output_index=0, delta="{}")
        yield False, event("response.function_call_arguments.done", item_id="fc_1", output_index=0,
                           arguments="{}", name=tool)
    else:
        yield False, event("response.output_item.added", output_index=0, item={**done, "content": [],
                                                                               "status": "in_progress"})
        part = {"type": "output_text", "text": "", "annotations": []}
        yield False, event("response.content_part.added", item_id="msg_fake", output_index=0, content_index=0,
                           part=part)
        for w in words:
            yield True, event("response.output_text.delta", item_id="msg_fake", output_index=0, content_index=0,
                              delta=w, logprobs=[])
        yield False, event("response.output_text.done", item_id="msg_fake", output_index=0, content_index=0,
                           text="".join(words), logprobs=[])
        yield False, event("response.content_part.done", item_id="msg_fake", output_index=0, content_index=0,
                           part=done["content"][0])
    yield False, event("response.output_item.done", output_index=0, item=done)
    yield False, event("response.completed", response=_responses_reply(body, "".join(words), prompt, completion,
                                                                       tool))


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


# -- tool calls ---------------------------------------------------------------------------
# One round trip, enough for a framework's tool loop: the model calls the first tool, then
# reports what it said. Self-contained, so the normal answer path is untouched.

@dataclass
class ToolCall:
    name: str
    id: str = "call_1"


def tool_exchange(wire, body: dict) -> ToolCall | str | None:
    """A ToolCall to make, the text that answers a tool result, or None: no tool turn (the
    Anthropic side of the tools rule; OpenAI's and the Responses API's are `_tool_turn`)."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    result = _tool_result(wire, last)
    if result is not None:
        return f"tool said: {result}"
    tools = body.get("tools") or []
    if not tools or last.get("role") != "user":
        return None
    first = tools[0]
    return ToolCall(first["function"]["name"] if wire is OPENAI else first["name"])


def _tool_result(wire, message: dict) -> str | None:
    if wire is OPENAI:
        return _text_of(message.get("content")) if message.get("role") == "tool" else None
    if message.get("role") != "user" or not isinstance(message.get("content"), list):
        return None
    results = [b for b in message["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    return _text_of(results[-1].get("content")) if results else None


def _text_of(content) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


async def _send_tool_call(send, wire, body: dict, call: ToolCall, seen: Seen, headers: dict) -> None:
    prompt = seen.prompt_tokens
    if not seen.stream:
        if wire is OPENAI:
            function = {"name": call.name, "arguments": "{}"}
            message = {"role": "assistant", "content": None,
                       "tool_calls": [{"id": call.id, "type": "function", "function": function}]}
            reply = {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                     "model": body["model"],
                     "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
                     "usage": {"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": prompt + 1}}
        else:
            reply = {"id": "msg_fake", "type": "message", "role": "assistant", "model": body["model"],
                     "content": [{"type": "tool_use", "id": call.id, "name": call.name, "input": {}}],
                     "stop_reason": "tool_use", "stop_sequence": None,
                     "usage": {"input_tokens": prompt, "output_tokens": 1}}
        await _json(send, 200, reply, headers)
    else:
        await send({"type": "http.response.start", "status": 200,
                    "headers": _raw({**headers, "content-type": "text/event-stream"})})
        for data in (_openai_tool_events if wire is OPENAI else _anthropic_tool_events)(body, call, prompt):
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    seen.words_sent, seen.finished = 1, True


def _openai_tool_events(body: dict, call: ToolCall, prompt: int):
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": body["model"]}
    start = {"index": 0, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
    yield _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None,
                                                            "tool_calls": [start]}, "finish_reason": None}]})
    yield _sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {
        "arguments": "{}"}}]}, "finish_reason": None}]})
    yield _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        yield _sse({**base, "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 1,
                                                     "total_tokens": prompt + 1}})
    yield b"data: [DONE]\n\n"


def _anthropic_tool_events(body: dict, call: ToolCall, prompt: int):
    message = {"id": "msg_fake", "type": "message", "role": "assistant", "model": body["model"], "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": prompt, "output_tokens": 1}}
    yield _sse({"type": "message_start", "message": message}, "message_start")
    yield _sse({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}},
               "content_block_start")
    yield _sse({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
               "content_block_delta")
    yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    yield _sse({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 1}}, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")

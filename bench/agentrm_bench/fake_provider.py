"""A fake LLM provider on loopback for the live check: an OpenAI-shaped streaming endpoint
with a true RPM/TPM limit.

Why its own tiny HTTP/1.1 server over asyncio streams rather than Starlette: the live check
needs three behaviours a framework hides - response headers flushed the instant a call is
admitted (so a client can tie heartbeats to stream progress), a hung call that sends
nothing at all until the client hangs up, and a stop that drops hung connections at once.

The limiter is the simulation's own `sim.Provider` (same buckets, same 429 + retry-after,
same x-ratelimit-* headers), driven by the wall clock: the live run and the simulation face
the same provider model, only the clock differs. What a call does (output length, latency,
whether it hangs) comes from the workload trace, sent by the client in the request body's
`fake` object: the provider is part of the test world, the workload decides the world.

Protocol (POST /v1/chat/completions, JSON body):
    {"model": str, "max_tokens": int, "prompt_tokens": int,
     "fake": {"output_tokens": int, "latency_s": float, "first_chunk_s": float, "hang": bool}}
Header `x-client-request-id` (OpenAI's own name for it) tags the access log entry.
- admitted: after `first_chunk_s` (the time to first token), 200 with x-ratelimit-* headers
  and the first chunk, then Server-Sent Events: a chunk every
  `chunk_interval_s` until `latency_s` has passed, then a final chunk with `usage`, then
  `data: [DONE]`. The token charge is corrected to real usage when the stream ends.
- over the limit: after `Provider.REJECT_LATENCY_S`, 429 with `retry-after` and the headers.
- hang: admitted (charged in full, never settled) and then silent until the client closes.

The scenarios' provider behaviours (sim.py's, on the wall clock; all optional):
- `"fault": "stall"` with `"stall_after_s"`: the stream starts, then goes silent for ever
  `stall_after_s` after its first chunk; `"fault": "slow"` with `"slow_extra_s"`: the first
  chunk comes that much later. A fault applies only if the call is admitted.
- `outages` (seconds after `outage_origin`): every call admitted inside a window hangs.
- `max_concurrent`: beyond that many admitted calls in flight, 429 with retry-after 1.
- `saturation` (a sim.Saturation in wall-clock units): processor sharing over at most
  `max_running` calls, the rest queued, as sim._SaturatedEngine does; the trace's latency is
  then ignored and the engine decides when each chunk and the last byte come.

For gateways that forward only OpenAI's own fields (`agentrm bench peers` puts LiteLLM and
Portkey in front of it), three more options, all off by default:
- `limiter`: "token_bucket" (the default, sim.Provider), "sliding_window" or "fixed_window"
  (sim's SlidingWindowProvider and FixedWindowProvider, 60 s windows): the provider's limit.
- `defaults`: the `fake` object of a request that carries none; a request without
  `prompt_tokens` is charged its messages' characters / 4, one without `max_tokens` 16.
- `honour_stream`: a request without `"stream": true` gets one JSON answer (Content-Length
  framed, with `usage`) after its latency, as OpenAI answers a call that did not ask to stream.
- `fake_in_messages`: a request without a `fake` object takes it from its last message, from
  the JSON object after `FAKE:` in its text (gateways forward messages verbatim, so each call
  of one model can carry its own fault). The object's `tag`, if any, is kept in the access log.
- `outage_status`: inside an outage window every call is refused at once with this status
  (503: the provider is down) instead of hanging; nothing is charged.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import cast

from .sim import FixedWindowProvider, Provider, Saturation, SlidingWindowProvider

MAX_HEADER_BYTES = 16_384


@dataclass
class AccessEntry:
    """One request as the provider saw it (wall-clock seconds, time.time())."""
    request_id: str
    status: int
    received_at: float
    finished_at: float | None = None   # last byte sent; None for a hung or aborted call
    hung: bool = False
    hung_from: float | None = None     # when it became a call that will never answer
    first_chunk_at: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tag: str = ""                      # the call's `fake.tag`: which scenario sent it


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeProvider:
    """`await FakeProvider(rpm, tpm).start()`; `.url` is the base URL; `await .stop()`."""
    rpm: int
    tpm: int
    chunk_interval_s: float = 0.05
    host: str = "127.0.0.1"
    access_log: list[AccessEntry] = field(default_factory=list)
    outages: tuple[tuple[float, float], ...] = ()
    outage_origin: float = 0.0          # wall time the outage windows count from
    max_concurrent: int | None = None
    saturation: Saturation | None = None
    limiter_kind: str = "token_bucket"
    defaults: dict | None = None
    honour_stream: bool = False
    fake_in_messages: bool = False
    outage_status: int | None = None

    def __post_init__(self) -> None:
        self.limiter = LIMITERS[self.limiter_kind](self.rpm, self.tpm, max_concurrent=self.max_concurrent)
        self.engine = _WallSaturatedEngine(self.saturation) if self.saturation is not None else None
        self._started_at = time.time()
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self.url = ""

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self, port: int = 0) -> FakeProvider:
        self._started_at = time.time()
        self._server = await asyncio.start_server(self._serve, self.host, port)
        bound = self._server.sockets[0].getsockname()[1]
        self.url = f"http://{self.host}:{bound}"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        # Hung calls would otherwise keep their handlers (and wait_closed) alive forever.
        # Abort the sockets rather than cancel the handlers: asyncio's stream callback
        # logs a spurious error for a handler task that ends cancelled.
        for writer in list(self._connections.values()):
            writer.transport.abort()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=2.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    def reset(self) -> None:
        """A fresh limiter (full) and an empty access log: the next workload meets the provider
        as the first one did."""
        self.limiter = LIMITERS[self.limiter_kind](self.rpm, self.tpm, max_concurrent=self.max_concurrent)
        self.access_log.clear()
        self._started_at = time.time()

    def _now(self) -> float:
        """The limiter's clock: seconds since start, so its buckets start full at start."""
        return time.time() - self._started_at

    # -- connection loop (HTTP/1.1 keep-alive) --------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = cast(asyncio.Task, asyncio.current_task())   # a connection's handler runs in its task
        self._connections[task] = writer
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                if not await self._dispatch(request, reader, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _dispatch(self, request: _Request, reader, writer) -> bool:
        """Answer one request; False when the connection must close."""
        if request.method != "POST" or request.path != "/v1/chat/completions":
            await _send_json(writer, 404, {"error": {"message": "not found"}}, {})
            return True
        try:
            body = json.loads(request.body or b"{}")
            prompt, max_tokens = _charge(body)
            fake = body.get("fake") or self._fake_in_messages(body) or self.defaults or {}
        except (ValueError, KeyError, TypeError):
            await _send_json(writer, 400, {"error": {"message": "bad request"}}, {})
            return True
        entry = AccessEntry(request.headers.get("x-client-request-id", ""), 0, time.time(),
                            prompt_tokens=prompt, tag=str(fake.get("tag", "")))
        self.access_log.append(entry)
        if self.outage_status is not None and self._in_outage(entry.received_at):
            entry.status = self.outage_status
            await _send_json(writer, self.outage_status, {"error": {
                "message": "The server is temporarily unavailable.", "type": "server_error"}}, {})
            entry.finished_at = time.time()
            return True
        answer = self.limiter.submit(self._now(), prompt, max_tokens)
        if not answer.admitted:
            return await self._reject(writer, entry, answer.headers)
        try:   # admitted: in flight until answered or closed by the client (max_concurrent)
            if fake.get("hang") or fake.get("fault") == "hang" or self._in_outage(entry.received_at):
                return await self._hang(reader, entry)
            fault = fake.get("fault")
            first_chunk = float(fake.get("first_chunk_s", 0.0))
            latency = float(fake.get("latency_s", 0.0))
            if fault == "slow":
                extra = float(fake.get("slow_extra_s", 0.0))
                first_chunk, latency = first_chunk + extra, latency + extra
            stall_after = float(fake.get("stall_after_s", 0.0)) if fault == "stall" else None
            if self.honour_stream and not body.get("stream") and stall_after is None:
                await self._answer_whole(writer, entry, answer.headers, prompt, max_tokens,
                                         int(fake.get("output_tokens", 1)), max(latency, first_chunk))
                return True
            if self.engine is not None and stall_after is None:
                await self._stream_saturated(writer, entry, answer.headers, prompt, max_tokens,
                                             int(fake.get("output_tokens", 1)))
                return True
            done = await self._stream(writer, entry, answer.headers, prompt, max_tokens,
                                      int(fake.get("output_tokens", 1)), latency, first_chunk, stall_after)
            if not done:   # stalled: silent until the client hangs up
                await self._drain_until_closed(reader)
                return False
            return True
        finally:
            self.limiter.inflight -= 1

    def _fake_in_messages(self, body: dict) -> dict | None:
        if not self.fake_in_messages or not body.get("messages"):
            return None
        text = str(body["messages"][-1].get("content", ""))
        marker = text.find("FAKE:")
        return json.loads(text[marker + 5:]) if marker >= 0 else None

    def _in_outage(self, at: float) -> bool:
        return any(start <= at - self.outage_origin < end for start, end in self.outages)

    # -- the three answers ------------------------------------------------------------------
    async def _reject(self, writer, entry: AccessEntry, headers: dict) -> bool:
        await asyncio.sleep(Provider.REJECT_LATENCY_S)
        entry.status = 429
        await _send_json(writer, 429, {"error": {
            "message": "Rate limit reached. Please try again later.",
            "type": "requests", "code": "rate_limit_exceeded"}}, headers)
        entry.finished_at = time.time()
        return True

    async def _hang(self, reader: asyncio.StreamReader, entry: AccessEntry) -> bool:
        # Admitted and charged, then nothing: the promise that never settles. Wait for the
        # client to give up (EOF) so the connection is not reused for another call.
        entry.status, entry.hung, entry.hung_from = 200, True, entry.received_at
        await self._drain_until_closed(reader)
        return False

    @staticmethod
    async def _drain_until_closed(reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(65_536):
                pass

    async def _stream(self, writer, entry: AccessEntry, headers: dict, prompt: int, max_tokens: int,
                      output: int, latency: float, first_chunk: float = 0.0,
                      stall_after: float | None = None) -> bool:
        """Stream one answer; False when it stalled (the stream stopped for ever)."""
        entry.status = 200
        started = time.time()
        # Time to first token (prefill): nothing at all arrives before it, headers included,
        # as with hosted APIs that answer once the first token is ready.
        if first_chunk > 0:
            await asyncio.sleep(min(first_chunk, latency))
        await self._first_chunk(writer, entry, headers)
        if stall_after is not None:
            # A stall: chunks flow for stall_after, then nothing, ever (the answer never comes).
            stalls_at = time.time() + stall_after
            while (until := stalls_at - time.time()) > 0:
                await asyncio.sleep(min(self.chunk_interval_s, until))
                if time.time() < stalls_at:
                    await _chunk(writer, _sse({"choices": [{"delta": {"content": "…"}, "index": 0}]}))
            entry.hung, entry.hung_from = True, stalls_at
            return False
        # Chunks at a steady cadence until the call's latency has passed: the client sees
        # progress as it would while tokens stream in.
        while (left := started + latency - time.time()) > 0:
            await asyncio.sleep(min(self.chunk_interval_s, left))
            if time.time() < started + latency:
                await _chunk(writer, _sse({"choices": [{"delta": {"content": "…"}, "index": 0}]}))
        await self._last_chunk(writer, entry, prompt, max_tokens, output)
        return True

    async def _answer_whole(self, writer, entry: AccessEntry, headers: dict, prompt: int, max_tokens: int,
                            output: int, latency: float) -> None:
        """A call that did not ask to stream: one JSON body after the whole latency."""
        entry.status = 200
        if latency > 0:
            await asyncio.sleep(latency)
        if writer.is_closing():   # the client gave up while it waited: nothing to answer
            return
        entry.first_chunk_at = time.time()
        usage = {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}
        await _send_json(writer, 200, {
            "id": f"chatcmpl-{entry.request_id or 'fake'}", "object": "chat.completion",
            "created": int(time.time()), "model": "fake",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "…" * output}}],
            "usage": usage}, {**headers, "x-request-id": entry.request_id or "fake"})
        self.limiter.settle(self._now(), prompt + max_tokens, prompt + output)
        entry.finished_at, entry.completion_tokens = time.time(), output

    async def _first_chunk(self, writer, entry: AccessEntry, headers: dict) -> None:
        head = {**headers, "content-type": "text/event-stream", "transfer-encoding": "chunked",
                "x-request-id": entry.request_id or "fake"}
        writer.write(_status_line(200) + _header_block(head))
        await _chunk(writer, _sse({"choices": [{"delta": {"role": "assistant"}, "index": 0}]}))
        entry.first_chunk_at = time.time()

    async def _stream_saturated(self, writer, entry: AccessEntry, headers: dict, prompt: int,
                                max_tokens: int, output: int) -> None:
        entry.status = 200
        job = _Job(float(output))
        engine = cast(_WallSaturatedEngine, self.engine)   # the saturated path: there is one
        try:
            await engine.admit(job, prompt)
            await self._first_chunk(writer, entry, headers)
            engine.start_decoding(job)
            while True:
                left = engine.seconds_left(job)
                if left <= 1e-6:
                    break
                await asyncio.sleep(min(self.chunk_interval_s, left))
                if engine.seconds_left(job) > 1e-6:
                    await _chunk(writer, _sse({"choices": [{"delta": {"content": "…"}, "index": 0}]}))
        finally:
            engine.leave(job)   # answered, or the client hung up: the server stops on it
        await self._last_chunk(writer, entry, prompt, max_tokens, output)

    async def _last_chunk(self, writer, entry: AccessEntry, prompt: int, max_tokens: int, output: int) -> None:
        usage = {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}
        await _chunk(writer, _sse({"choices": [{"delta": {}, "finish_reason": "stop", "index": 0}],
                                   "usage": usage}))
        await _chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        self.limiter.settle(self._now(), prompt + max_tokens, prompt + output)
        entry.finished_at, entry.completion_tokens = time.time(), output

    # -- reporting --------------------------------------------------------------------------
    def stats(self) -> dict:
        log = self.access_log
        return {"requests": len(log), "admitted": sum(e.status == 200 for e in log),
                "rate_limited": sum(e.status == 429 for e in log), "hung": sum(e.hung for e in log),
                "answered": sum(e.status == 200 and e.finished_at is not None for e in log),
                "stalled": sum(e.hung and e.first_chunk_at is not None for e in log),
                "rpm": self.rpm, "tpm": self.tpm}


LIMITERS: dict[str, type[Provider]] = {"token_bucket": Provider, "sliding_window": SlidingWindowProvider,
                                       "fixed_window": FixedWindowProvider}


def _charge(body: dict) -> tuple[int, int]:
    """(prompt tokens, output bound) a request is charged: the trace's own figures when it
    sends them, else its messages' length (4 characters a token) and its max_tokens."""
    if "prompt_tokens" in body:
        prompt = int(body["prompt_tokens"])
    else:
        text = sum(len(str(m.get("content", ""))) for m in body.get("messages") or [])
        prompt = max(1, text // 4)
    bound = body.get("max_tokens", body.get("max_completion_tokens"))
    if bound is None and "prompt_tokens" in body:
        raise KeyError("max_tokens")   # the live check's protocol: both figures, always
    return prompt, int(bound) if bound is not None else 16


# -- a saturating provider on the wall clock ------------------------------------------------------

@dataclass(eq=False)
class _Job:
    remaining: float              # output tokens still to decode
    decoding: bool = False
    ttft: float = 0.0
    admitted: asyncio.Event = field(default_factory=asyncio.Event)


class _WallSaturatedEngine:
    """sim._SaturatedEngine on the wall clock: at most `max_running` calls run (prefilling or
    decoding), the rest wait in FIFO order; a call's first chunk comes ttft(running) +
    prefill after it starts running; decoding calls share X(n) tokens/s equally, n counting
    every running call, as in the simulation. Remaining tokens are advanced whenever the
    running set changes or a stream asks, so the rate is exact piecewise."""

    def __init__(self, model: Saturation):
        self.model = model
        self.running: list[_Job] = []
        self.waiting: list[_Job] = []
        self.updated_at = time.time()

    def _advance(self) -> None:
        now = time.time()
        rate = self.model.per_request_rate(len(self.running))
        for job in self.running:
            if job.decoding:
                job.remaining -= (now - self.updated_at) * rate
        self.updated_at = now

    async def admit(self, job: _Job, prompt: int) -> None:
        self._advance()
        if len(self.running) < self.model.max_running:
            self._run(job)
        else:
            self.waiting.append(job)
        await job.admitted.wait()
        # ttft with the running count at the moment it starts running (as the simulation).
        await asyncio.sleep(job.ttft + prompt / self.model.prefill_tokens_per_s)

    def _run(self, job: _Job) -> None:
        self.running.append(job)
        job.ttft = self.model.ttft(len(self.running))
        job.admitted.set()

    def start_decoding(self, job: _Job) -> None:
        self._advance()
        job.decoding = True

    def seconds_left(self, job: _Job) -> float:
        self._advance()
        return max(0.0, job.remaining) / self.model.per_request_rate(len(self.running))

    def leave(self, job: _Job) -> None:
        self._advance()
        if job in self.running:
            self.running.remove(job)
        elif job in self.waiting:
            self.waiting.remove(job)
        while self.waiting and len(self.running) < self.model.max_running:
            self._run(self.waiting.pop(0))


# -- HTTP/1.1 plumbing ------------------------------------------------------------------------

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests",
            503: "Service Unavailable"}


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed a kept-alive connection
    if len(head) > MAX_HEADER_BYTES:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return _Request(method, path, headers, body)


def _status_line(status: int) -> bytes:
    return f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n".encode()


def _header_block(headers: dict) -> bytes:
    return "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1") + b"\r\n"


async def _send_json(writer, status: int, payload: dict, headers: dict) -> None:
    body = json.dumps(payload).encode()
    head = {**headers, "content-type": "application/json", "content-length": str(len(body))}
    writer.write(_status_line(status) + _header_block(head) + body)
    await writer.drain()


def _sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


async def _chunk(writer, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()

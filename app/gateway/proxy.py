"""The gateway's request path, written once for both wire formats.

For every call: authenticate the agent by its AgentRM token (the API key), count the
prompt with the pool's tiktoken encoding, take a turn (waiting in the MLFQ queue, bounded
by x-agentrm-max-wait), forward to the pool's upstream, heartbeat from the response's own
bytes, and complete the turn with the upstream's usage and rate-limit headers.

Nothing is retried here: an upstream 429 is reported to the scheduler (which pauses the
pool) and handed to the client as the upstream gave it, status, body and retry-after.
The client's next attempt waits its turn in the queue like everyone else's.

A raw ASGI endpoint rather than a Starlette handler, because this code must own
`receive`: it watches for the client's disconnect while the call is queued and while it
streams, and must run the turn's completion whichever way the exchange ends.
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import Callable
from typing import cast

import httpx

from app.api.holder import RuntimeHolder
from app.auth import authenticate
from app.context.tokens import encoding_ready
from app.db.outage import is_outage
from app.domain import events as ev
from app.errors import BadInput, Forbidden, LimitExceeded, NotFound, ServiceError, Unauthenticated, Unavailable
from app.observability import logs, metrics

from .output_estimate import OutputEstimator
from .turns import GatewayTurn, QueueTimeout, TurnEnded, rate_limit_headers, retry_after_seconds
from .upstreams import Upstreams
from .wire import BadRequest, SSEParser, StreamUsage, WireFormat

log = logging.getLogger("agentrm.gateway")

RUN_ID_HEADER = "x-agentrm-run-id"
MAX_WAIT_HEADER = "x-agentrm-max-wait"
RECORD_CONTEXT_HEADER = "x-agentrm-record-context"
MAX_BODY_BYTES = 8 * 1024 * 1024
PASSED_HEADERS = ("content-type", "x-request-id", "request-id", "openai-processing-ms")
_STATUS = {BadInput: 400, Unauthenticated: 401, Forbidden: 403, NotFound: 404, LimitExceeded: 429,
           Unavailable: 503}


class ClientGone(Exception):
    pass


class _Exchange:
    """One client request: its ASGI channels, a disconnect watch, and the replies."""

    def __init__(self, scope, receive, send, wire: WireFormat):
        self.scope, self.receive, self.send, self.wire = scope, receive, send, wire
        self.headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        self.gone = asyncio.Event()
        self.started = time.monotonic()
        self.status = 0
        self._watch: asyncio.Task | None = None

    async def body(self) -> bytes:
        chunks, size = [], 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise BadRequest(f"the request body is over {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        self._watch = asyncio.create_task(self._watch_disconnect())
        return b"".join(chunks)

    async def _watch_disconnect(self) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self.gone.set()
                return

    async def race(self, awaitable, ended: asyncio.Future | None = None, timeout: float | None = None):
        """`awaitable`'s result, unless the client leaves (ClientGone), the turn ends
        first (returns `_ENDED`) or `timeout` seconds pass (returns `_TIMED_OUT`). The loser
        is cancelled."""
        task = asyncio.ensure_future(awaitable)
        gone = asyncio.ensure_future(self.gone.wait())
        waits = {task, gone} | ({ended} if ended is not None else set())
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED, timeout=timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            gone.cancel()
        if task in done:
            return task.result()
        task.cancel()
        if gone in done or self.gone.is_set():
            raise ClientGone()
        return _ENDED if done else _TIMED_OUT

    async def reply(self, status: int, payload: dict | bytes, headers: dict | None = None) -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        head = {"content-type": "application/json", **(headers or {}), "content-length": str(len(body))}
        await self.start(status, head)
        await self.send({"type": "http.response.body", "body": body, "more_body": False})

    async def error(self, status: int, message: str, headers: dict | None = None) -> None:
        await self.reply(status, self.wire.error_body(status, message), headers)

    async def start(self, status: int, headers: dict) -> None:
        self.status = status
        await self.send({"type": "http.response.start", "status": status,
                         "headers": [(k.encode("latin-1"), str(v).encode("latin-1")) for k, v in headers.items()]})

    async def chunk(self, data: bytes) -> None:
        try:
            await self.send({"type": "http.response.body", "body": data, "more_body": True})
        except OSError:  # ASGI 2.4 servers raise on a send to a closed connection
            raise ClientGone() from None

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()


_ENDED = object()
_TIMED_OUT = object()
_background: set[asyncio.Task] = set()


def _in_background(coro) -> None:
    """Run `coro` to its end even when the request task is being cancelled (a completion
    must reach the log whatever happened to the client)."""
    task = asyncio.create_task(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)


def _client_headers(upstream_headers) -> dict[str, str]:
    out = {k: v for k, v in upstream_headers.items() if k.lower() in PASSED_HEADERS}
    out.update(rate_limit_headers(upstream_headers))
    return out


class GatewayEndpoint:
    """POST /v1/chat/completions or /v1/messages."""

    def __init__(self, holder: RuntimeHolder, wire: WireFormat, estimator: OutputEstimator | None = None):
        self.holder, self.wire = holder, wire
        # What a call that names no output bound reserves, learned per pool and model.
        self.estimator = estimator if estimator is not None else OutputEstimator()
        # Mean seconds a gateway turn holds its lane, for the max-wait estimate (EWMA).
        self.mean_hold_s = 1.0

    async def __call__(self, scope, receive, send) -> None:
        x = _Exchange(scope, receive, send, self.wire)
        bound = logs.bind(request_id=x.headers.get("x-request-id") or uuid.uuid4().hex[:16])
        try:
            await self._serve(x)
        except ClientGone:
            x.status = 499  # nginx's "client closed request", for the metrics
        except BadRequest as exc:
            await x.error(400, str(exc))
        except Exception as exc:
            if not is_outage(exc):
                raise
            # The database is unreachable for now: a retriable 503 in the provider's shape,
            # as the GraphQL API answers UNAVAILABLE, never a bare 500.
            log.warning("gateway: database unavailable: %s", exc)
            if not x.status:   # nothing sent yet: the client can still be told
                await x.error(503, "AgentRM's database is unavailable right now; retry shortly")
        finally:
            x.close()
            metrics.GATEWAY_DURATION.labels(self.wire.name, str(x.status or 499)).observe(
                time.monotonic() - x.started)
            log.info("gateway request", extra={"status": x.status, "format": self.wire.name,
                                               "duration_s": round(time.monotonic() - x.started, 4)})
            logs.reset(bound)

    async def _serve(self, x: _Exchange) -> None:
        rt = self.holder.runtime
        if rt is None:
            await x.error(503, "AgentRM is starting")
            return
        token = self.wire.api_key(x.headers)
        principal = authenticate(token, rt.operator_token, rt.projector.model.token_index)
        if principal is None and token:
            await rt.projector.catch_up()   # an agent registered a moment ago on another worker
            principal = authenticate(token, rt.operator_token, rt.projector.model.token_index)
        if principal is None:
            await x.error(401, "invalid or missing AgentRM token: pass the agent's token as the API key")
            return
        if principal.is_operator:
            await x.error(403, "the gateway serves agents: use an agent's token, not the operator's")
            return
        logs.bind(agent_id=principal.agent_id)
        raw = await x.body()
        body = self.wire.parse(raw)
        try:
            agent = await rt.service.fresh(rt.service.agent_view, principal.agent_id)
            pool = agent["pool"]
            upstreams = cast(Upstreams, self.holder.upstreams)   # set before the runtime
            upstream = await upstreams.for_pool(pool)
            max_wait = _max_wait(x.headers.get(MAX_WAIT_HEADER))
            run_id = x.headers.get(RUN_ID_HEADER) or None
        except ServiceError as exc:
            await x.error(_STATUS.get(type(exc), 400), str(exc))
            return
        logs.bind(pool=pool, run_id=run_id)
        encoding = rt.projector.model.pools[pool].settings.tokenizer
        await encoding_ready(encoding)
        prompt = self.wire.count_prompt(body, encoding)
        streaming = body.get("stream") is True
        model = body.get("model") if isinstance(body.get("model"), str) else None
        bound = self.wire.output_bound(body)
        # The amount is recorded in the TurnRequested, so replay never needs the estimator.
        max_out = self.estimator.reserve(pool, model) if bound is None else bound

        def learn(completion_tokens: int) -> None:
            self.estimator.observe(pool, model, completion_tokens, bound)
        turn = GatewayTurn(rt, principal, pool)
        try:
            await x.race(turn.take(prompt, max_out, streams=streaming, run_id=run_id,
                                   max_wait_s=max_wait, mean_hold_s=self.mean_hold_s, model=model))
        except QueueTimeout as exc:
            wait = max(1, math.ceil(exc.estimated_wait_s))
            await x.error(429, f"queued longer than {MAX_WAIT_HEADER}; estimated wait {wait}s",
                          {"retry-after": str(wait)})
            return
        except TurnEnded as exc:
            await x.error(503, str(exc))
            return
        except ServiceError as exc:
            await x.error(_STATUS.get(type(exc), 400), str(exc))
            return
        logs.bind(turn_id=turn.turn_id)
        granted_at = time.monotonic()
        turn.set_limits(*rt.projector.model.pools[pool].settings.timeouts_for(model))
        try:
            await self._forward(x, turn, upstream, raw, body, pool, prompt, encoding, streaming, learn)
        finally:
            turn.close()
            hold = time.monotonic() - granted_at
            self.mean_hold_s += (hold - self.mean_hold_s) / 8

    async def _forward(self, x: _Exchange, turn: GatewayTurn, upstream, raw: bytes, body: dict, pool: str,
                       prompt: int, encoding: str, streaming: bool, learn: Callable[[int], None]) -> None:
        request = upstream.client.build_request(
            "POST", upstream.url(self.wire.path), content=raw,
            headers=self.wire.upstream_headers(x.headers, upstream.api_key))
        try:
            response = await x.race(upstream.client.send(request, stream=True), turn.ended,
                                    turn.budget(idle=streaming))
        except ClientGone:
            _in_background(turn.complete(ev.ERROR, prompt, 0))
            raise
        except httpx.HTTPError as exc:
            metrics.UPSTREAM_STATUS.labels(pool, "error").inc()
            await turn.complete(ev.ERROR, prompt, 0)
            await x.error(502, f"the upstream could not be reached: {type(exc).__name__}")
            return
        if response is _TIMED_OUT:
            await turn.complete(ev.ERROR, prompt, 0)
            await x.error(504, turn.timeout_message(idle=streaming))
            return
        if response is _ENDED:
            await x.error(504, "AgentRM ended the turn before the upstream answered (its lease expired: "
                               "the gateway could not renew it)")
            return
        metrics.UPSTREAM_STATUS.labels(pool, str(response.status_code)).inc()
        try:
            if response.status_code != 200:
                await self._relay_failure(x, turn, response, prompt)
            elif streaming:
                await self._relay_stream(x, turn, response, body, prompt, encoding, learn)
            else:
                await self._relay_reply(x, turn, response, body, prompt, learn)
        finally:
            _in_background(response.aclose())   # closes the upstream request if still open

    async def _relay_failure(self, x: _Exchange, turn: GatewayTurn, response, prompt: int) -> None:
        try:
            content = await x.race(response.aread(), turn.ended, turn.budget(idle=False))
        except ClientGone:
            _in_background(turn.complete(ev.ERROR, prompt, 0))
            raise
        if content is _ENDED or content is _TIMED_OUT:
            content = b""
        headers = _client_headers(response.headers)
        if response.status_code == 429:
            retry = retry_after_seconds(response.headers)
            await turn.complete(ev.RATE_LIMITED, 0, 0, retry, rate_limit_headers(response.headers))
        else:
            await turn.complete(ev.ERROR, prompt, 0, None, rate_limit_headers(response.headers))
        if "retry-after" in response.headers:
            headers["retry-after"] = response.headers["retry-after"]
        await x.reply(response.status_code, content, headers)

    async def _relay_reply(self, x: _Exchange, turn: GatewayTurn, response, body: dict, prompt: int,
                           learn: Callable[[int], None]) -> None:
        parts = []
        stream = response.aiter_raw()
        try:
            while True:
                part = await x.race(anext(stream, None), turn.ended, turn.budget(idle=False))
                if part is None:
                    break
                if part is _TIMED_OUT:
                    await turn.complete(ev.ERROR, prompt, 0)
                    await x.error(504, turn.timeout_message(idle=False))
                    return
                if part is _ENDED:
                    await x.error(504, "AgentRM ended the turn before the upstream answered (its lease "
                                       "expired: the gateway could not renew it)")
                    return
                turn.on_chunk()
                parts.append(part)
        except ClientGone:
            _in_background(turn.complete(ev.OK, prompt, 0))
            raise
        content = b"".join(parts)
        try:
            reply = json.loads(content)
        except ValueError:
            reply = {}
        used_prompt, used_completion = self.wire.usage(reply)
        await turn.complete(ev.OK, used_prompt if used_prompt is not None else prompt, used_completion or 0,
                            None, rate_limit_headers(response.headers))
        if used_completion is not None:
            learn(used_completion)
        if _wants_context(x.headers):
            await self._record(turn, body, self.wire.reply_text(reply))
        await x.reply(200, content, _client_headers(response.headers))

    async def _relay_stream(self, x: _Exchange, turn: GatewayTurn, response, body: dict, prompt: int,
                            encoding: str, learn: Callable[[int], None]) -> None:
        usage = StreamUsage(encoding)
        parser = SSEParser()
        headers = {"content-type": response.headers.get("content-type", "text/event-stream"),
                   "cache-control": "no-cache", **_client_headers(response.headers)}
        stream = response.aiter_raw()
        began = settled = False

        def completion():
            used_prompt = usage.prompt_tokens if usage.prompt_tokens is not None else prompt
            return turn.complete(ev.OK, used_prompt, usage.completion(), None, rate_limit_headers(response.headers))

        try:
            while True:
                part = await x.race(anext(stream, None), turn.ended, turn.budget(idle=True))
                if part is None:
                    break
                if part is _ENDED or part is _TIMED_OUT:
                    settled = True
                    if part is _TIMED_OUT:   # the gateway's own cut: settled with what was streamed
                        used_prompt = usage.prompt_tokens if usage.prompt_tokens is not None else prompt
                        await turn.complete(ev.ERROR, used_prompt, usage.completion())
                        message = turn.timeout_message(idle=True)
                    else:                    # reaped: the scheduler already settled the turn
                        message = ("AgentRM ended the turn mid-call (its lease expired: the gateway "
                                   "could not renew it) and closed the upstream call")
                    if began:
                        await x.chunk(self.wire.stream_error(504, message))
                        await x.send({"type": "http.response.body", "body": b"", "more_body": False})
                    else:
                        await x.error(504, message)
                    return
                turn.on_chunk()
                for payload in parser.feed(part):
                    self.wire.on_event(payload, usage)
                if not began:
                    await x.start(200, headers)
                    began = True
                await x.chunk(part)
            # The stream is over: the turn completes before the client's last byte, so a
            # client that asks right after sees its lane already free.
            settled = True
            await completion()
            learn(usage.completion())   # a whole answer: the stream ended, not cut short
            if _wants_context(x.headers):
                await self._record(turn, body, "".join(usage.text))
            if began:
                await x.send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await x.reply(200, b"", headers)
        finally:
            if not settled and not turn.reaped:
                # The client left (or the exchange failed) mid-stream: complete with what
                # was streamed so far; _forward's finally closes the upstream request.
                _in_background(completion())

    async def _record(self, turn: GatewayTurn, body: dict, reply_text: str) -> None:
        """x-agentrm-record-context: true appends the exchange (the request's last message
        and the answer) to the agent's context."""
        context = getattr(turn.rt, "context", None)
        if context is None:
            return
        role, content = self.wire.messages(body)[-1]
        messages = [(role if role in ("user", "system", "assistant", "tool") else "user", content, False)]
        if reply_text:
            messages.append(("assistant", reply_text, False))
        try:
            await context.append(turn.principal, [(r, c, p) for r, c, p in messages if c])
        except ServiceError as exc:
            log.warning("context not recorded", extra={"turn_id": turn.turn_id, "reason": str(exc)})


def _wants_context(headers: dict) -> bool:
    return headers.get(RECORD_CONTEXT_HEADER, "").strip().lower() in ("true", "1", "yes")


def _max_wait(value: str | None) -> float | None:
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise BadInput(f"{MAX_WAIT_HEADER} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise BadInput(f"{MAX_WAIT_HEADER} must be a non-negative number of seconds")
    return seconds

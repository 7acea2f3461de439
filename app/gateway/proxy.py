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
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import httpx

from app import config
from app.api.holder import RuntimeHolder
from app.auth import authenticate, could_be_agent_token
from app.context.tokens import encoding_ready
from app.db.outage import is_outage
from app.domain import events as ev
from app.errors import BadInput, Forbidden, LimitExceeded, NotFound, ServiceError, Unauthenticated, Unavailable
from app.observability import logs, metrics
from app.ports import GatewayReplies, StoredReply

from .bodies import BodyTooLarge, off_loop_if_large, refuse_declared
from .context_windows import context_window
from .correlation import (
    REQUEST_ID_HEADER,
    TURN_ID_HEADER,
    UPSTREAM_REQUEST_ID_HEADER,
    request_id_of,
    upstream_request_id,
)
from .idempotency import REPLAY_HEADER, Capture, KeyReused, body_hash, claim_or_replay, key_of
from .managed_context import Assembled, ManagedContext, shape_of, wanted
from .output_estimate import OutputEstimator
from .turns import GatewayTurn, QueueTimeout, TurnEnded, rate_limit_headers, retry_after_seconds
from .upstreams import Upstreams
from .wire import BadRequest, SSEParser, StreamUsage, WireFormat

log = logging.getLogger("agentrm.gateway")

RUN_ID_HEADER = "x-agentrm-run-id"
MAX_WAIT_HEADER = "x-agentrm-max-wait"
RECORD_CONTEXT_HEADER = "x-agentrm-record-context"
# The upstream's headers a client gets back. Its `x-request-id` comes back as
# x-upstream-request-id: the client's own name for the call is the gateway's x-request-id.
PASSED_HEADERS = ("content-type", "request-id", "openai-processing-ms")
_STATUS = {BadInput: 400, Unauthenticated: 401, Forbidden: 403, NotFound: 404, LimitExceeded: 429,
           Unavailable: 503}


def status_of(exc: ServiceError) -> int:
    """The HTTP status of a service error the gateway hands to a client."""
    return _STATUS.get(type(exc), 400)


class ClientGone(Exception):
    pass


class _Exchange:
    """One client request: its ASGI channels, a disconnect watch, and the replies."""

    def __init__(self, scope, receive, send, wire: WireFormat, max_body_bytes: int):
        self.scope, self.receive, self.send, self.wire = scope, receive, send, wire
        self.max_body_bytes = max_body_bytes
        self.headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        self.gone = asyncio.Event()
        self.started = time.monotonic()
        self.status = 0
        self.request_id = request_id_of(scope)
        self.turn_id: str | None = None      # named on every response once the call has a turn
        self.upstream_request_id: str | None = None
        # Told the completion tokens of a whole answer, to learn what this model's answers take.
        self.learn: Callable[[int], None] = lambda _tokens: None
        # With an Idempotency-Key: what is sent, and whether it is the call's whole answer
        # (set where an answer ends normally; an error or a stream cut short leaves it False).
        self.capture: Capture | None = None
        self.whole = False
        self.replayed = False
        # A managed-context call: what was forwarded, and the headers that say so.
        self.managed: Assembled | None = None
        self._watch: asyncio.Task | None = None

    async def body(self) -> bytes:
        """The whole body; BodyTooLarge, before reading it, when it is over the cap."""
        refuse_declared(self.headers, self.max_body_bytes)
        chunks, size = [], 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise BodyTooLarge(self.max_body_bytes)
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
        if self.capture is not None:
            self.capture.sent(body)
        await self.send({"type": "http.response.body", "body": body, "more_body": False})

    async def error(self, status: int, message: str, headers: dict | None = None) -> None:
        await self.reply(status, self.wire.error_body(status, message), headers)

    async def start(self, status: int, headers: dict) -> None:
        self.status = status
        if self.turn_id is not None:
            headers = {**headers, TURN_ID_HEADER: self.turn_id}
        if self.managed is not None:
            headers = {**headers, **self.managed.headers()}
        if self.capture is not None:
            self.capture.started(status, headers)
        await self.send({"type": "http.response.start", "status": status,
                         "headers": [(k.encode("latin-1"), str(v).encode("latin-1")) for k, v in headers.items()]})

    async def chunk(self, data: bytes) -> None:
        if self.capture is not None:
            self.capture.sent(data)
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


# Upstream answers about the operator's credentials or the provider itself say nothing an
# agent can act on, and may quote the key ("Incorrect API key provided: sk-..."): the agent
# gets a generic body in its wire's shape, the server's log keeps the upstream's, redacted.
_CREDENTIAL_OR_PROVIDER = {401: "the upstream refused the pool's credentials",
                           403: "the upstream refused the pool's credentials for this call"}
_SECRET = re.compile(rb"(sk-(?:ant-)?|key-|Bearer\s+)[A-Za-z0-9_\-]{6,}")


def redacted(content: bytes) -> bytes:
    return _SECRET.sub(rb"\1[redacted]", content)


def upstream_error_body(x: _Exchange, status: int, content: bytes, pool: str) -> bytes:
    """What the client sees of an upstream's error answer: its own for what concerns the
    request (400, 404, 413, 422, 429), a generic one for credentials and provider failures."""
    generic = _CREDENTIAL_OR_PROVIDER.get(status) or ("the upstream provider failed" if status >= 500 else None)
    if generic is None:
        return redacted(content)
    log.warning("gateway: upstream answered %s", status,
                extra={"pool": pool, "upstream_body": redacted(content)[:2000].decode("utf-8", "replace")})
    return json.dumps(x.wire.error_body(status, f"{generic} (status {status}); the operator can see why "
                                                "in the server's log")).encode()


def _in_background(coro) -> None:
    """Run `coro` to its end even when the request task is being cancelled (a completion
    must reach the log whatever happened to the client)."""
    task = asyncio.create_task(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)


def _client_headers(upstream_headers) -> dict[str, str]:
    out = {k: v for k, v in upstream_headers.items() if k.lower() in PASSED_HEADERS}
    out.update(rate_limit_headers(upstream_headers))
    upstream_id = upstream_request_id(upstream_headers)
    if upstream_id:
        out[UPSTREAM_REQUEST_ID_HEADER] = upstream_id
    return out


@dataclass(frozen=True)
class UpstreamCall:
    """What goes upstream for a call when it is not the client's own request as sent: a
    path and a body, answered in `wire`'s format and, with a `translation`, translated back
    into the client's (its `reply`, and `open` / `feed` / `close` for a stream: see
    app/gateway/responses.py). With `absent_ok`, a 404 or 405 that is not about the model
    means the upstream lacks the path: nothing is relayed and the turn stays open."""
    path: str
    content: bytes
    wire: WireFormat
    translation: Any = None
    absent_ok: bool = False


ABSENT = (404, 405)


def _about_the_model(content: bytes) -> bool:
    """An OpenAI 404 that names an unknown model: the path exists, the model does not."""
    try:
        error = json.loads(content).get("error")
    except (ValueError, AttributeError):
        return False
    return isinstance(error, dict) and error.get("code") == "model_not_found"


class GatewayEndpoint:
    """POST /v1/chat/completions, /v1/messages or /v1/embeddings: a call in `wire`'s format."""

    def __init__(self, holder: RuntimeHolder, wire: WireFormat, estimator: OutputEstimator | None = None,
                 managed: ManagedContext | None = None):
        self.holder, self.wire = holder, wire
        # Shared by the wire formats, so one agent's managed calls are ordered across them.
        self.managed = managed if managed is not None else ManagedContext()
        # What a call that names no output bound reserves, learned per pool and model.
        self.estimator = estimator if estimator is not None else OutputEstimator()
        # Mean seconds a gateway turn holds its lane, for the max-wait estimate (EWMA).
        self.mean_hold_s = 1.0
        self.max_body_bytes = config.load().gateway_max_body_bytes

    async def __call__(self, scope, receive, send) -> None:
        x = _Exchange(scope, receive, send, self.wire, self.max_body_bytes)
        bound = logs.bind(request_id=x.request_id)
        try:
            await self._serve(x)
        except ClientGone:
            x.status = 499  # nginx's "client closed request", for the metrics
        except BodyTooLarge as exc:
            await x.error(exc.status, str(exc))
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
            ids = {"request_id": x.request_id, "turn_id": x.turn_id, "upstream_request_id": x.upstream_request_id,
                   "idempotent_replay": True if x.replayed else None}
            log.info("gateway request", extra={"status": x.status, "format": self.wire.name,
                                               "duration_s": round(time.monotonic() - x.started, 4),
                                               **{k: v for k, v in ids.items() if v is not None}})
            logs.reset(bound)

    async def _serve(self, x: _Exchange) -> None:
        rt = self.holder.runtime
        if rt is None:
            await x.error(503, "AgentRM is starting")
            return
        token = self.wire.api_key(x.headers)
        principal = authenticate(token, rt.operator_token, rt.projector.model.token_index)
        if principal is None and could_be_agent_token(token):
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
        body = await off_loop_if_large(len(raw), self.wire.parse, raw)
        key = key_of(x.headers)
        if key is None:
            await self._call(x, rt, principal, raw, body)
            return
        replies = cast(GatewayReplies, self.holder.replies)   # set with the runtime
        agent_id = cast(str, principal.agent_id)               # an agent's: the operator was refused
        try:
            found = await claim_or_replay(replies, agent_id, key, body_hash(self.wire.name, body), x.race)
        except KeyReused:
            await x.error(409, "this Idempotency-Key was already used with a different request body; "
                               "use a new key for a new request")
            return
        if isinstance(found, StoredReply):
            await self._replay(x, found)
            return
        x.capture = Capture()
        try:
            await self._call(x, rt, principal, raw, body)
        finally:
            await found.settle(x.capture.reply() if x.whole else None)

    async def _replay(self, x: _Exchange, stored: StoredReply) -> None:
        """The first call's answer again: no turn, no upstream call."""
        x.replayed = True
        x.turn_id = stored.headers.get(TURN_ID_HEADER)
        x.upstream_request_id = stored.headers.get(UPSTREAM_REQUEST_ID_HEADER)
        metrics.IDEMPOTENT_REPLAYS.labels(self.wire.name).inc()
        await x.reply(stored.status, stored.body, {**stored.headers, REPLAY_HEADER: "true"})

    async def _call(self, x: _Exchange, rt, principal, raw: bytes, body: dict) -> None:
        """The call itself: the agent's pool and upstream, a turn, the upstream request."""
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
        self.check(upstream, body)
        logs.bind(pool=pool, run_id=run_id)
        encoding = rt.projector.model.pools[pool].settings.tokenizer
        await encoding_ready(encoding)
        prompt = await off_loop_if_large(len(raw), self.wire.count_prompt, body, encoding)
        streaming = body.get("stream") is True
        model = body.get("model") if isinstance(body.get("model"), str) else None
        bound = self.wire.output_bound(body)
        # The amount is recorded in the TurnRequested, so replay never needs the estimator.
        max_out = self.estimator.reserve(pool, model) if bound is None else bound
        if self._managed_wanted(x, rt, pool):
            settings = rt.projector.model.pools[pool].settings
            budget = context_window(model, settings.context_window_tokens) - max_out
            try:
                x.managed = await self.managed.prepare(rt.context, principal, self.wire, body, prompt, encoding,
                                                       budget)
            except ServiceError as exc:
                await x.error(_STATUS.get(type(exc), 400), str(exc))
                return
            if x.managed.body is not body:
                body, prompt = x.managed.body, x.managed.tokens
                raw = await off_loop_if_large(len(raw), lambda: json.dumps(body).encode())

        def learn(completion_tokens: int) -> None:
            self.estimator.observe(pool, model, completion_tokens, bound)
        turn = GatewayTurn(rt, principal, pool)
        try:
            try:
                await x.race(turn.take(prompt, max_out, streams=streaming, run_id=run_id,
                                       max_wait_s=max_wait, mean_hold_s=self.mean_hold_s, model=model))
            finally:
                x.turn_id = turn.turn_id   # also a turn that was queued, then cancelled or ended
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
            x.learn = learn
            await self._forward(x, turn, upstream, raw, body, pool, prompt, encoding, streaming)
        finally:
            turn.close()
            hold = time.monotonic() - granted_at
            self.mean_hold_s += (hold - self.mean_hold_s) / 8

    def check(self, upstream, body: dict) -> None:
        """Refuse (BadRequest) what this upstream cannot be asked, before a turn is taken."""

    def _managed_wanted(self, x: _Exchange, rt, pool: str) -> bool:
        """Whether this call's context is managed (BadRequest for a bad header)."""
        if shape_of(self.wire) is None or getattr(rt, "context", None) is None:
            return False
        return wanted(x.headers, rt.projector.model.pools[pool].settings.context_mode)

    async def _forward(self, x: _Exchange, turn: GatewayTurn, upstream, raw: bytes, body: dict, pool: str,
                       prompt: int, encoding: str, streaming: bool, call: UpstreamCall | None = None) -> bool:
        """Send the call upstream and relay its answer, completing the turn. False (and the
        turn still open) when `call.absent_ok` and the upstream lacks the path."""
        call = call or UpstreamCall(self.wire.path, raw, self.wire)
        request = upstream.client.build_request(
            "POST", upstream.url(call.path), content=call.content,
            headers={**call.wire.upstream_headers(x.headers, upstream.api_key), REQUEST_ID_HEADER: x.request_id})
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
            return True
        if response is _TIMED_OUT:
            await turn.complete(ev.ERROR, prompt, 0)
            await x.error(504, turn.timeout_message(idle=streaming))
            return True
        if response is _ENDED:
            await x.error(504, "AgentRM ended the turn before the upstream answered (its lease expired: "
                               "the gateway could not renew it)")
            return True
        metrics.UPSTREAM_STATUS.labels(pool, str(response.status_code)).inc()
        x.upstream_request_id = upstream_request_id(response.headers)
        try:
            if call.absent_ok and response.status_code in ABSENT:
                try:
                    content = await x.race(response.aread(), turn.ended, turn.budget(idle=False))
                except ClientGone:
                    _in_background(turn.complete(ev.ERROR, 0, 0))
                    raise
                if not isinstance(content, bytes) or not _about_the_model(content):
                    return False   # no model was called: the turn goes on to the next attempt
            if response.status_code != 200:
                await self._relay_failure(x, turn, response, prompt)
            elif streaming:
                await self._relay_stream(x, turn, response, body, prompt, encoding, call)
            else:
                await self._relay_reply(x, turn, response, body, prompt, call)
        finally:
            _in_background(response.aclose())   # closes the upstream request if still open
        return True

    async def _relay_failure(self, x: _Exchange, turn: GatewayTurn, response, prompt: int) -> None:
        try:
            content = await x.race(response.aread(), turn.ended, turn.budget(idle=False))
        except ClientGone:
            _in_background(turn.complete(ev.ERROR, prompt, 0))
            raise
        cut = content is _ENDED or content is _TIMED_OUT
        if cut:
            content = b""
        content = upstream_error_body(x, response.status_code, content, turn.pool)
        headers = _client_headers(response.headers)
        if response.status_code == 429:
            retry = retry_after_seconds(response.headers)
            await turn.complete(ev.RATE_LIMITED, 0, 0, retry, rate_limit_headers(response.headers))
        else:
            await turn.complete(ev.ERROR, prompt, 0, None, rate_limit_headers(response.headers))
        if "retry-after" in response.headers:
            headers["retry-after"] = response.headers["retry-after"]
        x.whole = not cut   # the upstream's whole answer, not one cut by a timeout or a reap
        await x.reply(response.status_code, content, headers)

    async def _relay_reply(self, x: _Exchange, turn: GatewayTurn, response, body: dict, prompt: int,
                           call: UpstreamCall) -> None:
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
        used_prompt, used_completion = call.wire.usage(reply)
        used_prompt = used_prompt if used_prompt is not None else prompt
        await turn.complete(ev.OK, used_prompt, used_completion or 0, None, rate_limit_headers(response.headers))
        if used_completion is not None:
            x.learn(used_completion)
        if x.managed is not None:
            await self.managed.record_reply(turn.rt.context, turn.principal,
                                            x.managed.reply_key(reply, translated=call.translation is not None))
        elif _wants_context(x.headers):
            await self._record(turn, body, call.wire.reply_text(reply))
        if call.translation is not None:
            content = json.dumps(call.translation.reply(reply, (used_prompt, used_completion or 0))).encode()
        x.whole = True
        await x.reply(200, content, _client_headers(response.headers))

    async def _relay_stream(self, x: _Exchange, turn: GatewayTurn, response, body: dict, prompt: int,
                            encoding: str, call: UpstreamCall) -> None:
        usage = StreamUsage(encoding)
        parser = SSEParser()
        translation = call.translation
        headers = {"content-type": response.headers.get("content-type", "text/event-stream"),
                   "cache-control": "no-cache", **_client_headers(response.headers)}
        if translation is not None:
            headers["content-type"] = "text/event-stream"
        stream = response.aiter_raw()
        began = settled = False

        def used() -> tuple[int, int]:
            return usage.prompt_tokens if usage.prompt_tokens is not None else prompt, usage.completion()

        def completion():
            return turn.complete(ev.OK, *used(), None, rate_limit_headers(response.headers))

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
                payloads = parser.feed(part)
                for payload in payloads:
                    call.wire.on_event(payload, usage)
                    if x.managed is not None:
                        x.managed.observe(payload)
                if translation is not None:   # the client reads its own format's events
                    part = translation.open() + b"".join(translation.feed(p) for p in payloads)
                if not began:
                    await x.start(200, headers)
                    began = True
                if part:
                    await x.chunk(part)
            # The stream is over: the turn completes before the client's last byte, so a
            # client that asks right after sees its lane already free.
            settled = True
            await completion()
            x.learn(usage.completion())   # a whole answer: the stream ended, not cut short
            if x.managed is not None:
                if not x.managed.tool_calls_streamed:   # a tool call comes back with its results
                    await self.managed.record_reply(turn.rt.context, turn.principal,
                                                    ("assistant", "".join(usage.text)))
            elif _wants_context(x.headers):
                await self._record(turn, body, "".join(usage.text))
            if translation is not None:
                if not began:
                    await x.start(200, headers)
                    began = True
                await x.chunk(translation.open() + translation.close(used()))
            x.whole = True
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
        sent = self.wire.messages(body)
        if not sent:   # a format with no messages (embeddings) records nothing
            return
        role, content = sent[-1]
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

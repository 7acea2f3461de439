"""One gateway call's turn: take it (waiting in the queue), heartbeat from the stream,
watch for a reap, complete it with what the upstream reported.

The gateway is an ordinary agent-side client of the Service, like a GraphQL caller: it
uses request_turn / heartbeat / complete_turn / cancel_turn, so every rule (MLFQ,
admission, start deadline, pauses) applies to it unchanged.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import cast

from app.auth import Principal
from app.domain import events as ev
from app.domain.decide import available
from app.errors import Conflict, ServiceError
from app.projections.documents import TurnDoc
from app.service import MAX_WAIT_SECONDS

log = logging.getLogger("agentrm.gateway")

RATE_HEADER_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")
FINISHED_WAIT_S = 3600.0     # re-arm period of the reap watch (it is event-driven)


class QueueTimeout(Exception):
    """The turn was still queued when the client's x-agentrm-max-wait ran out."""

    def __init__(self, estimated_wait_s: float):
        super().__init__(f"still queued after the maximum wait; estimated wait {estimated_wait_s:.1f}s")
        self.estimated_wait_s = estimated_wait_s


class TurnEnded(Exception):
    """The turn finished before it was granted (cancelled, quarantined agent, ...)."""


def rate_limit_headers(headers) -> dict[str, str]:
    """The provider's rate-limit headers, as completeTurn takes them."""
    out = {}
    for name, value in headers.items():
        low = name.lower()
        if low.startswith(RATE_HEADER_PREFIXES) or low in ("retry-after", "retry-after-ms"):
            out[low] = value
    return out


def retry_after_seconds(headers) -> float | None:
    """retry-after in seconds (the numeric form; `retry-after-ms` when given)."""
    ms = headers.get("retry-after-ms")
    with contextlib.suppress(TypeError, ValueError):
        if ms is not None:
            return max(0.0, float(ms) / 1000.0)
    with contextlib.suppress(TypeError, ValueError):
        value = float(headers.get("retry-after"))
        if math.isfinite(value):
            return min(max(0.0, value), 3600.0)
    return None


def estimated_wait(state, turn_id: str, now: float, mean_hold_s: float) -> float:
    """How long a queued turn may still wait: the pause left, then the larger of the lanes'
    and the request bucket's time to serve every turn ahead of it and itself. An estimate
    for retry-after, not a promise: the queue order can change (boosts, new arrivals)."""
    settings = state.settings
    ahead = 0
    for queue in state.queues:
        if turn_id in queue:
            ahead += queue.index(turn_id)
            break
        ahead += len(queue)
    paused = max(0.0, (state.paused_until or 0.0) - now)
    requests, _tokens = available(state, now)
    by_rate = max(0.0, (ahead + 1 - requests) * 60.0 / max(1e-9, settings.rpm * state.rate_factor))
    by_lanes = (ahead // max(1, settings.lanes) + 1) * mean_hold_s
    return paused + max(by_rate, by_lanes)


class GatewayTurn:
    def __init__(self, runtime, principal: Principal, pool: str):
        self.rt, self.principal, self.pool = runtime, principal, pool
        self.svc = runtime.service
        self.turn_id: str | None = None
        self.lease_s = runtime.projector.model.pools[pool].settings.lease_seconds
        self._last_beat: float | None = None
        self._beat: asyncio.Task | None = None
        self._completing = False
        self.ended: asyncio.Future | None = None     # set when the turn leaves GRANTED
        self._watch: asyncio.Task | None = None

    async def take(self, estimated_tokens: int, max_output_tokens: int, *, streams: bool,
                   run_id: str | None, max_wait_s: float | None, mean_hold_s: float) -> TurnDoc:
        started = time.monotonic()
        # No wait inside request_turn: it returns at the scheduler's first answer (queued or
        # granted) with the turn's id, so a client that leaves while queued can be cancelled.
        request = asyncio.ensure_future(self.svc.request_turn(
            self.principal, estimated_tokens, max_output_tokens, 0.0, streams=streams, run_id=run_id))
        try:
            doc = await asyncio.shield(request)
        except asyncio.CancelledError:
            # The client left before the scheduler's first answer: the request is in the log
            # already, so let it finish (seconds at most) and cancel the turn it made.
            with contextlib.suppress(Exception):
                self.turn_id = (await request)["turn_id"]
                await self.cancel()
            raise
        self.turn_id = doc["turn_id"]
        try:
            while doc["status"] == ev.QUEUED:
                left = (MAX_WAIT_SECONDS if max_wait_s is None
                        else max_wait_s - (time.monotonic() - started))
                if left <= 0:
                    state = self.rt.projector.model.pools[self.pool]
                    wait = estimated_wait(state, self.turn_id, time.time(), mean_hold_s)
                    await self.cancel()
                    raise QueueTimeout(wait)
                model = self.rt.projector.model
                await self.rt.projector.wait_until(
                    lambda model=model: model.turns[self.turn_id]["status"] != ev.QUEUED, left,
                    turn_id=self.turn_id)
                doc = model.turns[self.turn_id]
        except asyncio.CancelledError:
            await asyncio.shield(self.cancel())   # the client left while queued
            raise
        if doc["status"] != ev.GRANTED:
            raise TurnEnded(f"turn {self.turn_id} ended {doc['status']}: {doc.get('reason') or ''}".strip())
        if not streams:
            # A plain lease from the grant: no start deadline to meet, so the first heartbeat
            # is due only a third of a lease in (a short call then costs no heartbeat at all).
            self._last_beat = time.monotonic()
        self.ended = asyncio.get_running_loop().create_future()
        self._watch = asyncio.create_task(self._watch_end())
        return doc

    async def _watch_end(self) -> None:
        model = self.rt.projector.model
        while model.turns[self.turn_id]["status"] == ev.GRANTED:
            await self.rt.projector.wait_until(
                lambda: model.turns[self.turn_id]["status"] != ev.GRANTED, FINISHED_WAIT_S, turn_id=self.turn_id)
        ended = cast(asyncio.Future, self.ended)   # the grant created it before starting this watch
        if not ended.done():
            ended.set_result(model.turns[self.turn_id]["status"])

    @property
    def reaped(self) -> bool:
        """The scheduler ended the turn while the call was still running."""
        return self.ended is not None and self.ended.done() and not self._completing

    def on_chunk(self) -> None:
        """Called from the code that reads the upstream's bytes, never from a timer: a
        streaming call's first chunk starts the full lease, later ones (and a long
        non-streaming body's) keep it alive every lease/3."""
        now = time.monotonic()
        if self._last_beat is not None and now - self._last_beat < self.lease_s / 3:
            return
        if self._beat is not None and not self._beat.done():
            return
        self._last_beat = now
        self._beat = asyncio.create_task(self._heartbeat())

    async def _heartbeat(self) -> None:
        try:
            await self.svc.heartbeat(self.principal, self.turn_id)
        except ServiceError as exc:  # reaped meanwhile: the watch ends the call
            log.info("heartbeat refused", extra={"turn_id": self.turn_id, "reason": str(exc)})

    async def complete(self, outcome: str, prompt_tokens: int | None, completion_tokens: int | None,
                       retry_after: float | None = None, headers: dict | None = None) -> TurnDoc | None:
        self._completing = True
        if self._beat is not None and not self._beat.done():
            with contextlib.suppress(Exception):
                await self._beat
        try:
            return await self.svc.complete_turn(self.principal, self.turn_id, outcome, prompt_tokens,
                                                completion_tokens, retry_after, headers or None)
        except Conflict as exc:  # reaped first: the reap already freed the lane
            log.info("completion refused", extra={"turn_id": self.turn_id, "reason": str(exc)})
            return None
        finally:
            self.close()

    async def cancel(self) -> None:
        if self.turn_id is None:
            return
        with contextlib.suppress(ServiceError):
            await self.svc.cancel_turn(self.principal, self.turn_id)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()

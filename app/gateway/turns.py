"""One gateway call's turn: take it (waiting in the queue), hold it while the upstream call
is open, watch for a reap, complete it with what the upstream reported.

The gateway is the holder of its turns (TurnRequested.holder = "gateway"; the rules are in
app/domain/deadlines.py): while its upstream request is open it renews the lease itself,
on a timer (keepalive heartbeats), so a lease expiry means the gateway is gone, never
that a call is slow. The first chunk of a stream is reported at once (a heartbeat that
is the model's first-chunk sample). Otherwise the gateway uses request_turn / heartbeat /
complete_turn / cancel_turn like any client, so every other rule (the grant order,
admission, pauses) applies to it unchanged.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from typing import cast

from app.auth import Principal
from app.domain import events as ev
from app.domain.decide import available
from app.errors import Conflict, LimitExceeded, ServiceError
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
        # The gateway's own principal for the agent: only it may change the turns it holds.
        self.rt, self.principal, self.pool = runtime, dataclasses.replace(principal, via_gateway=True), pool
        self.svc = runtime.service
        self.turn_id: str | None = None
        settings = runtime.projector.model.pools[pool].settings
        self.lease_s, self.stall_s = settings.lease_seconds, settings.stall_timeout_seconds
        self._streams = False
        self._first_chunk_sent = False
        self._last_chunk_at: float | None = None     # monotonic time of the stream's latest chunk
        self._stall_told = False                     # a keepalive has reported the stall already
        self._beat: asyncio.Task | None = None
        self._keepalive: asyncio.Task | None = None
        self._completing = False
        self._deadline = math.inf
        self.request_timeout_s = self.idle_timeout_s = math.inf
        self.ended: asyncio.Future | None = None     # set when the turn leaves GRANTED
        self._watch: asyncio.Task | None = None

    async def take(self, estimated_tokens: int, max_output_tokens: int, *, streams: bool,
                   run_id: str | None, max_wait_s: float | None, mean_hold_s: float,
                   model: str | None = None) -> TurnDoc:
        started = time.monotonic()
        self._streams = streams

        def wait_left() -> float:
            return MAX_WAIT_SECONDS if max_wait_s is None else max_wait_s - (time.monotonic() - started)
        while True:
            try:
                doc = await self._request(estimated_tokens, max_output_tokens, streams, run_id, model)
                break
            except LimitExceeded:
                # The agent's queue is at its cap (AGENTRM_MAX_QUEUED_PER_AGENT). A burst from one
                # agent (asyncio.gather, abatch) waits here for a slot, within the client's own
                # wait, rather than failing: no SDK retries a 400, and a 429 the SDK retries twice
                # would fail a burst of 50 all the same. Only the wait running out answers 429.
                left = wait_left()
                if left <= 0:
                    raise QueueTimeout(max(1.0, mean_hold_s)) from None
                await self._slot_freed(min(left, 1.0))
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
                read_model = self.rt.projector.model
                await self.rt.projector.wait_until(
                    lambda read_model=read_model: read_model.turns[self.turn_id]["status"] != ev.QUEUED, left,
                    turn_id=self.turn_id)
                doc = read_model.turns[self.turn_id]
        except asyncio.CancelledError:
            await asyncio.shield(self.cancel())   # the client left while queued
            raise
        if doc["status"] != ev.GRANTED:
            raise TurnEnded(f"turn {self.turn_id} ended {doc['status']}: {doc.get('reason') or ''}".strip())
        self.ended = asyncio.get_running_loop().create_future()
        self._watch = asyncio.create_task(self._watch_end())
        self._keepalive = asyncio.create_task(self._keep_alive())
        return doc

    async def _request(self, estimated_tokens: int, max_output_tokens: int, streams: bool, run_id: str | None,
                       model: str | None) -> TurnDoc:
        # No wait inside request_turn: it returns at the scheduler's first answer (queued or
        # granted) with the turn's id, so a client that leaves while queued can be cancelled.
        request = asyncio.ensure_future(self.svc.request_turn(
            self.principal, estimated_tokens, max_output_tokens, 0.0, streams=streams, run_id=run_id,
            held_by_gateway=True, model=model))
        try:
            return await asyncio.shield(request)
        except asyncio.CancelledError:
            # The client left before the scheduler's first answer: the request is in the log
            # already, so let it finish (seconds at most) and cancel the turn it made.
            with contextlib.suppress(Exception):
                self.turn_id = (await request)["turn_id"]
                await self.cancel()
            raise

    async def _slot_freed(self, timeout: float) -> None:
        """Until one of the agent's queued turns leaves the queue (or `timeout`)."""
        state = self.rt.projector.model.pools[self.pool]
        agent_id = cast(str, self.principal.agent_id)
        queued = state.queued_of(agent_id)
        await self.rt.projector.wait_until(lambda: state.queued_of(agent_id) < queued, timeout)

    def set_limits(self, request_timeout_s: float, idle_timeout_s: float) -> None:
        """The call's own timeouts (PoolSettings.timeouts_for its model), from now (the grant)."""
        self._deadline = time.monotonic() + request_timeout_s
        self.request_timeout_s, self.idle_timeout_s = request_timeout_s, idle_timeout_s

    def budget(self, *, idle: bool) -> float:
        """How long the next read from the upstream may take: what is left of the call's
        wall-clock limit, and for a stream at most the idle timeout between chunks."""
        left = max(0.0, self._deadline - time.monotonic())
        return min(left, self.idle_timeout_s) if idle else left

    def timeout_message(self, *, idle: bool) -> str:
        if idle and self.idle_timeout_s <= max(0.0, self._deadline - time.monotonic()):
            return (f"the upstream sent nothing for {self.idle_timeout_s:g} s (the pool's "
                    "streamIdleTimeoutSeconds); AgentRM closed the call")
        return (f"the upstream call took longer than {self.request_timeout_s:g} s (the pool's "
                "requestTimeoutSeconds); AgentRM closed the call")

    def idle_s(self, now: float) -> float | None:
        """Seconds since the stream's latest chunk, once it has begun (None before, and for a
        call that does not stream)."""
        return None if self._last_chunk_at is None else max(0.0, now - self._last_chunk_at)

    def _stall_due_at(self) -> float | None:
        """When the begun stream's silence reaches the pool's stall timeout, if it has not been
        reported yet: the keepalive wakes then, so the core may suspect it at once rather than
        at the next renewal (app/domain/deadlines.py, held calls)."""
        if self._last_chunk_at is None or self.stall_s is None or self._stall_told:
            return None
        return self._last_chunk_at + self.stall_s

    async def _keep_alive(self) -> None:
        """Renew the lease every third of it while the call is open (this task is cancelled
        when the turn completes or the exchange ends), each renewal with the stream's silence
        so far; and one renewal early, when a begun stream has been silent for the stall
        timeout. While chunks flow that costs a wakeup per stall timeout, not a heartbeat. A
        short call costs no heartbeat at all; a refused one (the turn ended meanwhile) stops
        the renewals."""
        renew_at = time.monotonic() + self.lease_s / 3
        while True:
            stall_at = self._stall_due_at()
            wake = renew_at if stall_at is None else min(renew_at, stall_at)
            await asyncio.sleep(max(0.0, wake - time.monotonic()))
            now = time.monotonic()
            idle = self.idle_s(now)
            stalled = self.stall_s is not None and idle is not None and idle >= self.stall_s
            if now < renew_at and not (stalled and not self._stall_told):
                continue   # the stream moved meanwhile: wait for the next chunk's stall time
            self._stall_told = self._stall_told or stalled
            renew_at = now + self.lease_s / 3
            try:
                await self.svc.heartbeat(self.principal, self.turn_id, keepalive=True, idle_s=idle)
            except ServiceError as exc:
                log.info("keepalive refused", extra={"turn_id": self.turn_id, "reason": str(exc)})
                return
            except Exception as exc:  # noqa: BLE001 - a database blip: the next renewal may pass
                log.warning("keepalive failed", extra={"turn_id": self.turn_id, "reason": str(exc)})

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
        """Called from the code that reads the upstream's bytes: a stream's first chunk is
        reported at once (its model's first-chunk sample, and the end of any suspicion);
        the lease itself is the keepalive's to renew, with the time since the latest chunk."""
        if not self._streams:
            return
        self._last_chunk_at = time.monotonic()
        if self._first_chunk_sent:
            return
        self._first_chunk_sent = True
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
        for task in (self._watch, self._keepalive):
            if task is not None:
                task.cancel()

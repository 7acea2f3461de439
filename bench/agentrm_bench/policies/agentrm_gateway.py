"""`agentrm-gateway`: the real AgentRM core reached through its /v1 gateway, which holds the
turns, with every agent on the openai SDK's defaults.

`agentrm` plays AgentRM's client library: the agent holds its turn and heartbeats from its
stream, so a call that shows no first chunk by the learned start deadline is reaped, and
three reaps in a row quarantine the agent. Through the gateway the turn is the gateway's,
and other rules hold (app/domain/deadlines.py, "Held calls"). What this model does, each
with the code it follows:

- The turn: the gateway requests it with holder "gateway", the model the body names, the
  run (x-agentrm-run-id) and streams (app/gateway/turns.py `GatewayTurn._request`:
  `held_by_gateway=True, model=model`). A queued turn waits at most MAX_WAIT_SECONDS
  (app/service.py: 300 s, no x-agentrm-max-wait sent); then the gateway cancels it and
  answers 429 with retry-after its estimated wait (`GatewayTurn.take`, `QueueTimeout`).
- Keepalives: while the upstream request is open the gateway renews the lease every third
  of it (`GatewayTurn._keep_alive`: HeartbeatSent with keepalive), so the lease of a live
  call never runs out and a slow call is never reaped (app/domain/decide.py `_on_heartbeat`).
- The first chunk is reported at once, as a plain heartbeat (`GatewayTurn.on_chunk`): the
  model's first-chunk sample, and the end of any suspicion.
- Timeouts: the call's own, from the grant (`GatewayTurn.set_limits` with
  `PoolSettings.timeouts_for(model)`: request_timeout_seconds 600 s, stream_idle_timeout_seconds
  120 s). The response's start waits at most the idle limit, within the wall-clock limit, and
  so does each later chunk (app/gateway/proxy.py `_forward` and `_relay_stream`:
  `turn.budget(idle=streaming)`); past it the gateway closes the upstream request, completes
  the turn ERROR and answers 504 (`timeout_message`), as a stream error event once the
  stream has begun.
- Suspicion: a held call with no first chunk by its model's learned deadline becomes a
  suspect (TurnSuspected); its lane is freed (bounded by the lanes in use) while the call
  stays open, and the lane's hold ends there (sim.held_until). The core decides it
  (app/domain/decide.py `_fire_suspicions`, app/domain/apply.py `_turn_suspected`).
- Stalls: each keepalive of a begun stream carries the seconds since its last chunk
  (`GatewayTurn.idle_s`, HeartbeatSent.idle_s), and one more goes when that silence reaches
  the pool's stall_timeout_seconds (`GatewayTurn._stall_due_at`; here a Watchdog on the
  attempt with that idle limit). The core makes the call a suspect and frees its lane
  (app/domain/deadlines.py `stalled_for`, decide.py `_on_heartbeat`). The real gateway
  restarts its renewal period at that early keepalive; here the period runs on (one
  keepalive more per stall, which changes nothing the core decides).
- 429: nothing is retried in the gateway; the upstream's 429 is reported (RATE_LIMITED,
  with retry-after and the headers) and relayed (proxy.py `_relay_failure`).
- Quarantine: a held turn's reap or cut never counts towards it (apply.py `_turn_reaped`:
  `turn.holder is None`); a gateway cut is a completion (ERROR), not a reap at all.
- The SDK (openai-python `_base_client.py`, as policies/no_gateway.py cites it): 2 retries of a
  504, a 503 or a 429 whose retry-after is at most 120 s, after `sdk_backoff` (retry-after
  when given, else 0.5 s then 1 s with jitter); an error inside a stream that has begun is
  raised by `Stream.__stream__` outside the retry loop, to the agent, which asks again after
  AGENT_RETRY_S. Its own read timeout (600 s) never fires first: a turn waits at most 300 s
  in the queue and then 120 s for its first chunk.

The gateway is in the API's process, so the grant reaches it in about the time the client
library's requestTurn answer takes: the same measured delays are used (agentrm.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

from app.domain import events as ev
from app.domain.deadlines import GATEWAY
from app.domain.settings import PoolSettings

from ..sim import Attempt, CallRecord, SlotHold, Watchdog
from .agentrm import AgentRM
from .base import SDK_DEFAULT_MAX_RETRIES, Context, Cursor, sdk_backoff
from .no_gateway import should_retry_429

# app/service.py MAX_WAIT_SECONDS: the longest a gateway call waits queued without
# x-agentrm-max-wait (the bench's agents send none).
GATEWAY_MAX_WAIT_S = 300.0


@dataclass(eq=False)
class _Exchange:
    """One HTTP request of the SDK to the gateway, and the turn the gateway holds for it."""
    cur: Cursor
    retries_taken: int            # the SDK's: 0 for a call's first request
    turn_id: str
    token: int                    # the cursor's token when it was sent
    granted_at: float | None = None
    attempt: Attempt | None = None
    watchdog: Watchdog | None = None
    stall_watch: Watchdog | None = None   # the early keepalive of a begun stream gone silent
    began: bool = False           # the stream reached the client (its first chunk)
    done: bool = False            # the gateway has answered the SDK (or dropped the exchange)


class AgentRMGateway(AgentRM):
    """AgentRM's core behind its gateway (module docstring)."""
    name = "agentrm-gateway"

    def __init__(self, ctx: Context, settings: PoolSettings, agents=None):
        super().__init__(ctx, settings, agents)
        self.keepalive_s = settings.lease_seconds / 3.0     # GatewayTurn._keep_alive
        self.exchanges: dict[str, _Exchange] = {}
        # proxy.py: the gateway's running mean hold, behind a queue timeout's retry-after
        self.mean_hold_s = 0.0
        self.counts = {"suspicions": 0, "lanes_freed": 0, "gateway_cuts": 0, "queue_timeouts": 0,
                       "sdk_retries": 0, "errors_to_agent": 0, "keepalives": 0}

    # -- the SDK --------------------------------------------------------------------------
    def call_ready(self, cur: Cursor) -> None:
        self._sdk_send(cur, 0)

    def _sdk_send(self, cur: Cursor, retries_taken: int) -> None:
        turn_id = self._next_turn_id(cur)
        ex = self.exchanges[turn_id] = _Exchange(cur, retries_taken, turn_id, cur.token)
        self.sim.after(GATEWAY_MAX_WAIT_S, lambda: self._queue_timeout(ex))
        self._ask(cur, turn_id, holder=GATEWAY, model=cur.agent.model)

    def _sdk_error(self, ex: _Exchange, retry_after: float | None) -> None:
        """The gateway answered an error status (504, 503, 429) or, once the stream had
        begun, an error event inside it: the SDK retries the first kind while it may."""
        cur = ex.cur
        if not ex.began and ex.retries_taken < SDK_DEFAULT_MAX_RETRIES and should_retry_429(retry_after):
            self.counts["sdk_retries"] += 1
            wait = sdk_backoff(self.rng, retry_after, ex.retries_taken)
            self.sim.after(wait, lambda: self._sdk_send(cur, ex.retries_taken + 1) if cur.token == ex.token else None)
            return
        self.counts["errors_to_agent"] += 1
        self.agent_retry(cur)

    # -- the gateway ----------------------------------------------------------------------
    def _react(self, d: ev.Decided) -> None:
        ex = self.exchanges.get(getattr(d, "turn_id", ""))
        if ex is None:
            super()._react(d)
            return
        cur = ex.cur
        if isinstance(d, ev.TurnGranted):
            ex.granted_at = self.sim.now
            super()._react(d)                 # the lane's hold; the upstream request after the delay
        elif isinstance(d, ev.TurnSuspected):
            self.counts["suspicions"] += 1
            if d.lane_freed:
                self.counts["lanes_freed"] += 1
                self.recorder.release(self.sim.now, cur.hold)   # the call goes on, off the lane
                cur.hold = None
        elif isinstance(d, ev.TurnCompleted):
            self._end(ex)
            self._drop_turn(cur, d.turn_id)
        elif isinstance(d, ev.TurnReaped):
            # Only if a keepalive came too late (the gateway gone): proxy.py answers 504.
            self.reaps += 1
            self._drop_turn(cur, d.turn_id)
            if not ex.done:
                self._end(ex)
                if ex.attempt is not None and ex.attempt.ended_at is None:
                    ex.attempt.abandon(self.sim.now)
                self._sdk_error(ex, None)
        elif isinstance(d, ev.TurnCancelled):
            self.exchanges.pop(d.turn_id, None)
            if ex.done:
                self._drop_turn(cur, d.turn_id)    # the queue timeout's own cancel
                return
            ex.done = True
            super()._react(d)                      # refused: a quarantined agent is stuck

    def _end(self, ex: _Exchange) -> None:
        ex.done = True
        for watch in (ex.watchdog, ex.stall_watch):
            if watch is not None:
                watch.cancel()
        if ex.granted_at is not None:
            self.mean_hold_s += (self.sim.now - ex.granted_at - self.mean_hold_s) / 8.0   # proxy.py
        self.exchanges.pop(ex.turn_id, None)

    def _queue_timeout(self, ex: _Exchange) -> None:
        if ex.done or ex.granted_at is not None:
            return
        self.counts["queue_timeouts"] += 1
        ex.done = True
        self._decide(ev.CANCEL_REQUESTED, {"turn_id": ex.turn_id, "agent_id": ex.cur.agent.agent_id,
                                           "at": self.sim.now})
        # turns.py estimated_wait is at least the mean hold (the lanes' share of it)
        self._sdk_error(ex, float(max(1, math.ceil(self.mean_hold_s))))

    def _granted(self, cur: Cursor, turn_id: str, token: int) -> None:
        ex = self.exchanges.get(turn_id)
        if cur.token != token or turn_id not in self.by_turn or ex is None or ex.done:
            return
        record = cast(CallRecord, cur.record)
        attempt = self.link.send(record, lambda a: self._upstream_answered(ex, a), hold=cur.hold,
                                 on_first_chunk=lambda a: self._first_chunk(ex))
        ex.attempt = cur.attempt = attempt
        if attempt.hung:
            cast(SlotHold, cur.hold).hung_since = attempt.hung_from
        self.sim.after(self.keepalive_s, lambda: self._keepalive(ex))
        if not attempt.answer.admitted:
            return                                 # a 429: answered in REJECT_LATENCY_S
        request_s, idle_s = self.settings.timeouts_for(cur.agent.model)
        ex.watchdog = Watchdog(self.sim, attempt, min(idle_s, request_s), idle_s,
                               lambda a: self._timed_out(ex))
        stall_s = self.settings.stall_timeout_seconds
        if stall_s is not None and self.streams:
            ex.stall_watch = Watchdog(self.sim, attempt, None, stall_s, lambda a: self._send_keepalive(ex))
        self.sim.after(request_s, lambda: self._timed_out(ex))

    def _keepalive(self, ex: _Exchange) -> None:
        if ex.done:
            return
        self._send_keepalive(ex)
        self.sim.after(self.keepalive_s, lambda: self._keepalive(ex))

    def _send_keepalive(self, ex: _Exchange) -> None:
        """HeartbeatSent with keepalive, and the begun stream's silence so far (turns.py idle_s)."""
        if ex.done:
            return
        self.counts["keepalives"] += 1
        data: dict = {"turn_id": ex.turn_id, "keepalive": True}
        attempt, now = ex.attempt, self.sim.now
        if attempt is not None and attempt.chunk_seen(now):
            data["idle_s"] = math.ceil(max(0.0, now - attempt.silent_since(now)) * 1000) / 1000   # service.py
        self._after_report_delay(lambda: self._decide(ev.HEARTBEAT_SENT, data) if ex.turn_id in self.by_turn else None)

    def _first_chunk(self, ex: _Exchange) -> None:
        if ex.done:
            return
        ex.began = True
        self._after_report_delay(lambda: self._decide(ev.HEARTBEAT_SENT, {"turn_id": ex.turn_id})
                                 if ex.turn_id in self.by_turn else None)

    def _timed_out(self, ex: _Exchange) -> None:
        attempt = ex.attempt
        if ex.done or attempt is None or attempt.ended_at is not None:
            return
        self.counts["gateway_cuts"] += 1
        attempt.abandon(self.sim.now)              # the upstream request is closed
        if ex.watchdog is not None:
            ex.watchdog.cancel()
        call = cast(CallRecord, ex.cur.record).call
        self._after_report_delay(lambda: self._settle(ex, ev.ERROR, call.prompt_tokens, 0, attempt))

    def _upstream_answered(self, ex: _Exchange, attempt: Attempt) -> None:
        if ex.done:
            return
        if ex.watchdog is not None:
            ex.watchdog.cancel()
        call = cast(CallRecord, ex.cur.record).call
        if attempt.answer.admitted:
            self._after_report_delay(lambda: self._settle(ex, ev.OK, call.prompt_tokens, call.output_tokens, attempt))
        else:
            self._after_report_delay(lambda: self._settle(ex, ev.RATE_LIMITED, 0, 0, attempt))

    def _settle(self, ex: _Exchange, outcome: str, prompt: int, completion: int, attempt: Attempt) -> None:
        """completeTurn, then the answer to the SDK (proxy.py completes before it replies)."""
        if ex.done:
            return
        retry_after = attempt.answer.retry_after_s if outcome == ev.RATE_LIMITED else None
        self._decide(ev.COMPLETION_REPORTED, {
            "turn_id": ex.turn_id, "outcome": outcome, "prompt_tokens": prompt, "completion_tokens": completion,
            "retry_after_seconds": retry_after, "rate_limit_headers": attempt.answer.headers})
        if not ex.done:
            self._end(ex)   # TurnCompleted has ended it already, unless the turn was gone
        if outcome == ev.OK:
            self.call_done(ex.cur)
        else:
            self._sdk_error(ex, retry_after)

    def finish(self) -> None:
        super().finish()
        for key, value in self.counts.items():
            self.recorder.notes[f"agentrm_gateway_{key}"] = self.recorder.notes.get(f"agentrm_gateway_{key}", 0) + value

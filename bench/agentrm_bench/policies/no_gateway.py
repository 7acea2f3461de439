"""No gateway: every agent calls the provider directly through the openai Python SDK with its
defaults (openai/openai-python), as most fleets run today.

Nothing is shared between agents: no queue, no rate-limit bucket, no concurrency cap. The
pool's lane count does not bind (the provider's own rate limit is the only limit); each
attempt is recorded as a "connection" slot so hung and in-flight seconds are measured like
everyone else's.

What the SDK does, from src/openai/_base_client.py and src/openai/_constants.py (snapshot of
2026-08, commit e43b4224):
- DEFAULT_MAX_RETRIES = 2: the request loop `for retries_taken in range(max_retries + 1)`.
- DEFAULT_TIMEOUT = Timeout(timeout=600, connect=5.0): an httpx timeout is per operation, so
  600 s is the longest wait for the response to start and, on a stream, between two chunks;
  there is no total deadline.
- A timeout while the request is sent (`except timeout_exceptions()`) is retried while retries
  remain, else raised as APITimeoutError. With `stream=True` `_send_request` returns once the
  response has begun; the chunks are read later by `Stream.__stream__` (src/openai/_streaming.py)
  outside the retry loop, so a stream that stalls after its first chunk raises its read timeout
  to the caller and is never retried.
- A 429 is retried (`_should_retry`: status 429 -> True) unless its Retry-After exceeds
  MAX_RETRY_AFTER_DELAY = 120 s, which is not retried at all (#3555, 2026-07; before it the cap
  was 60 s and a longer value fell back to backoff).
- `_calculate_retry_timeout`: Retry-After (retry-after-ms, retry-after seconds or an HTTP date)
  when 0 < it <= 120 s is slept exactly; otherwise (no header, as on a timeout, or an unusable
  one) INITIAL_RETRY_DELAY 0.5 s * 2^retries_taken, capped at MAX_RETRY_DELAY 8 s, times a
  jitter factor 1 - 0.25 * random() -- 0.5 s then 1 s with the default two retries.
ASSUMPTION: a hang before the first chunk is a response that never begins (no status line), so
the SDK's read timeout fires inside the retry loop; this is the kinder reading (retried at once
by the SDK rather than surfaced to the agent). After the SDK gives up, the agent asks again
after AGENT_RETRY_S (policies/base.py), as for every policy.
"""
from __future__ import annotations

from typing import cast

from ..sim import Attempt, CallRecord, Watchdog
from .base import (
    SDK_DEFAULT_MAX_RETRIES,
    SDK_DEFAULT_TIMEOUT_S,
    SDK_MAX_RETRY_AFTER_DELAY_S,
    Context,
    Cursor,
    Policy,
    sdk_backoff,
)


def should_retry_429(retry_after: float | None) -> bool:
    """`_should_retry` for a 429: False only when Retry-After exceeds two minutes."""
    return not (retry_after is not None and retry_after > SDK_MAX_RETRY_AFTER_DELAY_S)


class NoGateway(Policy):
    name = "no-gateway"

    def __init__(self, ctx: Context, agents=None, variant=None):
        super().__init__(ctx, agents)
        self.notes = {"sdk_retries": 0, "timeouts_retried": 0, "timeouts_to_agent": 0,
                      "stalls_to_agent": 0, "rate_limits_to_agent": 0}

    def finish(self) -> None:
        for key, value in self.notes.items():
            self.recorder.notes[f"no_gateway_{key}"] = self.recorder.notes.get(f"no_gateway_{key}", 0) + value

    def call_ready(self, cur: Cursor) -> None:
        self._send(cur, 0)

    def _send(self, cur: Cursor, retries_taken: int) -> None:
        hold = self.recorder.hold(self.sim.now, "connection")
        box: dict = {}
        record = cast(CallRecord, cur.record)   # set when the agent made the call
        attempt = self.link.send(record, lambda a: self._answered(cur, a, hold, box, retries_taken), hold=hold)
        cur.attempt = attempt
        if attempt.hung:
            hold.hung_since = self.sim.now
        if attempt.answer.admitted:
            box["watchdog"] = Watchdog(self.sim, attempt, SDK_DEFAULT_TIMEOUT_S, SDK_DEFAULT_TIMEOUT_S,
                                       lambda a: self._timed_out(cur, a, hold, retries_taken))

    def _answered(self, cur: Cursor, attempt: Attempt, hold, box: dict, retries_taken: int) -> None:
        if "watchdog" in box:
            box["watchdog"].cancel()
        self.recorder.release(self.sim.now, hold)
        if attempt.answer.admitted:
            self.call_done(cur)
            return
        retry_after = attempt.answer.retry_after_s
        if retries_taken < SDK_DEFAULT_MAX_RETRIES and should_retry_429(retry_after):
            self._retry_later(cur, retries_taken, retry_after)
            return
        self.notes["rate_limits_to_agent"] += 1
        self.agent_retry(cur)               # RateLimitError raised to the agent

    def _timed_out(self, cur: Cursor, attempt: Attempt, hold, retries_taken: int) -> None:
        began = attempt.chunk_seen(self.sim.now)
        attempt.abandon(self.sim.now)
        self.recorder.release(self.sim.now, hold)
        if began:
            self.notes["stalls_to_agent"] += 1  # read timeout while iterating the Stream
            self.agent_retry(cur)
        elif retries_taken < SDK_DEFAULT_MAX_RETRIES:
            self.notes["timeouts_retried"] += 1
            self._retry_later(cur, retries_taken, None)
        else:
            self.notes["timeouts_to_agent"] += 1
            self.agent_retry(cur)           # APITimeoutError

    def _retry_later(self, cur: Cursor, retries_taken: int, retry_after: float | None) -> None:
        self.notes["sdk_retries"] += 1
        wait = sdk_backoff(self.rng, retry_after, retries_taken)
        self.sim.after(wait, lambda: self._send(cur, retries_taken + 1))

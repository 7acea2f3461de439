"""A central per-call gateway: the admission machinery `gateway-fifo`, `vtc` and `plas` share.

They differ only in the ORDER in which waiting calls are admitted (an `AdmissionOrder`);
everything else is this one gateway, so a difference between them is the queue order's doing:

- Lanes: at most ctx.lanes attempts in flight. A lane is taken when an attempt is sent and
  given back when it is answered or cut: never held through tool time, backoff or queueing.
- Shared RPM/TPM token buckets, configured with the provider's published limits, refilled
  continuously at limit/60 per second up to one minute's worth; an attempt reserves 1 request
  and prompt + max_tokens tokens before it is sent. This is the limiter of the openai
  cookbook's parallel processor (openai/openai-cookbook examples/api_request_parallel_processor.py:
  `available_token_capacity + max_tokens_per_minute * seconds_since_update / 60.0`, capped at
  `max_tokens_per_minute`; `num_tokens_consumed_from_request` = prompt tokens + max_tokens * n),
  and the limiter OpenAI documents for its own API (sim.Provider).
- Head of line: the call at the head of the order waits until a lane is free AND the buckets
  hold its reservation; nothing behind it passes (the cookbook keeps one `next_request` until
  capacity allows it).
- Refund on completion: when an answer's usage arrives, the token reservation is corrected to
  prompt + completion tokens. (The cookbook never refunds; refunding is what the provider
  does and is the kinder reading.) A 429 is refunded in full: it consumed nothing. An attempt
  that is cut keeps its full reservation, as the provider keeps the full charge of a request
  that never settles.
- A 429 also lowers both buckets to the x-ratelimit-remaining-requests / -tokens headers it
  carries (never raises them): the provider's own count is the better one, and it is what
  makes per-replica buckets notice each other. This replaces the cookbook's blunt global
  pause (`seconds_to_pause_after_rate_limit_error = 15`) with the provider's own numbers.
  Successful answers are not synced: their headers describe the moment the request was
  admitted, and applying them at the last byte would undercount the refill since.
- A first-chunk timeout applied as an httpx read timeout (httpx docs, "Timeouts": the read
  timeout is the longest wait for a chunk of data, so it applies before the first chunk and
  between chunks alike): `sim.Watchdog(first_chunk_s=T, idle_s=T)`. A timeout cuts the
  attempt (`attempt.abandon`).
- One retry after a 429 or a timeout. The wait before it is openai-python's
  `_calculate_retry_timeout` (src/openai/_base_client.py): retry-after when 0 < it <= 120 s,
  otherwise 0.5 s * 2^0 minus up to 25% jitter (`base.sdk_backoff`). The retried call then
  re-enters the order as a retry (for FIFO: ahead of new calls, see `FifoOrder`). If the retry
  fails too, the error reaches the agent (`agent_retry`), which asks again 1 s later as a new
  call with a fresh retry.

Every fault kind of sim.py is handled by these rules: a hang before the first chunk and an
outage's hung attempts are cut T after sending; a mid-stream stall is cut T after its last
chunk; a slow-but-alive call whose first chunk takes longer than T is cut (a live call cut),
and one that takes less is waited for; a 429 waits its retry-after.
"""
from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import cast

from ..sim import Attempt, CallRecord, SlotHold, Watchdog
from .base import Context, Cursor, Policy, sdk_backoff

# The gateway's own retries after a 429 or a timeout, before the error reaches the agent
# (the issue fixes "one retry that honours retry-after").
GATEWAY_RETRIES = 1
DEFAULT_TIMEOUT_S = 30.0
# A wake-up for a refill is set for when the bucket holds the reservation plus this share of
# its capacity: the provider's own bucket takes other float paths to the same level, and a
# gateway a few ulps above it at the refill instant would draw a 429 it should never see.
_SLACK = 1e-9


def parse_timeout(variant: str | None, policy: str = "gateway-fifo") -> float:
    """'30s' -> 30.0; None -> the default 30 s. Anything else is refused with a clear error."""
    if variant is None:
        return DEFAULT_TIMEOUT_S
    text = variant.strip()
    try:
        if not text.endswith("s"):
            raise ValueError
        seconds = float(text[:-1])
    except ValueError:
        raise ValueError(f"{policy}: the variant is the first-chunk timeout in seconds, like '30s'; "
                         f"got {variant!r}") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{policy}: the first-chunk timeout must be a positive number of seconds; got {variant!r}")
    return seconds


class TokenBucket:
    """One minute's capacity, refilled continuously at limit/60 per second (the cookbook's and
    OpenAI's limiter). Starts full, as the provider's does."""

    def __init__(self, per_minute: float):
        self.capacity = float(per_minute)
        self.rate = float(per_minute) / 60.0
        self.level = float(per_minute)
        self.updated_at = 0.0

    def _refill(self, now: float) -> None:
        if now > self.updated_at:
            self.level = min(self.capacity, self.level + (now - self.updated_at) * self.rate)
            self.updated_at = now

    def wait(self, now: float, amount: float) -> float:
        """Seconds until `amount` is available (a reservation larger than the capacity waits
        for a full bucket)."""
        self._refill(now)
        target = min(amount, self.capacity)
        if self.level >= target:
            return 0.0
        return (target + _SLACK * self.capacity - self.level) / self.rate

    def take(self, now: float, amount: float) -> None:
        self._refill(now)
        self.level -= amount

    def give(self, now: float, amount: float) -> None:
        self._refill(now)
        self.level = min(self.capacity, self.level + amount)

    def lower_to(self, now: float, value: float) -> None:
        self._refill(now)
        self.level = min(self.level, value)


@dataclass(eq=False)
class Waiting:
    """A call waiting in the gateway for admission."""
    cur: Cursor
    retries_done: int
    retry: bool
    enqueued_at: float
    seq: int
    extra: dict = field(default_factory=dict)   # an order's own bookkeeping

    @property
    def cost_tokens(self) -> int:
        call = cast(CallRecord, self.cur.record).call   # a waiting call has its record
        return call.prompt_tokens + call.max_output_tokens


@dataclass(eq=False)
class _Flight:
    """One attempt in flight, in its lane."""
    entry: Waiting
    hold: SlotHold
    attempt: Attempt | None = None
    watchdog: Watchdog | None = None
    done: bool = False


class AdmissionOrder:
    """Which waiting call is admitted next. The hooks let an order charge what it measures
    (VTC's token counters, PLAS's attained service); they default to nothing."""

    def push(self, entry: Waiting) -> None:
        raise NotImplementedError  # abstract: each order keeps its own queue

    def peek(self) -> Waiting | None:
        raise NotImplementedError  # abstract

    def pop(self, now: float) -> Waiting:
        raise NotImplementedError  # abstract

    def admitted(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        """The entry's attempt was sent."""

    def rejected(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        """The attempt was answered with a 429."""

    def succeeded(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        """The attempt's last byte arrived."""

    def cut(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        """The attempt timed out and was abandoned."""

    def run_done(self, cur: Cursor) -> None:
        """The agent's run settled."""


class FifoOrder(AdmissionOrder):
    """First come, first served, retries first: a call the gateway retries (after its
    retry-after or backoff) goes ahead of calls that have not been tried yet, in the order the
    retries became due. This is the openai cookbook's parallel processor
    (examples/api_request_parallel_processor.py: `queue_of_requests_to_retry` is drained before
    the next new request is read). Of the two simple designs (a retry re-acquiring an
    asyncio.Semaphore joins the BACK of its FIFO waiters, CPython Lib/asyncio/locks.py), this
    is the kinder one: the retried call has already waited its turn once."""

    def __init__(self) -> None:
        self.retries: deque[Waiting] = deque()
        self.fresh: deque[Waiting] = deque()

    def push(self, entry: Waiting) -> None:
        (self.retries if entry.retry else self.fresh).append(entry)

    def peek(self) -> Waiting | None:
        if self.retries:
            return self.retries[0]
        return self.fresh[0] if self.fresh else None

    def pop(self, now: float) -> Waiting:
        return self.retries.popleft() if self.retries else self.fresh.popleft()


class CentralGateway(Policy):
    """The shared gateway (module docstring); a subclass supplies `make_order`."""
    name = "central-gateway"

    def __init__(self, ctx: Context, agents=None, variant: str | None = None):
        super().__init__(ctx, agents)
        self.timeout_s = self.parse_variant(variant)
        self.free_lanes = max(1, int(ctx.lanes))
        self.requests = TokenBucket(ctx.provider.rpm)
        self.tokens = TokenBucket(ctx.provider.tpm)
        self.order = self.make_order()
        self._seq = itertools.count()
        self._wake_at: float | None = None
        self.counts = {"timeouts": 0, "retries": 0, "rate_limited": 0, "header_clamps": 0, "gave_up": 0}

    # -- what a subclass decides ----------------------------------------------------------
    def parse_variant(self, variant: str | None) -> float:
        if variant is not None:
            raise ValueError(f"{self.name} has no variants; got {variant!r}")
        return DEFAULT_TIMEOUT_S

    def make_order(self) -> AdmissionOrder:
        raise NotImplementedError  # abstract: the queue order is what distinguishes the models

    # -- admission ------------------------------------------------------------------------
    def call_ready(self, cur: Cursor) -> None:
        self._enqueue(cur, retries_done=0, retry=False)

    def _enqueue(self, cur: Cursor, retries_done: int, retry: bool) -> None:
        self.order.push(Waiting(cur, retries_done, retry, self.sim.now, next(self._seq)))
        self.pump()

    def pump(self) -> None:
        """Admit from the head while a lane is free and the buckets hold the head's
        reservation; otherwise arm one timer for when they will."""
        now = self.sim.now
        while self.free_lanes > 0:
            entry = self.order.peek()
            if entry is None:
                return
            wait = max(self.requests.wait(now, 1.0), self.tokens.wait(now, entry.cost_tokens))
            if wait > 0.0:
                self._wake(now + wait)
                return
            self.order.pop(now)
            self._send(entry)

    def _wake(self, when: float) -> None:
        if self._wake_at is not None and self.sim.now <= self._wake_at <= when:
            return  # an earlier (or the same) wake-up is already armed; it re-checks
        self._wake_at = when
        self.sim.at(when, lambda: self._woken(when))

    def _woken(self, when: float) -> None:
        if self._wake_at != when:
            return  # superseded by an earlier timer
        self._wake_at = None
        self.pump()

    def _send(self, entry: Waiting) -> None:
        now, cur = self.sim.now, entry.cur
        self.free_lanes -= 1
        self.requests.take(now, 1.0)
        self.tokens.take(now, entry.cost_tokens)
        flight = _Flight(entry, self.recorder.hold(now, "lane"))
        record = cast(CallRecord, cur.record)   # set when the agent made the call
        attempt = self.link.send(record, lambda a: self._answered(flight, a), hold=flight.hold)
        flight.attempt = attempt
        cur.attempt = attempt
        if attempt.hung:
            flight.hold.hung_since = attempt.hung_from
        self.order.admitted(entry, attempt, now)
        # httpx read timeout: T before the first chunk and T between chunks.
        flight.watchdog = Watchdog(self.sim, attempt, self.timeout_s, self.timeout_s,
                                   lambda a: self._timed_out(flight, a))

    def _free_lane(self, flight: _Flight) -> None:
        flight.done = True
        if flight.watchdog is not None:
            flight.watchdog.cancel()
        self.recorder.release(self.sim.now, flight.hold)
        self.free_lanes += 1

    # -- outcomes -------------------------------------------------------------------------
    def _answered(self, flight: _Flight, attempt: Attempt) -> None:
        if flight.done:
            return
        now, entry = self.sim.now, flight.entry
        call = cast(CallRecord, entry.cur.record).call
        self._free_lane(flight)
        if attempt.answer.admitted:
            # The usage in the answer corrects the reservation to what was really used.
            self.tokens.give(now, call.max_output_tokens - call.output_tokens)
            self.order.succeeded(entry, attempt, now)
            self.call_done(entry.cur)
        else:
            self.counts["rate_limited"] += 1
            self.requests.give(now, 1.0)
            self.tokens.give(now, entry.cost_tokens)
            self._clamp_to_headers(attempt.answer.headers)
            self.order.rejected(entry, attempt, now)
            self._retry_or_give_up(entry, attempt.answer.retry_after_s)
        self.pump()

    def _clamp_to_headers(self, headers: dict) -> None:
        now = self.sim.now
        try:
            remaining_requests = float(headers["x-ratelimit-remaining-requests"])
            remaining_tokens = float(headers["x-ratelimit-remaining-tokens"])
        except (KeyError, ValueError):
            return  # no usable headers: keep the local count
        self.counts["header_clamps"] += 1
        self.requests.lower_to(now, remaining_requests)
        self.tokens.lower_to(now, remaining_tokens)

    def _timed_out(self, flight: _Flight, attempt: Attempt) -> None:
        if flight.done:
            return
        now = self.sim.now
        self.counts["timeouts"] += 1
        attempt.abandon(now)
        self._free_lane(flight)
        self.order.cut(flight.entry, attempt, now)
        self._retry_or_give_up(flight.entry, None)
        self.pump()

    def _retry_or_give_up(self, entry: Waiting, retry_after: float | None) -> None:
        cur = entry.cur
        if entry.retries_done < GATEWAY_RETRIES:
            self.counts["retries"] += 1
            delay = sdk_backoff(self.rng, retry_after, entry.retries_done)
            self.sim.after(delay, lambda: self._enqueue(cur, entry.retries_done + 1, retry=True))
            return
        self.counts["gave_up"] += 1
        self.agent_retry(cur)   # the error reaches the agent; it asks again as a new call

    def run_done(self, cur: Cursor) -> None:
        self.order.run_done(cur)

    def finish(self) -> None:
        super().finish()
        for key, value in self.counts.items():
            self.recorder.notes[f"gateway_{key}"] = self.recorder.notes.get(f"gateway_{key}", 0) + value

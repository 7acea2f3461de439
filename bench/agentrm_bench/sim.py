"""Discrete-event simulation: a virtual clock, a simulated provider with a true rate limit,
and the recorder every policy reports into.

Nothing here reads the wall clock: a 10-minute workload runs in a second or two, and the same
seed gives the same numbers.
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .workload import CallSpec

# -- the virtual clock ------------------------------------------------------------------


class Simulator:
    """A heap of (time, order, callback). Ties run in scheduling order, which keeps runs
    deterministic without relying on callback identity."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def at(self, when: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (max(when, self.now), next(self._order), callback))

    def after(self, delay: float, callback: Callable[[], None]) -> None:
        self.at(self.now + max(0.0, delay), callback)

    def run(self, until: float) -> None:
        while self._heap and self._heap[0][0] <= until:
            when, _, callback = heapq.heappop(self._heap)
            self.now = when
            callback()
        self.now = until


# -- the provider -------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    """OpenAI's x-ratelimit-reset-* form: '120ms', '1.5s', '2m3s'."""
    if seconds < 1.0:
        return f"{max(0, int(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60.0)
    return f"{int(minutes)}m{rest:.1f}s" if minutes else f"{rest:.1f}s"


@dataclass
class ProviderAnswer:
    admitted: bool
    headers: dict
    retry_after_s: float | None = None


@dataclass
class _Bucket:
    limit_per_minute: float
    level: float
    updated_at: float = 0.0

    def refill(self, now: float) -> None:
        if now > self.updated_at:
            self.level = min(self.limit_per_minute,
                             self.level + (now - self.updated_at) * self.limit_per_minute / 60.0)
            self.updated_at = now

    def seconds_until(self, amount: float) -> float:
        return max(0.0, (amount - self.level) * 60.0 / self.limit_per_minute)

    def seconds_until_full(self) -> float:
        return self.seconds_until(self.limit_per_minute)


class Provider:
    """An LLM API with a true RPM and TPM limit, as OpenAI documents its limiter: two buckets
    that replenish continuously up to one minute's worth. A request is admitted only if one
    request and (prompt + max_tokens) tokens are available; otherwise it gets 429 with
    `retry-after` (whole seconds until it would fit) and x-ratelimit-* headers. When a call
    settles, the token charge is corrected to real usage (prompt + completion); a call that
    never settles keeps its full charge. A 429 costs nothing here, which is kinder to
    retry-heavy clients than OpenAI's note that failed requests count against the limit.

    `admitted_log` keeps every admission (time, tokens charged) so tests can check that the
    provider never admits above its limit."""

    REJECT_LATENCY_S = 0.2

    def __init__(self, rpm: int, tpm: int, slowdown_at_s: float | None = None, slowdown_factor: float = 1.0):
        self.rpm, self.tpm = rpm, tpm
        self.slowdown_at_s, self.slowdown_factor = slowdown_at_s, slowdown_factor
        self.requests = _Bucket(rpm, float(rpm))
        self.tokens = _Bucket(tpm, float(tpm))
        self.admitted_log: list[tuple[float, int]] = []
        self.rejections: list[float] = []

    def _headers(self) -> dict:
        return {
            "x-ratelimit-limit-requests": str(self.rpm),
            "x-ratelimit-limit-tokens": str(self.tpm),
            "x-ratelimit-remaining-requests": str(max(0, math.floor(self.requests.level))),
            "x-ratelimit-remaining-tokens": str(max(0, math.floor(self.tokens.level))),
            "x-ratelimit-reset-requests": _duration(self.requests.seconds_until_full()),
            "x-ratelimit-reset-tokens": _duration(self.tokens.seconds_until_full()),
        }

    def submit(self, now: float, prompt_tokens: int, max_output_tokens: int) -> ProviderAnswer:
        self.requests.refill(now)
        self.tokens.refill(now)
        charge = prompt_tokens + max_output_tokens
        if self.requests.level >= 1.0 and self.tokens.level >= charge:
            self.requests.level -= 1.0
            self.tokens.level -= charge
            self.admitted_log.append((now, charge))
            return ProviderAnswer(True, self._headers())
        wait = max(self.requests.seconds_until(1.0), self.tokens.seconds_until(charge))
        retry_after = float(max(1, math.ceil(wait)))
        headers = self._headers()
        headers["retry-after"] = str(int(retry_after))
        self.rejections.append(now)
        return ProviderAnswer(False, headers, retry_after)

    def extra_first_chunk_s(self, now: float, first_chunk_s: float) -> float:
        """How much later than its trace says a call sent at `now` starts (a slowdown)."""
        if self.slowdown_at_s is None or now < self.slowdown_at_s:
            return 0.0
        return first_chunk_s * (self.slowdown_factor - 1.0)

    def settle(self, now: float, charged: int, used: int) -> None:
        self.tokens.refill(now)
        self.tokens.level = min(self.tpm, self.tokens.level + charged - used)


# -- what happens to a call -----------------------------------------------------------------


@dataclass
class CallRecord:
    """One logical call of the trace, across all its attempts."""
    call: CallSpec
    agent_id: str
    priority_class: str
    requested_at: float
    first_sent_at: float | None = None
    completed_at: float | None = None
    attempts: int = 0
    rate_limited: int = 0


@dataclass
class SlotHold:
    """A concurrency slot (lane, semaphore permit, worker thread) held by some work."""
    policy_slot: str
    started_at: float
    ended_at: float | None = None
    productive_s: float = 0.0     # seconds of successful provider calls inside the hold
    hung_since: float | None = None  # when the hold's call hung (kept after release, for plots)


@dataclass
class Recorder:
    """Everything the metrics need, gathered while a policy runs."""
    duration_s: float
    calls: list[CallRecord] = field(default_factory=list)
    holds: list[SlotHold] = field(default_factory=list)
    rate_limited_at: list[float] = field(default_factory=list)
    provider_attempts: int = 0
    notes: dict = field(default_factory=dict)

    def request(self, now: float, call: CallSpec, agent_id: str, priority_class: str) -> CallRecord:
        record = CallRecord(call, agent_id, priority_class, now)
        self.calls.append(record)
        return record

    def hold(self, now: float, slot: str) -> SlotHold:
        hold = SlotHold(slot, now)
        self.holds.append(hold)
        return hold

    def release(self, now: float, hold: SlotHold) -> None:
        if hold.ended_at is None:
            hold.ended_at = now


class ProviderLink:
    """Sends attempts of calls to the provider on behalf of a policy, and calls back with
    the answer. A hung attempt is admitted and then never answered: the callback never
    fires, exactly as a promise that never settles; a policy that wants a timeout or a
    lease must arrange it itself. Only the first attempt of a hanging call hangs."""

    def __init__(self, sim: Simulator, provider: Provider, recorder: Recorder):
        self.sim, self.provider, self.recorder = sim, provider, recorder

    def send(self, record: CallRecord, on_answer: Callable[["Attempt"], None]) -> "Attempt":
        now = self.sim.now
        record.attempts += 1
        self.recorder.provider_attempts += 1
        if record.first_sent_at is None:
            record.first_sent_at = now
        call = record.call
        answer = self.provider.submit(now, call.prompt_tokens, call.max_output_tokens)
        attempt = Attempt(record, now, answer)
        if not answer.admitted:
            record.rate_limited += 1
            self.recorder.rate_limited_at.append(now)
            self.sim.after(Provider.REJECT_LATENCY_S, lambda: attempt.finish(now + Provider.REJECT_LATENCY_S, on_answer))
            return attempt
        if call.hangs and record.attempts == 1:
            attempt.hung = True
            return attempt
        charged = call.prompt_tokens + call.max_output_tokens
        used = call.prompt_tokens + call.output_tokens
        extra = self.provider.extra_first_chunk_s(now, call.first_chunk_s)
        attempt.first_chunk_s = call.first_chunk_s + extra

        def answered() -> None:
            if attempt.abandoned:
                return
            self.provider.settle(self.sim.now, charged, used)
            attempt.finish(self.sim.now, on_answer)

        self.sim.after(call.provider_latency_s + extra, answered)
        return attempt


@dataclass
class Attempt:
    record: CallRecord
    sent_at: float
    answer: ProviderAnswer
    hung: bool = False
    abandoned: bool = False       # the client gave up on it (timeout, reap): its answer is ignored
    first_chunk_s: float = 0.0    # after sending, when the first chunk arrives (admitted, not hung)
    finished_at: float | None = None

    @property
    def ok(self) -> bool:
        return self.answer.admitted and self.finished_at is not None

    def finish(self, now: float, on_answer: Callable[["Attempt"], None]) -> None:
        if self.abandoned:
            return
        self.finished_at = now
        if self.answer.admitted:
            self.record.completed_at = now
        on_answer(self)

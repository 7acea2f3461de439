"""Discrete-event simulation: a virtual clock, a simulated provider with a true rate limit and
faults, and the recorder every policy reports into.

Nothing here reads the wall clock: a 30-minute workload runs in seconds, and the same seed
gives the same numbers.

The provider streams. An admitted attempt has a first chunk (after its time to first token)
and then chunks until its last byte, unless it faults:
- `hang`: admitted, and then nothing, ever (no first chunk, no answer);
- `stall`: the first chunk comes and the stream runs for a while, then stops for ever;
- `slow`: alive but slow: its first chunk takes far longer than usual, then it completes;
- an outage window of the provider: every attempt sent inside it hangs, retries included.
A fault of the trace belongs to the call's first attempt; a retry of it is answered (unless it
is sent into an outage), so every policy can finish the same work. A trace with persistent
faults (workload.py) also names the faults of a call's retries (`CallSpec.retry_faults`) and
the windows in which a model, or the provider, is slow (`SlowWindows`): both are fixed by the
trace, so every policy meets the same slowness on its n-th attempt of a call, or on any
attempt it sends into a slow window.

A policy never sees the future: it learns of chunks and answers through callbacks
(`on_first_chunk`, `on_answer`), and an idle watchdog (`Watchdog`) only asks what a client
could know at that moment (`Attempt.silent_since`).
"""
from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from .workload import CallSpec, Trace

# A slot held at the end by an attempt hung at least this long is a zombie.
ZOMBIE_AFTER_S = 60.0

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


@dataclass(frozen=True)
class Saturation:
    """A self-hosted-like provider (vLLM-style continuous batching) whose speed depends on how
    many requests it serves at once.

    Aggregate decode throughput follows X(n) = x_max * n / (n + k) tokens/s for n running
    requests, each getting X(n)/n; at most `max_running` run at once (the KV cache's room),
    the rest wait in the server's queue, so past the knee throughput plateaus and only
    latency grows. Time to first token grows with the running batch: ttft(n) = ttft_base_s
    + ttft_quad_s * n^2, plus prefill. Fit (least squares by hand, 5 points) to a published
    vLLM concurrency sweep of Mistral-7B-Instruct on one RTX 4090, 256 in / 128 out:
    output tok/s 210, 377, 644, 975, 1190 and mean TTFT 63, 79, 155, 362, 667 ms at
    concurrency 4, 8, 16, 32, 48 (mushfiqrahman.dev, "latency-throughput knee", vLLM
    OpenAI server, `vllm bench serve`). The fit gives x_max = 2068 tok/s, k = 35.4
    (X(4) = 210, X(16) = 644, X(32) = 982, X(48) = 1190) and ttft ~ 55 ms + 0.27 ms * n^2.
    max_running = 48: the sweep stops there; past it we assume the server queues.
    The per-request rate is recomputed whenever a request starts or ends (processor sharing)."""
    x_max_tokens_per_s: float = 2068.0
    k: float = 35.4
    max_running: int = 48
    ttft_base_s: float = 0.055
    ttft_quad_s: float = 0.00027
    prefill_tokens_per_s: float = 20_000.0   # the workload's prefill speed (a live check compresses it)

    def per_request_rate(self, running: int) -> float:
        return self.x_max_tokens_per_s / (max(1, running) + self.k)

    def ttft(self, running: int) -> float:
        return self.ttft_base_s + self.ttft_quad_s * running * running

    def plateau_tokens_per_s(self) -> float:
        n = self.max_running
        return self.x_max_tokens_per_s * n / (n + self.k)


class Provider:
    """An LLM API with a true RPM and TPM limit, as OpenAI documents its limiter: two buckets
    that replenish continuously up to one minute's worth. A request is admitted only if one
    request and (prompt + max_tokens) tokens are available; otherwise it gets 429 with
    `retry-after` (whole seconds until it would fit) and x-ratelimit-* headers. When a call
    settles, the token charge is corrected to real usage (prompt + completion); a call that
    never settles keeps its full charge. A 429 costs nothing here, which is kinder to
    retry-heavy clients than OpenAI's note that failed requests count against the limit.

    `admitted_log` keeps every admission (time, tokens charged) so tests and the
    over-admission metric can check what the provider was asked to take."""

    REJECT_LATENCY_S = 0.2

    def __init__(self, rpm: int, tpm: int, slowdown_at_s: float | None = None, slowdown_factor: float = 1.0,
                 outages: tuple[tuple[float, float], ...] = (), saturation: Saturation | None = None,
                 max_concurrent: int | None = None):
        self.rpm, self.tpm = rpm, tpm
        # A concurrency limit (a provisioned deployment's, a provider's per-key cap): an
        # attempt beyond it is refused with 429 and retry-after 1, as a rate limit is. An
        # attempt counts until it is answered or its client closes it (a hung one holds on).
        self.max_concurrent = max_concurrent
        self.inflight = 0
        self.slowdown_at_s, self.slowdown_factor = slowdown_at_s, slowdown_factor
        self.outages = tuple(outages)
        self.saturation = saturation
        self.requests = _Bucket(rpm, float(rpm))
        self.tokens = _Bucket(tpm, float(tpm))
        self.admitted_log: list[tuple[float, int]] = []
        self.rejections: list[float] = []

    def in_outage(self, now: float) -> bool:
        return any(start <= now < end for start, end in self.outages)

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
        self._advance(now)
        charge = prompt_tokens + max_output_tokens
        if self.max_concurrent is not None and self.inflight >= self.max_concurrent:
            headers = self._headers()
            headers["retry-after"] = "1"
            self.rejections.append(now)
            return ProviderAnswer(False, headers, 1.0)
        if self._fits(charge):
            self._take(now, charge)
            self.admitted_log.append((now, charge))
            self.inflight += 1
            return ProviderAnswer(True, self._headers())
        retry_after = float(max(1, math.ceil(self._wait(charge))))
        headers = self._headers()
        headers["retry-after"] = str(int(retry_after))
        self.rejections.append(now)
        return ProviderAnswer(False, headers, retry_after)

    # -- the limiter's shape: two buckets here, windows in the subclasses below ------------
    def _advance(self, now: float) -> None:
        self.requests.refill(now)
        self.tokens.refill(now)

    def _fits(self, charge: int) -> bool:
        return self.requests.level >= 1.0 and self.tokens.level >= charge

    def _take(self, now: float, charge: int) -> None:
        self.requests.level -= 1.0
        self.tokens.level -= charge

    def _wait(self, charge: int) -> float:
        return max(self.requests.seconds_until(1.0), self.tokens.seconds_until(charge))

    def extra_first_chunk_s(self, now: float, first_chunk_s: float) -> float:
        """How much later than its trace says a call sent at `now` starts (a slowdown)."""
        if self.slowdown_at_s is None or now < self.slowdown_at_s:
            return 0.0
        return first_chunk_s * (self.slowdown_factor - 1.0)

    def settle(self, now: float, charged: int, used: int) -> None:
        self.tokens.refill(now)
        self.tokens.level = min(self.tpm, self.tokens.level + charged - used)


class SlidingWindowProvider(Provider):
    """A provider that enforces its limits over a strict sliding window of `window_s`: a
    request is admitted only if the requests (and tokens) it admitted in the last window,
    plus this one, fit rpm x W/60 (tpm x W/60). `x-ratelimit-remaining-*` is what is left of
    the window; `x-ratelimit-reset-*` is when the next one frees up (the oldest admission
    leaves). A settled call's charge is corrected to its real usage, as the bucket's is."""

    def __init__(self, rpm: int, tpm: int, window_s: float = 60.0, **kw):
        super().__init__(rpm, tpm, **kw)
        self.window_s = window_s
        self.cap_requests, self.cap_tokens = rpm * window_s / 60.0, tpm * window_s / 60.0
        self.window: list[list[float]] = []   # [at, charge, settled], oldest first
        self.now = 0.0

    def _advance(self, now: float) -> None:
        self.now = max(self.now, now)
        while self.window and self.window[0][0] <= self.now - self.window_s:
            self.window.pop(0)

    def _used(self) -> tuple[int, float]:
        return len(self.window), sum(entry[1] for entry in self.window)

    def _fits(self, charge: int) -> bool:
        requests, tokens = self._used()
        return requests + 1 <= self.cap_requests and tokens + charge <= self.cap_tokens

    def _take(self, now: float, charge: int) -> None:
        self.window.append([now, float(charge), 0.0])

    def _wait(self, charge: int) -> float:
        requests, tokens = self._used()
        for at, taken, _settled in self.window:
            requests, tokens = requests - 1, tokens - taken
            if requests + 1 <= self.cap_requests and tokens + charge <= self.cap_tokens:
                return at + self.window_s - self.now
        return self.window_s

    def _headers(self) -> dict:
        requests, tokens = self._used()
        oldest = (self.window[0][0] + self.window_s - self.now) if self.window else 0.0
        return {
            "x-ratelimit-limit-requests": str(self.rpm),
            "x-ratelimit-limit-tokens": str(self.tpm),
            "x-ratelimit-remaining-requests": str(max(0, math.floor(self.cap_requests - requests))),
            "x-ratelimit-remaining-tokens": str(max(0, math.floor(self.cap_tokens - tokens))),
            "x-ratelimit-reset-requests": _duration(max(0.0, oldest)),
            "x-ratelimit-reset-tokens": _duration(max(0.0, oldest)),
        }

    def settle(self, now: float, charged: int, used: int) -> None:
        self._advance(now)
        for entry in self.window:   # the oldest admission of that charge not yet settled
            if entry[1] == charged and not entry[2]:
                entry[1], entry[2] = float(used), 1.0
                break


class FixedWindowProvider(Provider):
    """A provider that counts its limits in fixed windows of `window_s` (Azure OpenAI counts
    its RPM in 10-second slices: rpm x 10/60 per slice), starting at `phase_s`. The count
    starts again at each window's start; `x-ratelimit-reset-*` is when the current one ends."""

    def __init__(self, rpm: int, tpm: int, window_s: float = 60.0, phase_s: float = 0.0, **kw):
        super().__init__(rpm, tpm, **kw)
        self.window_s, self.phase_s = window_s, phase_s
        self.cap_requests, self.cap_tokens = rpm * window_s / 60.0, tpm * window_s / 60.0
        self.index: int | None = None
        self.count, self.charged = 0, 0.0
        self.unsettled: list[int] = []   # the charges admitted in the current window, not yet settled
        self.now = 0.0

    def _advance(self, now: float) -> None:
        self.now = max(self.now, now)
        index = math.floor((self.now - self.phase_s) / self.window_s)
        if index != self.index:
            self.index, self.count, self.charged, self.unsettled = index, 0, 0.0, []

    def _fits(self, charge: int) -> bool:
        return self.count + 1 <= self.cap_requests and self.charged + charge <= self.cap_tokens

    def _take(self, now: float, charge: int) -> None:
        self.count += 1
        self.charged += charge
        self.unsettled.append(charge)

    def _ends_in(self) -> float:
        index = self.index if self.index is not None else 0
        return self.phase_s + (index + 1) * self.window_s - self.now

    def _wait(self, charge: int) -> float:
        return self._ends_in()

    def _headers(self) -> dict:
        return {
            "x-ratelimit-limit-requests": str(self.rpm),
            "x-ratelimit-limit-tokens": str(self.tpm),
            "x-ratelimit-remaining-requests": str(max(0, math.floor(self.cap_requests - self.count))),
            "x-ratelimit-remaining-tokens": str(max(0, math.floor(self.cap_tokens - self.charged))),
            "x-ratelimit-reset-requests": _duration(max(0.0, self._ends_in())),
            "x-ratelimit-reset-tokens": _duration(max(0.0, self._ends_in())),
        }

    def settle(self, now: float, charged: int, used: int) -> None:
        self._advance(now)
        if charged in self.unsettled:   # a call of an earlier window counts no more anyway
            self.unsettled.remove(charged)
            self.charged = max(0.0, self.charged - (charged - used))


LIMITERS = {"token-bucket": Provider, "sliding-window": SlidingWindowProvider, "fixed-window": FixedWindowProvider}


def provider_of(limiter: str, rpm: int, tpm: int, window_s: float = 60.0, **kw) -> Provider:
    """A provider whose limiter has the shape `limiter` (the pool setting's names)."""
    if limiter == "token-bucket":
        return Provider(rpm, tpm, **kw)
    return LIMITERS[limiter](rpm, tpm, window_s=window_s, **kw)


# -- what happens to a call -----------------------------------------------------------------


@dataclass
class CallRecord:
    """One logical call of the trace, across all its attempts."""
    call: CallSpec
    agent_id: str
    priority_class: str
    requested_at: float
    run_key: str = ""
    first_sent_at: float | None = None
    answered_sent_at: float | None = None   # when the attempt that answered was sent
    answered_at: float | None = None        # its last byte, at the provider (AIOS delivers it later)
    completed_at: float | None = None
    attempts: int = 0
    admitted_attempts: int = 0
    rate_limited: int = 0
    failed: int = 0               # times its error reached the agent after the policy's own retries


@dataclass
class RunRecord:
    """One agent run (a chat answer, a batch job, a cron firing): from its first call's
    request to its last call's answer."""
    run_key: str
    agent_id: str
    priority_class: str
    calls: int
    started_at: float
    completed_at: float | None = None


@dataclass
class SlotHold:
    """A concurrency slot (lane, semaphore permit, worker thread) held by some work."""
    policy_slot: str
    started_at: float
    ended_at: float | None = None
    productive_s: float = 0.0     # seconds of successful provider calls inside the hold
    inflight_s: float = 0.0       # seconds with a provider attempt in flight (any outcome)
    hung_s: float = 0.0           # seconds with an attempt in flight that will never answer
    hung_since: float | None = None  # when the hold's call hung (kept after release, for plots)


def held_until(hold: SlotHold, now: float) -> float:
    """Up to when an attempt in `hold` has held the slot, at `now`: a slot released while its
    attempt stays open (the caller let go of it, or a suspect's lane was freed while its call
    goes on) holds it no longer, so nothing after the release is charged to the slot."""
    return now if hold.ended_at is None else min(now, hold.ended_at)


@dataclass
class Recorder:
    """Everything the metrics need, gathered while a policy runs."""
    duration_s: float
    calls: list[CallRecord] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)
    holds: list[SlotHold] = field(default_factory=list)
    rate_limited_at: list[float] = field(default_factory=list)
    sent_log: list[tuple[float, int]] = field(default_factory=list)  # (time, prompt + max output) per attempt
    provider_attempts: int = 0
    live_calls_cut: int = 0
    hung_attempts_cut: int = 0
    zombies: int = 0
    stuck_agents: int = 0         # agents the policy stopped serving for good (AgentRM quarantine)
    quarantined_agents: int = 0   # agents AgentRM's core quarantined (AgentQuarantined)
    notes: dict = field(default_factory=dict)
    open_attempts: dict[int, Attempt] = field(default_factory=dict)  # by id()

    def request(self, now: float, call: CallSpec, agent_id: str, priority_class: str,
                run_key: str = "") -> CallRecord:
        record = CallRecord(call, agent_id, priority_class, now, run_key)
        self.calls.append(record)
        return record

    def run_started(self, now: float, run_key: str, agent_id: str, priority_class: str, calls: int) -> RunRecord:
        run = RunRecord(run_key, agent_id, priority_class, calls, now)
        self.runs.append(run)
        return run

    def hold(self, now: float, slot: str) -> SlotHold:
        hold = SlotHold(slot, now)
        self.holds.append(hold)
        return hold

    def release(self, now: float, hold: SlotHold | None) -> None:
        if hold is not None and hold.ended_at is None:
            hold.ended_at = now

    def close(self, end: float) -> None:
        """The simulated period is over: attempts still open are credited to their slots up
        to the end, or to the slot's release if it came first (a success still streaming has
        been productive since it was sent; a hung one has been hung), once."""
        for attempt in self.open_attempts.values():
            hold = attempt.hold
            if hold is None or attempt.ended_at is not None:
                continue
            stop = held_until(hold, end)
            if hold.ended_at is None and attempt.hung_from is not None and end - attempt.hung_from >= ZOMBIE_AFTER_S:
                self.zombies += 1   # a slot held by a call hung long enough that nothing frees it
            hold.inflight_s += max(0.0, stop - attempt.sent_at)
            if attempt.hung_from is not None:
                hold.hung_s += max(0.0, stop - attempt.hung_from)
            elif attempt.answer.admitted and attempt.will_answer:
                hold.productive_s += max(0.0, stop - attempt.sent_at)
        self.open_attempts = {}

    def failed(self, record: CallRecord) -> None:
        """The policy gave up on an attempt chain: its error reached the agent."""
        record.failed += 1


class SlowWindows:
    """The trace's slow windows (workload.slow_windows), asked at each admitted attempt: an
    attempt sent to its agent's model inside one is slow, by an extra delay drawn from a
    stream of the (call, attempt) alone, so any policy sending that attempt then meets the
    same delay."""

    def __init__(self, trace: Trace):
        self.seed = trace.params.seed
        self.extra_s = trace.params.slow_extra_s
        self.model_of = {a.agent_id: a.model for a in trace.agents}
        self._starts: dict[str, list[float]] = {}
        self._ends: dict[str, list[float]] = {}
        for w in sorted(trace.slow_windows, key=lambda w: (w.model, w.start_s)):
            self._starts.setdefault(w.model, []).append(w.start_s)
            self._ends.setdefault(w.model, []).append(w.end_s)

    @classmethod
    def of(cls, trace: Trace) -> SlowWindows | None:
        return cls(trace) if trace.slow_windows else None

    def slow(self, now: float, agent_id: str) -> bool:
        for key in (self.model_of.get(agent_id, ""), "*"):
            starts = self._starts.get(key)
            if starts:
                i = bisect.bisect_right(starts, now) - 1
                if i >= 0 and now < self._ends[key][i]:
                    return True
        return False

    def extra(self, call_id: str, admitted: int) -> float:
        rng = random.Random(f"{self.seed}/slow-window/{call_id}/{admitted}")
        return round(rng.uniform(*self.extra_s), 4)


class PrefixCache:
    """A provider's prefix (KV) cache over the trace's prefix blocks (`CallSpec.prefix_blocks`,
    one hash per `block_tokens` tokens of the prompt, as the Mooncake traces give them), with
    LRU eviction at `capacity_blocks`. An admitted attempt skips the prefill of its longest
    prefix of cached blocks (`cached_tokens`); its blocks enter the cache when its prefill is
    done (its first chunk), since only then does the provider hold their KV. The cache sees
    attempts in the order a policy sends them, so a policy's order decides its hits."""

    def __init__(self, capacity_blocks: int, block_tokens: int):
        self.capacity, self.block_tokens = capacity_blocks, block_tokens
        self._blocks: OrderedDict[int, None] = OrderedDict()

    @classmethod
    def of(cls, trace: Trace) -> PrefixCache | None:
        p = trace.params
        return cls(p.prefix_cache_blocks, p.prefix_block_tokens) if p.prefix_cache_blocks > 0 else None

    def cached_tokens(self, call: CallSpec) -> int:
        """The prompt tokens of the call's longest cached prefix (those blocks become the most
        recently used)."""
        hits = 0
        for block in call.prefix_blocks:
            if block not in self._blocks:
                break
            self._blocks.move_to_end(block)
            hits += 1
        return min(call.prompt_tokens, hits * self.block_tokens)

    def saving_s(self, call: CallSpec, cached: int) -> float:
        """The prefill time the cached tokens spare: that share of the call's prefill."""
        return call.prefill_s * cached / call.prompt_tokens if call.prompt_tokens > 0 else 0.0

    def insert(self, call: CallSpec) -> None:
        for block in call.prefix_blocks:
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)


class ProviderLink:
    """Sends attempts of calls to the provider on behalf of a policy, and calls back with
    the answer. A hung attempt is admitted and then never answered: the callback never
    fires, exactly as a promise that never settles; a policy that wants a timeout or a
    lease must arrange it itself (see `Watchdog`).

    `hold` is the slot the attempt runs in: its in-flight, productive and hung seconds are
    credited to it, so lane waste means the same for every policy."""

    def __init__(self, sim: Simulator, provider: Provider, recorder: Recorder,
                 slow_windows: SlowWindows | None = None, prefix_cache: PrefixCache | None = None):
        self.sim, self.provider, self.recorder = sim, provider, recorder
        self.slow_windows = slow_windows
        self.prefix_cache = prefix_cache
        self._engine = _SaturatedEngine(sim, provider.saturation) if provider.saturation else None

    def send(self, record: CallRecord, on_answer: Callable[[Attempt], None], hold: SlotHold | None = None,
             on_first_chunk: Callable[[Attempt], None] | None = None) -> Attempt:
        now = self.sim.now
        record.attempts += 1
        self.recorder.provider_attempts += 1
        if record.first_sent_at is None:
            record.first_sent_at = now
        call = record.call
        self.recorder.sent_log.append((now, call.prompt_tokens + call.max_output_tokens))
        answer = self.provider.submit(now, call.prompt_tokens, call.max_output_tokens)
        attempt = Attempt(record, now, answer, hold=hold, recorder=self.recorder, link=self)
        self.recorder.open_attempts[id(attempt)] = attempt
        if not answer.admitted:
            record.rate_limited += 1
            self.recorder.rate_limited_at.append(now)
            attempt.will_answer = True
            self.sim.after(Provider.REJECT_LATENCY_S, lambda: attempt.finish(self.sim.now, on_answer))
            return attempt
        # The trace's fault belongs to the first attempt the provider admits (a 429 before it
        # does not use it up), so every policy meets every fault; a persistent one also to
        # the retries the trace names, and a slow window to every attempt sent inside it.
        record.admitted_attempts += 1
        fault, size = call.attempt_fault(record.admitted_attempts)
        if fault is None and self.slow_windows is not None and self.slow_windows.slow(now, record.agent_id):
            fault, size = "slow", self.slow_windows.extra(call.call_id, record.admitted_attempts)
        if self.provider.in_outage(now):
            fault = "hang"
        if fault == "hang":
            attempt.will_answer = False
            attempt.hung_from = now
            return attempt
        charged = call.prompt_tokens + call.max_output_tokens
        used = call.prompt_tokens + call.output_tokens
        saved = 0.0
        cache = self.prefix_cache
        if cache is not None and self._engine is None:
            cached = cache.cached_tokens(call)
            saved = cache.saving_s(call, cached)
            notes = self.recorder.notes
            notes["prefix_cached_tokens"] = notes.get("prefix_cached_tokens", 0) + cached
            notes["prefix_prompt_tokens"] = notes.get("prefix_prompt_tokens", 0) + call.prompt_tokens

        def first_chunk() -> None:
            if attempt.abandoned:
                return
            if cache is not None:
                cache.insert(call)
            attempt.first_chunk_at = self.sim.now
            for listener in attempt.chunk_listeners:
                listener()
            if on_first_chunk is not None:
                on_first_chunk(attempt)

        def answered() -> None:
            if attempt.abandoned:
                return
            self.provider.settle(self.sim.now, charged, used)
            attempt.finish(self.sim.now, on_answer)

        if fault == "stall":
            attempt.will_answer = False
            ttft = call.first_chunk_s - saved + self.provider.extra_first_chunk_s(now, call.first_chunk_s)
            attempt.stalls_at = now + ttft + size
            attempt.hung_from = attempt.stalls_at
            self.sim.after(ttft, first_chunk)
            return attempt
        attempt.will_answer = True
        if self._engine is not None:
            self._engine.start(attempt, call, first_chunk, answered)
            return attempt
        ttft = call.first_chunk_s - saved + (size if fault == "slow" else 0.0)
        extra = self.provider.extra_first_chunk_s(now, ttft)
        self.sim.after(ttft + extra, first_chunk)
        self.sim.after(call.provider_latency_s - call.first_chunk_s + ttft + extra, answered)
        return attempt


class _SaturatedEngine:
    """Processor sharing over at most `max_running` requests; the rest wait in FIFO order.
    A request's first chunk comes ttft(running) after it starts running; it then decodes its
    output at the shared per-request rate, recomputed whenever the running set changes."""

    def __init__(self, sim: Simulator, model: Saturation):
        self.sim, self.model = sim, model
        self.running: list[list] = []   # [attempt, remaining_tokens, decoding, on_done]
        self.waiting: list[tuple] = []
        self.updated_at = 0.0
        self.version = 0

    def start(self, attempt: Attempt, call: CallSpec, on_first_chunk, on_done) -> None:
        self._advance()
        if len(self.running) >= self.model.max_running:
            self.waiting.append((attempt, call, on_first_chunk, on_done))
        else:
            self._run(attempt, call, on_first_chunk, on_done)
        self._reschedule()

    def _run(self, attempt, call, on_first_chunk, on_done) -> None:
        entry = [attempt, float(call.output_tokens), False, on_done]
        self.running.append(entry)
        ttft = self.model.ttft(len(self.running)) + call.prompt_tokens / self.model.prefill_tokens_per_s

        def first() -> None:
            self._advance()
            entry[2] = True
            on_first_chunk()
            self._reschedule()

        self.sim.after(ttft, first)

    def _rate(self) -> float:
        return self.model.per_request_rate(len(self.running))

    def _advance(self) -> None:
        now = self.sim.now
        elapsed = now - self.updated_at
        if elapsed > 0:
            rate = self._rate()
            for entry in self.running:
                if entry[2]:
                    entry[1] -= elapsed * rate
        self.updated_at = now

    def _reschedule(self) -> None:
        self.version += 1
        version = self.version
        decoding = [e for e in self.running if e[2]]
        if not decoding:
            return
        rate = self._rate()
        soonest = min(max(0.0, e[1]) for e in decoding) / rate
        self.sim.after(soonest, lambda: self._tick(version))

    def _tick(self, version: int) -> None:
        if version != self.version:
            return
        self._advance()
        done = [e for e in self.running if e[2] and e[1] <= 1e-6]
        for entry in done:
            self.running.remove(entry)
        while self.waiting and len(self.running) < self.model.max_running:
            self._run(*self.waiting.pop(0))
        for entry in done:
            entry[3]()
        self._reschedule()

    def abandon(self, attempt: Attempt) -> None:
        """A client closed the request: the server stops working on it."""
        self._advance()
        self.running = [e for e in self.running if e[0] is not attempt]
        self.waiting = [w for w in self.waiting if w[0] is not attempt]
        while self.waiting and len(self.running) < self.model.max_running:
            self._run(*self.waiting.pop(0))
        self._reschedule()


@dataclass
class Attempt:
    record: CallRecord
    sent_at: float
    answer: ProviderAnswer
    hold: SlotHold | None = None
    recorder: Recorder | None = None
    will_answer: bool = True      # the provider will answer it (False: hang, stall, outage)
    hung_from: float | None = None  # when it became a call that will never answer
    stalls_at: float | None = None  # a mid-stream stall: the last chunk's time
    first_chunk_at: float | None = None
    abandoned: bool = False       # the client gave up on it (timeout, reap): its answer is ignored
    finished_at: float | None = None
    ended_at: float | None = None  # finished or abandoned
    link: ProviderLink | None = None
    chunk_listeners: list = field(default_factory=list)  # told of the first chunk (watchdogs)

    @property
    def hung(self) -> bool:
        """Sent, admitted, and it will never answer (a hang before the first chunk, an
        outage, or a stream that stalls)."""
        return self.answer.admitted and not self.will_answer

    @property
    def ok(self) -> bool:
        return self.answer.admitted and self.finished_at is not None

    def chunk_seen(self, now: float) -> bool:
        return self.first_chunk_at is not None and self.first_chunk_at <= now

    def streaming(self, now: float) -> bool:
        """A chunk came and the stream is still flowing at `now` (what a client reading the
        stream observes)."""
        if not self.chunk_seen(now) or self.ended_at is not None:
            return False
        return self.stalls_at is None or now < self.stalls_at

    def silent_since(self, now: float) -> float:
        """Since when the client has seen nothing from this attempt: its send, or its last
        chunk (`now` while the stream flows)."""
        if not self.chunk_seen(now):
            return self.sent_at
        if self.stalls_at is not None and self.stalls_at <= now:
            return self.stalls_at
        return now

    def _close(self, now: float) -> None:
        self.ended_at = now
        if self.answer.admitted and self.link is not None:
            self.link.provider.inflight -= 1
        if self.hold is not None:
            stop = held_until(self.hold, now)
            self.hold.inflight_s += max(0.0, stop - self.sent_at)
            if self.hung_from is not None and stop > self.hung_from:
                self.hold.hung_s += stop - self.hung_from
        if self.recorder is not None:
            self.recorder.open_attempts.pop(id(self), None)

    def finish(self, now: float, on_answer: Callable[[Attempt], None]) -> None:
        if self.abandoned:
            return
        self.finished_at = now
        self._close(now)
        if self.answer.admitted:
            self.record.completed_at = now
            self.record.answered_sent_at = self.sent_at
            self.record.answered_at = now
            if self.hold is not None:
                self.hold.productive_s += max(0.0, held_until(self.hold, now) - self.sent_at)
        on_answer(self)

    def abandon(self, now: float) -> None:
        """The client gives up on the attempt (a timeout, a reap, a cut): the request is
        closed, its answer will be ignored. A live call cut counts as such."""
        if self.abandoned or self.finished_at is not None:
            return
        self.abandoned = True
        self._close(now)
        if self.recorder is not None and self.answer.admitted:
            if self.will_answer or (self.stalls_at is not None and now < self.stalls_at):
                self.recorder.live_calls_cut += 1
            else:
                self.recorder.hung_attempts_cut += 1
        if self.link is not None and self.link._engine is not None:
            self.link._engine.abandon(self)


class Watchdog:
    """A client-side timer on one attempt, as an HTTP client's read timeout works on a stream:
    it fires when nothing has arrived for `first_chunk_s` before the first chunk, or for
    `idle_s` between chunks after it (None: no such limit). It re-arms itself from what the
    client has seen, never from what the provider will do."""

    def __init__(self, sim: Simulator, attempt: Attempt, first_chunk_s: float | None, idle_s: float | None,
                 on_fire: Callable[[Attempt], None]):
        self.sim, self.attempt = sim, attempt
        self.first_chunk_s, self.idle_s, self.on_fire = first_chunk_s, idle_s, on_fire
        self.cancelled = False
        self.generation = 0
        attempt.chunk_listeners.append(self._rearm)
        self._arm()

    def _rearm(self) -> None:
        """The first chunk came: the limit between chunks applies from now."""
        self.generation += 1
        self._arm()

    def cancel(self) -> None:
        self.cancelled = True

    def _limit(self) -> float | None:
        return self.idle_s if self.attempt.chunk_seen(self.sim.now) else self.first_chunk_s

    def _arm(self) -> None:
        limit = self._limit()
        if limit is None:
            return  # no limit before the first chunk: _rearm arms the idle limit when it comes
        generation = self.generation
        self.sim.at(self.attempt.silent_since(self.sim.now) + limit, lambda: self._check(generation))

    def _check(self, generation: int) -> None:
        a = self.attempt
        if self.cancelled or a.ended_at is not None or generation != self.generation:
            return
        limit = self._limit()
        if limit is not None and self.sim.now - a.silent_since(self.sim.now) >= limit - 1e-9:
            self.on_fire(a)
            return
        self._arm()

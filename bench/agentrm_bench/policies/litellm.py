"""LiteLLM proxy in front of one provider deployment (BerriAI/litellm), and its priority
scheduler.

The model follows the Router of litellm 1.106.12 (`litellm/router.py`), the version
`agentrm bench peers` installs and runs beside it (peers.py: the newest whose proxy extra
installs); file paths and line numbers below are that release's wheel. Its constants and
cooldown rules are those of v1.77.7, the release the model was first written from; three
behaviours differ from it, each checked against the real proxy by the `validate` workload of
`agentrm bench peers` (docs/benchmarks/peers.md). The configuration is the one a user who
wants rpm/tpm-aware routing writes:

    model_list: [{model_name: m, litellm_params: {model: ..., rpm: RPM, tpm: TPM,
                                                  max_parallel_requests: LANES}}]
    router_settings: {routing_strategy: usage-based-routing-v2, num_retries: 2}
    litellm_settings: {request_timeout: 600}

What a request meets, in order (each cited at its constant or function below):
1. cooldown: a deployment in cooldown is not "healthy"; with none healthy the router raises
   RouterRateLimitError ("No deployments available") at once, without headers;
2. usage-based-routing-v2 selection (`lowest_tpm_rpm_v2.py` `_return_potential_deployments`,
   lines 385-389): the deployment is skipped when this UTC minute's tokens + the prompt exceed
   tpm, or this minute's requests + 1 >= rpm (so at most rpm - 1 requests a minute pass); with
   none left it raises RateLimitError "No deployments available" with retry-after 60;
3. the max_parallel_requests limit (`MaxParallelRequestsLimit.acquire`,
   litellm/router_utils/client_initalization_utils.py lines 34-47, entered at router.py
   3966-3968): a request that finds every slot in use is refused at once with a RateLimitError
   without headers (it does not wait for a slot); inside the slot the rpm pre-call check counts
   the request in this minute's rpm counter (RateLimitError, retry-after 60, when it is full);
4. the provider call through the openai SDK (max_retries 0: the router is the retry loop),
   with an httpx read timeout of request_timeout between chunks; the slot is released when
   the stream object is returned (the first chunk), not when the stream ends;
5. on an error before the stream began: the router's own retries (num_retries = 2), sleeping
   `_time_to_sleep_before_retry` before each and once more after the last, each sleep computed
   from the exception just raised (router.py 8186 for the first, 8256 in the retry loop); then
   the error reaches the agent. An error after the stream began (a stall) is never retried.

Counters live on the instance (an in-memory DualCache without Redis), so each replica of the
`replicas` scenario counts only what it sees.

ASSUMPTIONS:
- max_parallel_requests = lanes: LiteLLM's default for a deployment with rpm set is rpm
  itself (`calculate_max_parallel_requests`, litellm/utils.py), i.e. no cap at the
  benchmark's rpm; a user who knows the pool's lane count sets it, so we do (in 1.106.12 a
  request past it is refused, not queued).
- The agents' client in front of the proxy does not retry and does not time out before the
  proxy does (its own SDK retries would stack on the router's); an error the proxy returns
  reaches the agent, which asks again after AGENT_RETRY_S (policies/base.py).
- Simulated t = 0 falls on a UTC minute boundary (the counters are keyed "%H-%M").
- A pre-call rpm rejection and a timed-out or stalled attempt are counted as deployment
  failures of the current minute (they run the failure callbacks); a refusal for want of a
  slot is not (it is raised before the deployment is called).
- The prompt's token_counter() count is the call's prompt_tokens.
"""
from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import cast

from ..sim import Attempt, CallRecord, SlotHold, Watchdog
from ..workload import BACKGROUND, BATCH, INTERACTIVE
from .base import Context, Cursor, Policy

# litellm_settings.request_timeout recommended by docs/my-website/docs/proxy/prod.md
# ("Recommended config.yaml": `request_timeout: 600  # raise Timeout error if call takes longer
# than 600 seconds. Default value is 6000seconds if not set`; litellm/constants.py
# request_timeout = 6000). Router.timeout = timeout or litellm.request_timeout
# (litellm/router.py __init__); `stream_timeout` is unset, so `Router._get_timeout` gives a
# stream the same value. It reaches the openai client as httpx.Timeout(600): a read timeout,
# i.e. 600 s before the first chunk and 600 s of silence between chunks, no total limit
# (LITELLM_MAX_STREAMING_DURATION_SECONDS defaults to None, litellm/constants.py).
REQUEST_TIMEOUT_S = 600.0
# router_settings.num_retries = 2: `litellm/constants.py` DEFAULT_MAX_RETRIES = 2; the router
# passes max_retries=0 to the SDK (`default_litellm_params.setdefault("max_retries", 0)`).
NUM_RETRIES = 2
# `_calculate_retry_after` (litellm/utils.py): INITIAL_RETRY_DELAY = 0.5, MAX_RETRY_DELAY = 8.0,
# JITTER = 0.75 (litellm/constants.py); retry-after honoured when 0 < it <= 60.
INITIAL_RETRY_DELAY_S = 0.5
MAX_RETRY_DELAY_S = 8.0
JITTER_S = 0.75
RETRY_AFTER_CAP_S = 60
# Cooldowns (litellm/router_utils/cooldown_handlers.py, litellm/constants.py):
# DEFAULT_COOLDOWN_TIME_SECONDS = 5; DEFAULT_FAILURE_THRESHOLD_PERCENT = 0.5 with
# DEFAULT_FAILURE_THRESHOLD_MINIMUM_REQUESTS = 5 -- but `_should_cooldown_deployment` skips both
# the 429 rule and the 50% rule for a single-deployment model group ("by default we should avoid
# cooldowns on single deployment model groups"); what is left for one deployment is
# `percent_fails == 1.0 and total_requests_this_minute >= SINGLE_DEPLOYMENT_TRAFFIC_FAILURE_THRESHOLD`
# (1000). The cooldown lasts the failure's retry-after header if any, else cooldown_time
# (`Router.deployment_callback_on_failure`); a pre-call rejection uses cooldown_time.
COOLDOWN_S = 5.0
SINGLE_DEPLOYMENT_TRAFFIC_FAILURE_THRESHOLD = 1000
# usage-based-routing-v2's RateLimitErrors carry `headers={"retry-after": str(60)}`
# (litellm/router_strategy/lowest_tpm_rpm_v2.py).
USAGE_ROUTER_RETRY_AFTER_S = 60.0
# litellm/scheduler.py: Scheduler.polling_interval = DEFAULT_POLLING_INTERVAL = 0.03 s
# (litellm/constants.py; the docstring's "3ms" is stale); lower priority value = served first.
POLLING_INTERVAL_S = 0.03
PRIORITY_OF_CLASS = {INTERACTIVE: 0, BATCH: 1, BACKGROUND: 2}


@dataclass
class _Failure:
    """An exception the router saw: its kind, the retry-after its headers carry (None: no
    headers), and whether it counts as a failure of the deployment this minute."""
    kind: str
    retry_after: float | None = None


@dataclass
class _Chain:
    """One proxy request: the router's first try and its retries."""
    cur: Cursor
    tries: int = 0                  # attempts started by the retry loop (1 + retries)
    attempt: Attempt | None = None
    watchdog: Watchdog | None = None
    has_permit: bool = False
    hold: SlotHold | None = None


def router_backoff(rng, failure: _Failure, remaining_retries: int, num_retries: int = NUM_RETRIES) -> float:
    """`Router._time_to_sleep_before_retry` for a model group of one deployment (no instant
    retry on another deployment) -> `litellm.calculate_retry_after` (litellm/utils.py 7450):
    the exception's retry-after plus up to 0.75 s jitter when 0 < it <= 60, else 0.5 s *
    2^(num_retries - remaining_retries), capped at 8 s, plus the same jitter."""
    jitter = JITTER_S * rng.random()
    ra = failure.retry_after
    if ra is not None and 0 < ra <= RETRY_AFTER_CAP_S:
        return ra + jitter
    return min(INITIAL_RETRY_DELAY_S * 2 ** (num_retries - remaining_retries), MAX_RETRY_DELAY_S) + jitter


class LitellmProxy(Policy):
    name = "litellm-proxy"

    def __init__(self, ctx: Context, agents=None, variant=None):
        super().__init__(ctx, agents)
        self.rpm, self.tpm = ctx.provider.rpm, ctx.provider.tpm
        self.permits = max(1, ctx.lanes)            # ASSUMPTION: max_parallel_requests = lanes
        self.cooldown_until = -math.inf
        # This UTC minute's counters (DualCache keys "{id}:{model}:rpm:%H-%M", "...:tpm:...",
        # and the success/failure counts of router_callbacks/track_deployment_metrics.py).
        self.minute = 0
        self.rpm_used = 0
        self.tpm_used = 0
        self.successes = 0
        self.failures = 0
        self.notes = {"cooldowns": 0, "no_deployments": 0, "precall_rejects": 0, "parallel_rejects": 0,
                      "timeouts": 0, "stalls_to_agent": 0, "errors_to_agent": 0}

    def finish(self) -> None:
        for key, value in self.notes.items():
            self.recorder.notes[f"litellm_{key}"] = self.recorder.notes.get(f"litellm_{key}", 0) + value

    # -- counters -------------------------------------------------------------------------
    def _tick_minute(self) -> None:
        minute = int(self.sim.now // 60)
        if minute != self.minute:
            self.minute, self.rpm_used, self.tpm_used, self.successes, self.failures = minute, 0, 0, 0, 0

    def in_cooldown(self) -> bool:
        return self.sim.now < self.cooldown_until

    def _deployment_failed(self, cooldown_s: float) -> None:
        """`deployment_callback_on_failure`: count the failure, then `_set_cooldown_deployments`
        with the single-deployment rules (see SINGLE_DEPLOYMENT_TRAFFIC_FAILURE_THRESHOLD)."""
        self._tick_minute()
        self.failures += 1
        total = self.successes + self.failures
        if self.failures == total and total >= SINGLE_DEPLOYMENT_TRAFFIC_FAILURE_THRESHOLD and cooldown_s > 0:
            # cooldown_cache.add_deployment_to_cooldown: a TTL entry; a later one replaces it
            self.cooldown_until = self.sim.now + cooldown_s
            self.notes["cooldowns"] += 1

    # -- a proxy request ------------------------------------------------------------------
    def call_ready(self, cur: Cursor) -> None:
        self.acompletion(cur)

    def acompletion(self, cur: Cursor) -> None:
        """`Router.acompletion` -> `async_function_with_retries`."""
        self._try(_Chain(cur))

    def _try(self, chain: _Chain) -> None:
        chain.tries += 1
        # `async_get_available_deployment`: cooldowns first ...
        if self.in_cooldown():
            self._failed(chain, _Failure("cooldown", None))  # RouterRateLimitError, no headers
            return
        # ... then usage-based-routing-v2's pick (`_return_potential_deployments`,
        # lowest_tpm_rpm_v2.py 385-389): the minute's tokens + the prompt over tpm, or the
        # minute's requests + 1 >= rpm, leaves no deployment.
        self._tick_minute()
        call = cast(CallRecord, chain.cur.record).call
        if self.tpm_used + call.prompt_tokens > self.tpm or self.rpm_used + 1 >= self.rpm:
            self.notes["no_deployments"] += 1
            self._failed(chain, _Failure("no_deployments", USAGE_ROUTER_RETRY_AFTER_S))
            return
        # `_acompletion`: the deployment's MaxParallelRequestsLimit, which refuses rather than
        # waits (client_initalization_utils.py 34-47): a RateLimitError without headers.
        if self.permits <= 0:
            self.notes["parallel_rejects"] += 1
            self._failed(chain, _Failure("max_parallel", None))
            return
        self.permits -= 1
        chain.has_permit = True
        self._precall_and_send(chain)

    def _release_permit(self, chain: _Chain) -> None:
        if not chain.has_permit:
            return
        chain.has_permit = False
        self.permits += 1

    def _precall_and_send(self, chain: _Chain) -> None:
        # `async_routing_strategy_pre_call_checks` -> LowestTPMLoggingHandler_v2.async_pre_call_check:
        # local count >= rpm raises (retry-after 60), else the count is incremented.
        self._tick_minute()
        if self.rpm_used >= self.rpm:
            self.notes["precall_rejects"] += 1
            self._release_permit(chain)
            self._deployment_failed(COOLDOWN_S)   # cooldown with time_to_cooldown=self.cooldown_time
            self._failed(chain, _Failure("precall_rpm", USAGE_ROUTER_RETRY_AFTER_S))
            return
        self.rpm_used += 1
        cur = chain.cur
        chain.hold = self.recorder.hold(self.sim.now, "request")
        attempt = self.link.send(cast(CallRecord, cur.record), lambda a: self._answered(chain, a), hold=chain.hold,
                                 on_first_chunk=lambda a: self._first_chunk(chain, a))
        chain.attempt = attempt
        cur.attempt = attempt
        if attempt.hung:
            chain.hold.hung_since = self.sim.now
        if attempt.answer.admitted:
            chain.watchdog = Watchdog(self.sim, attempt, REQUEST_TIMEOUT_S, REQUEST_TIMEOUT_S,
                                      lambda a: self._timed_out(chain, a))

    def _first_chunk(self, chain: _Chain, attempt: Attempt) -> None:
        # `await _response` returned the CustomStreamWrapper: the semaphore block exits and the
        # retry loop returns; the stream is read by the proxy outside both.
        self._release_permit(chain)

    def _answered(self, chain: _Chain, attempt: Attempt) -> None:
        if chain.watchdog is not None:
            chain.watchdog.cancel()
        self.recorder.release(self.sim.now, chain.hold)
        self._release_permit(chain)
        if attempt.answer.admitted:
            # deployment_callback_on_success / async_log_success_event: the minute's tpm gets
            # the usage's total_tokens at the end of the stream.
            self._tick_minute()
            call = attempt.record.call
            self.tpm_used += call.prompt_tokens + call.output_tokens
            self.successes += 1
            self.call_done(chain.cur)
            return
        # a provider 429 (openai.RateLimitError with the response's headers)
        ra = attempt.answer.retry_after_s
        self._deployment_failed(ra if ra is not None and ra >= 0 else COOLDOWN_S)
        self._failed(chain, _Failure("provider_429", ra))

    def _timed_out(self, chain: _Chain, attempt: Attempt) -> None:
        """The httpx read timeout fired (600 s of silence)."""
        streaming_began = attempt.chunk_seen(self.sim.now)
        attempt.abandon(self.sim.now)
        self.recorder.release(self.sim.now, chain.hold)
        self._release_permit(chain)
        self._deployment_failed(COOLDOWN_S)
        if streaming_began:
            # A mid-stream failure: the retry loop has long returned; with no fallbacks
            # configured `_acompletion_streaming_iterator` re-raises it to the client.
            self.notes["stalls_to_agent"] += 1
            self._to_agent(chain)
            return
        self.notes["timeouts"] += 1
        self._failed(chain, _Failure("timeout", None))  # litellm.Timeout (408), no headers

    def _failed(self, chain: _Chain, failure: _Failure) -> None:
        """`async_function_with_retries` after an exception of try number chain.tries."""
        if chain.tries == 1:
            # `should_retry_this_error`: no healthy deployment -> raise at once, no retry
            if self.in_cooldown():
                self._to_agent(chain)
                return
            wait = router_backoff(self.rng, failure, remaining_retries=NUM_RETRIES)
            self.sim.after(wait, lambda: self._try(chain))
            return
        # inside `for current_attempt in range(num_retries)`: sleep, computed from the
        # exception just raised with remaining_retries = num_retries - current_attempt - 1
        # (router.py 8219 and 8256), even after the last retry, then the loop ends and it is
        # raised
        current_attempt = chain.tries - 2
        wait = router_backoff(self.rng, failure, remaining_retries=NUM_RETRIES - current_attempt - 1)
        if current_attempt + 1 < NUM_RETRIES:
            self.sim.after(wait, lambda: self._try(chain))
        else:
            self.sim.after(wait, lambda: self._to_agent(chain))

    def _to_agent(self, chain: _Chain) -> None:
        self.notes["errors_to_agent"] += 1
        self.agent_retry(chain.cur)


class LitellmProxyPriority(LitellmProxy):
    """The same proxy with its priority queue: the request carries `priority` (0 interactive,
    1 batch, 2 background, as a user would map them; lower is served first), so the proxy
    calls `Router.schedule_acompletion` (litellm/proxy/proxy_server.py) ->
    `Scheduler.wait_for_turn` (litellm/scheduler.py): the request is pushed on a heap of
    (priority, request_id) and polled every POLLING_INTERVAL_S; `Scheduler.poll` lets it go at
    once whenever the model group has a healthy deployment (one not in cooldown), and only
    while none is healthy does it let the top of the heap go (popped), the others waiting. The
    wait is bounded by the router timeout (litellm.Timeout "Request timed out while polling
    queue"); whatever happens the entry is removed (`remove_request` in `finally`).

    So the heap orders nothing unless the single deployment is cooling down, and even then a
    request polls right after it is added: alone on the heap it is popped at once, so in one
    proxy process the heap rarely holds anyone; the request it lets go during a cooldown
    then fails at once with "No deployments available" (no retry: no healthy deployment).
    That is what the code does; it is modelled as such. The request_id is a uuid4, so ties
    within a priority are broken at random (self.rng).

    Polling is modelled without a timer per poll: a waiter polls at t0, t0 + 0.03, ...; the
    next poll that sees the cooldown over, or that finds the waiter on top, is computed and
    one event is scheduled for it."""
    name = "litellm-proxy-priority"

    def __init__(self, ctx: Context, agents=None, variant=None):
        super().__init__(ctx, agents, variant)
        self.heap: list[tuple[int, float, int]] = []
        self.waiters: dict[int, tuple[Cursor, float]] = {}   # id -> (cursor, enqueued at)
        self._ids = itertools.count()
        self._pump_version = 0
        self.notes.update({"queued": 0, "queue_timeouts": 0})

    def call_ready(self, cur: Cursor) -> None:
        """`wait_for_turn`: add_request, then the first poll at once."""
        if not self.in_cooldown():
            self.acompletion(cur)            # healthy deployment: go
            return
        wid = next(self._ids)
        heapq.heappush(self.heap, (PRIORITY_OF_CLASS.get(cur.agent.priority_class, 1), self.rng.random(), wid))
        self.notes["queued"] += 1
        if self.heap[0][2] == wid:           # on top of the heap: popped by this first poll
            heapq.heappop(self.heap)
            self.acompletion(cur)
            return
        self.waiters[wid] = (cur, self.sim.now)
        self.sim.after(REQUEST_TIMEOUT_S, lambda: self._queue_timeout(wid))
        self._pump()

    def _next_poll(self, enqueued_at: float, not_before: float) -> float:
        """The waiter's first poll at or after `not_before`, after the one at its arrival."""
        k = math.ceil((not_before - enqueued_at) / POLLING_INTERVAL_S - 1e-9)
        return enqueued_at + max(1, k) * POLLING_INTERVAL_S

    def _pump(self) -> None:
        """Schedule the next poll that lets someone go."""
        self._pump_version += 1
        version = self._pump_version
        while self.heap and self.heap[0][2] not in self.waiters:
            heapq.heappop(self.heap)         # removed by its queue timeout
        if not self.waiters:
            return
        if not self.in_cooldown():
            # healthy again: every waiter goes at its own next poll
            for wid, (_cur, t0) in list(self.waiters.items()):
                # (the default binds this worker now)
                self.sim.at(self._next_poll(t0, self.sim.now), lambda w=wid: self._release(w))  # type: ignore[misc]
            return
        top = self.heap[0][2]
        t_top = self._next_poll(self.waiters[top][1], self.sim.now)
        t_end = self.cooldown_until
        self.sim.at(min(t_top, t_end), lambda: self._poll(top, version))

    def _poll(self, top: int, version: int) -> None:
        if version != self._pump_version:
            return
        if not self.in_cooldown():
            self._pump()
            return
        entry = self.waiters.get(top)
        on_tick = entry is not None and abs(self._next_poll(entry[1], self.sim.now) - self.sim.now) < 1e-9
        if on_tick and self.heap and self.heap[0][2] == top:
            heapq.heappop(self.heap)
            self._release(top)
        self._pump()

    def _release(self, wid: int) -> None:
        entry = self.waiters.pop(wid, None)
        if entry is None:
            return
        self.acompletion(entry[0])

    def _queue_timeout(self, wid: int) -> None:
        entry = self.waiters.pop(wid, None)
        if entry is None:
            return
        self.notes["queue_timeouts"] += 1
        self.notes["errors_to_agent"] += 1
        self.agent_retry(entry[0])
        self._pump()

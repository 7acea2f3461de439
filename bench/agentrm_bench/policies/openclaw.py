"""`openclaw-lanes`: OpenClaw's gateway, where an agent run holds a command-lane slot from its
first LLM call to its last answer, tool calls included.

Sources (openclaw/openclaw, main as stored in 2026; paths and constants cited beside the code):
- lanes: `src/process/lanes.ts` (CommandLane main / cron / subagent / nested) sized in
  `src/gateway/server-lanes.ts` `applyGatewayLaneConcurrency`: cron = cron.maxConcurrentRuns
  ?? 1, main = DEFAULT_AGENT_MAX_CONCURRENT = 4, subagent = DEFAULT_SUBAGENT_MAX_CONCURRENT = 8
  (`src/config/agent-limits.ts`). Every run is enqueued on its session lane (one active run
  per session) and then on its global lane; the whole agent run executes inside the lane task
  (openclaw/openclaw#52682), so a lane is freed only when the run settles.
- the LLM idle watchdog, `src/agents/embedded-agent-runner/run/llm-idle-timeout.ts`:
  DEFAULT_LLM_IDLE_TIMEOUT_MS = 120 000, CRON_LLM_IDLE_TIMEOUT_MS = 60 000 (cron runs). The
  timer guards stream creation and every `next()` of the stream, i.e. it fires when nothing
  arrived for that long before the first chunk or between chunks, and aborts the request.
- what happens after a failure, `src/agents/embedded-agent-runner/run/failover-retry-controller.ts`
  `maybeRetryTransient` and `run/helpers.ts` `resolveTransientRetryDelayMs`: a `timeout` (the
  idle watchdog) or `rate_limit` failure is retried in place on the same model, up to
  MAX_TRANSIENT_RETRIES = 8 (rate limits: MAX_RATE_LIMIT_ATTEMPTS - 1 = 9) times, after
  max(jittered exponential 1 s * 2^(n-1) x U(0.5, 1.5) capped at 30 s, retry-after); for
  non-rate-limit failures only while the retry still fits in MAX_TRANSIENT_RETRY_TIME_MS =
  90 s counted from the first failure. With a 120 s watchdog the second idle timeout is
  already past that window, so a hung call is retried exactly once and then the run fails
  with the timeout surfaced to the user ("idle stalls are retried once then surfaced as
  explicit errors", maintainer, openclaw/openclaw#46089); with cron's 60 s watchdog the
  window admits two retries.
- per-profile cooldown, `src/agents/auth-profiles/usage.ts` `markAuthProfileFailure` /
  `calculateAuthProfileCooldownMs`: a failed profile cools down 30 s, then 1 min, then 5 min
  (cap) by consecutive error count (the generic "30s -> 5min" ladder, openclaw/openclaw#113159;
  the older 1/5/25/60 min ladder was shortened after #11352, #31962); a success resets it
  (`markAuthProfileUsed`), an expired window resets the count (#41028), retries inside an
  active window do not extend it (#60419). A run that starts while its only profile cools
  down waits for the window to end ("Rate-limited - ready in ~7s", #86861), in its lane.
- the lane task timeout: 630 s, after which the lane is given up (openclaw/openclaw#77741).

Model:
- lanes: the deployment scales OpenClaw's defaults to the pool, keeping their ratio
  main : subagent : cron = 4 : 8 : 1 and their sum equal to ctx.lanes (largest remainders,
  at least one lane each; 64 lanes -> 20 / 39 / 5). Interactive runs use `main`, batch
  (coding) runs `subagent` (issue 10), background (cron) runs `cron`. A run takes a lane when
  its first call is due (FIFO per lane) and keeps it through every call and tool call until
  its last answer.
- per-session serialisation: each agent of the trace is one session; its runs are already
  sequential in the workload, so the session lane never adds a wait here.
- each attempt streams under the idle watchdog (120 s; 60 s on the cron lane), before and
  after its first chunk, so hangs, mid-stream stalls and slow-but-alive calls slower than the
  watchdog are cut; then the transient-retry rules above decide: retry in the lane, or the
  run fails, its lane is freed and the error reaches the user, who sends the step again
  (`agent_retry`: the call queues for a lane as a new run, with a fresh retry budget).
- 429: the same in-place retry (retry-after honoured as a floor); the agent's profile is
  marked and cools down; a later run of the agent that starts inside the cooldown waits for
  its end holding its lane.
- the lane task timeout, 630 s after the lane was taken: the attempt in flight is cut, the
  lane freed; an unanswered call reaches the user as an error and is sent again (a new run).
  If the timeout falls in tool time the next call queues for a fresh lane.

ASSUMPTIONS (the kinder reading each time):
- each benchmark agent has its own auth state (per-agent `auth-state.json`, #60419), so a 429
  cools down only that agent's profile, not the whole fleet's; one profile per agent, no
  model fallback configured (with no second candidate the failover step ends the run).
- the idle timeout marks the profile like a 429 (#91659: idle timeouts are classified as
  `timeout` failures and feed the cooldown); it only matters when the run then fails.
- the lane timeout aborts the run (the older reading where the task keeps running after
  its slot is freed would over-admit).
- fewer than 3 lanes cannot host three lanes: that is refused with a clear error.
"""
from __future__ import annotations

from collections import deque
from typing import cast

from ..sim import Attempt, CallRecord, SlotHold, Watchdog
from ..workload import BACKGROUND, BATCH
from .base import Context, Cursor, Policy

# src/gateway/server-lanes.ts applyGatewayLaneConcurrency with src/config/agent-limits.ts
# DEFAULT_AGENT_MAX_CONCURRENT = 4, DEFAULT_SUBAGENT_MAX_CONCURRENT = 8, cron.maxConcurrentRuns ?? 1.
DEFAULT_LANES = {"main": 4, "subagent": 8, "cron": 1}
# run/llm-idle-timeout.ts DEFAULT_LLM_IDLE_TIMEOUT_MS, CRON_LLM_IDLE_TIMEOUT_MS.
IDLE_TIMEOUT_S = 120.0
CRON_IDLE_TIMEOUT_S = 60.0
# The same file: self-hosted providers (vllm, sglang, ...) get SELF_HOSTED_LLM_IDLE_TIMEOUT_MS
# and LOCAL_LLM_FIRST_EVENT_TIMEOUT_MS, 300 s each.
SELF_HOSTED_IDLE_TIMEOUT_S = 300.0
# Lane task timeout (openclaw/openclaw#77741).
LANE_TASK_TIMEOUT_S = 630.0
# run/helpers.ts MAX_TRANSIENT_RETRIES, MAX_TRANSIENT_RETRY_TIME_MS, TRANSIENT_RETRY_BASE_DELAY_MS,
# TRANSIENT_RETRY_MAX_DELAY_MS; failover-retry-controller.ts MAX_RATE_LIMIT_ATTEMPTS.
MAX_TRANSIENT_RETRIES = 8
MAX_RATE_LIMIT_ATTEMPTS = 10
TRANSIENT_RETRY_WINDOW_S = 90.0
TRANSIENT_RETRY_BASE_S = 1.0
TRANSIENT_RETRY_MAX_S = 30.0
# auth-profiles/usage.ts calculateAuthProfileCooldownMs: 30 s -> 1 min -> 5 min (cap).
COOLDOWN_STEPS_S = (30.0, 60.0, 300.0)


def lane_sizes(lanes: int, cron: bool = True) -> dict[str, int]:
    """OpenClaw's default lane sizes scaled to `lanes`: the same ratio, the same sum, at least
    one lane each (largest remainders, ties to the larger default). Without cron jobs there
    is no cron lane."""
    defaults = DEFAULT_LANES if cron else {k: v for k, v in DEFAULT_LANES.items() if k != "cron"}
    if lanes < len(defaults):
        raise ValueError(f"openclaw-lanes needs at least {len(defaults)} lanes ({', '.join(defaults)}), "
                         f"got {lanes}")
    total = sum(defaults.values())
    exact = {name: lanes * size / total for name, size in defaults.items()}
    sizes = {name: max(1, int(share)) for name, share in exact.items()}
    order = sorted(defaults, key=lambda n: (-(exact[n] - int(exact[n])), -defaults[n]))
    i = 0
    while sum(sizes.values()) < lanes:
        sizes[order[i % len(order)]] += 1
        i += 1
    while sum(sizes.values()) > lanes:  # only when a minimum of one lane pushed the sum over
        largest = max(sizes, key=lambda n: sizes[n])
        sizes[largest] -= 1
    return sizes


class OpenClawLanes(Policy):
    name = "openclaw-lanes"

    def __init__(self, ctx: Context, agents=None, variant=None):
        super().__init__(ctx, agents)
        # A deployment with no cron jobs configures no cron lane: its lanes all serve main
        # and subagent runs (the kinder reading of mapping ctx.lanes onto OpenClaw's lanes).
        has_cron = any(c.agent.priority_class == BACKGROUND for c in self.cursors)
        self.caps = lane_sizes(ctx.lanes, cron=has_cron)
        self.self_hosted = ctx.provider.saturation is not None
        self.active = {lane: 0 for lane in self.caps}
        self.queues: dict[str, deque[Cursor]] = {lane: deque() for lane in self.caps}
        self.idle_timeouts = 0
        self.lane_timeouts = 0
        self.failed_runs = 0

    @staticmethod
    def lane_of(cur: Cursor) -> str:
        if cur.agent.priority_class == BATCH:
            return "subagent"
        if cur.agent.priority_class == BACKGROUND:
            return "cron"
        return "main"

    def idle_timeout_s(self, cur: Cursor) -> float:
        if self.self_hosted:
            return SELF_HOSTED_IDLE_TIMEOUT_S
        return CRON_IDLE_TIMEOUT_S if self.lane_of(cur) == "cron" else IDLE_TIMEOUT_S

    # -- lanes ---------------------------------------------------------------------------
    def call_ready(self, cur: Cursor) -> None:
        if cur.hold is not None:
            self._send(cur)            # a later call of a run that holds its lane
            return
        lane = self.lane_of(cur)
        self.queues[lane].append(cur)
        self._pump(lane)

    def _pump(self, lane: str) -> None:
        queue = self.queues[lane]
        while queue and self.active[lane] < self.caps[lane]:
            cur = queue.popleft()
            self.active[lane] += 1
            cur.hold = self.recorder.hold(self.sim.now, lane)
            cur.token += 1
            token = cur.token
            # a new lane task: a fresh embedded run, with its own transient-retry budget
            cur.extra["retry"] = {"count": 0, "window_start": None, "rate_limit_seen": False}
            # (the defaults bind this cursor and token now)
            self.sim.after(LANE_TASK_TIMEOUT_S, lambda c=cur, t=token: self._lane_timeout(c, t))  # type: ignore[misc]
            cool_until = cur.extra.get("cooldown_until")
            if cool_until is not None and cool_until > self.sim.now:
                # the only profile cools down: the run waits for it, in its lane (#86861)
                self.sim.at(cool_until,
                            lambda c=cur, t=token: self._send(c) if c.token == t else None)  # type: ignore[misc]
            else:
                self._send(cur)

    def _free(self, cur: Cursor) -> None:
        lane = self.lane_of(cur)
        self.recorder.release(self.sim.now, cur.hold)
        cur.hold = None
        cur.token += 1
        self.active[lane] -= 1
        self._pump(lane)

    def run_done(self, cur: Cursor) -> None:
        self._free(cur)

    # -- one attempt under the idle watchdog ----------------------------------------------
    def _send(self, cur: Cursor) -> None:
        token = cur.token
        attempt = self.link.send(cast(CallRecord, cur.record), lambda a: self._answered(cur, a, token), hold=cur.hold)
        cur.attempt = attempt
        if attempt.hung:
            cast(SlotHold, cur.hold).hung_since = self.sim.now
        idle = self.idle_timeout_s(cur)
        # llm-idle-timeout.ts streamWithIdleTimeout: armed for stream creation and each next()
        Watchdog(self.sim, attempt, idle, idle, lambda a: self._idle_timeout(cur, a, token))

    def _answered(self, cur: Cursor, attempt: Attempt, token: int) -> None:
        if cur.token != token:
            return
        if attempt.answer.admitted:
            # auth-profiles/usage.ts markAuthProfileUsed: errorCount and cooldown reset
            cur.extra["error_count"] = 0
            cur.extra["cooldown_until"] = None
            # failover-retry-controller.ts observeAttempt: a successful model response
            # resets the transient-retry window, so a later failure in the same run gets its
            # own 90 s window
            cur.extra["retry"]["window_start"] = None
            self.call_done(cur)
            return
        self._mark_profile_failure(cur)
        delay = self._transient_retry_delay(cur, rate_limit=True, retry_after=attempt.answer.retry_after_s)
        self._retry_or_fail(cur, delay)

    def _idle_timeout(self, cur: Cursor, attempt: Attempt, token: int) -> None:
        if cur.token != token:
            return
        self.idle_timeouts += 1
        attempt.abandon(self.sim.now)   # abortStream(error): the request is aborted
        self._mark_profile_failure(cur)
        delay = self._transient_retry_delay(cur, rate_limit=False, retry_after=None)
        self._retry_or_fail(cur, delay)

    def _retry_or_fail(self, cur: Cursor, delay: float | None) -> None:
        if delay is not None:
            token = cur.token
            self.sim.after(delay, lambda: self._send(cur) if cur.token == token else None)
            return
        # No retry left and no fallback model: the run ends with the error surfaced; the
        # user sends the step again, which queues as a new run.
        self.failed_runs += 1
        self._free(cur)
        self.agent_retry(cur)

    # -- failover-retry-controller.ts maybeRetryTransient ---------------------------------
    def _transient_retry_delay(self, cur: Cursor, rate_limit: bool, retry_after: float | None) -> float | None:
        state = cur.extra["retry"]
        state["rate_limit_seen"] = state["rate_limit_seen"] or rate_limit
        budget = MAX_RATE_LIMIT_ATTEMPTS - 1 if rate_limit else MAX_TRANSIENT_RETRIES
        if state["rate_limit_seen"]:
            budget = min(budget, MAX_RATE_LIMIT_ATTEMPTS - 1)
        if state["count"] >= budget:
            return None
        now = self.sim.now
        if state["window_start"] is None:
            state["window_start"] = now
        # helpers.ts resolveTransientRetryDelayMs: rate limits have no time window
        remaining = float("inf") if rate_limit else TRANSIENT_RETRY_WINDOW_S - (now - state["window_start"])
        if remaining <= 0:
            return None
        exponential = min(TRANSIENT_RETRY_MAX_S, TRANSIENT_RETRY_BASE_S * 2 ** state["count"])
        jittered = min(TRANSIENT_RETRY_MAX_S, round(exponential * (0.5 + self.rng.random()), 3))
        delay = max(jittered, retry_after or 0.0)
        if delay > remaining:
            return None
        state["count"] += 1
        return delay

    def _mark_profile_failure(self, cur: Cursor) -> None:
        """auth-profiles/usage.ts markAuthProfileFailure, for the agent's one profile."""
        now = self.sim.now
        until = cur.extra.get("cooldown_until")
        if until is not None and now < until:
            return                          # an active window is not extended (#60419)
        count = 0 if until is not None and now >= until else cur.extra.get("error_count", 0)  # #41028
        count += 1
        cur.extra["error_count"] = count
        cur.extra["cooldown_until"] = now + COOLDOWN_STEPS_S[min(count, len(COOLDOWN_STEPS_S)) - 1]

    # -- the lane task timeout ------------------------------------------------------------
    def _lane_timeout(self, cur: Cursor, token: int) -> None:
        if cur.token != token:
            return
        self.lane_timeouts += 1
        attempt = cur.attempt
        unanswered = attempt is None or attempt.record is not cur.record or not attempt.ok
        if attempt is not None and attempt.ended_at is None:
            attempt.abandon(self.sim.now)
        self._free(cur)
        if unanswered:                      # in flight, hung, backing off or waiting on a cooldown
            self.agent_retry(cur)

    def finish(self) -> None:
        self.recorder.notes["openclaw"] = {"lanes": dict(self.caps), "idle_timeouts": self.idle_timeouts,
                                           "lane_timeouts": self.lane_timeouts, "failed_runs": self.failed_runs}

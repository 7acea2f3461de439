"""The four policies the scheduler benchmark compares, each driving the same trace on the same
virtual clock against the same simulated provider.

Every baseline models what its project documents or what its code does, cited next to it;
where a detail is an assumption, the docstring says so. `agentrm` is not a model: it runs the
real domain core (`decide`, `apply`, `next_deadline`) and plays the clients around it.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from app.domain import events as ev
from app.domain.apply import apply, new_pool
from app.domain.decide import decide, next_deadline
from app.domain.settings import PoolSettings

from .sim import Attempt, CallRecord, Provider, ProviderLink, Recorder, Simulator, SlotHold
from .workload import BACKGROUND, AgentScript, Trace


@dataclass
class Cursor:
    """Where one agent is in its script."""
    agent: AgentScript
    run_index: int = 0
    call_index: int = 0
    record: CallRecord | None = None
    hold: SlotHold | None = None           # a slot held across calls (lanes-fifo holds a run)
    attempt: Attempt | None = None
    token: int = 0                         # bumps whenever pending callbacks become stale
    stuck: bool = False                    # the policy will never serve this agent again

    @property
    def run(self):
        return self.agent.runs[self.run_index]

    @property
    def call(self):
        return self.run.calls[self.call_index]


@dataclass
class Context:
    sim: Simulator
    provider: Provider
    recorder: Recorder
    link: ProviderLink
    trace: Trace
    lanes: int
    seed: int
    options: dict = field(default_factory=dict)


class Policy:
    """The agent workflow shared by all policies: runs start after think time or at their
    cron instant, each call is requested when the previous call's tool time has passed, and
    a policy decides how a requested call reaches the provider (`call_ready`) and reports a
    success with `call_done`."""
    name = "base"

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.sim, self.recorder, self.link = ctx.sim, ctx.recorder, ctx.link
        self.rng = random.Random(f"{ctx.seed}/{self.name}")
        self.cursors = [Cursor(agent) for agent in ctx.trace.agents if agent.runs]

    def start(self) -> None:
        for cursor in self.cursors:
            self._schedule_run(cursor, 0.0)

    def finish(self) -> None:
        """Called at the end of the simulated period: a successful call still streaming then
        has been productive since it was sent (both sides are clipped to the period)."""
        end = self.sim.now
        for cur in self.cursors:
            attempt = cur.attempt
            if (cur.hold is not None and cur.hold.ended_at is None and attempt is not None
                    and attempt.answer.admitted and not attempt.hung and not attempt.abandoned
                    and attempt.finished_at is None and attempt.record is cur.record):
                cur.hold.productive_s += end - attempt.sent_at

    # -- workflow -----------------------------------------------------------------------
    def _schedule_run(self, cur: Cursor, previous_end: float) -> None:
        run = cur.run
        self.sim.at(max(previous_end + run.idle_before_s, run.not_before_s), lambda: self.run_ready(cur))

    def run_ready(self, cur: Cursor) -> None:
        self._begin_call(cur)

    def _begin_call(self, cur: Cursor) -> None:
        cur.record = self.recorder.request(self.sim.now, cur.call, cur.agent.agent_id, cur.agent.priority_class)
        self.call_ready(cur)

    def call_ready(self, cur: Cursor) -> None:
        raise NotImplementedError

    def call_done(self, cur: Cursor) -> None:
        tool = cur.call.tool_after_s
        if cur.call_index + 1 < len(cur.run.calls):
            cur.call_index += 1
            # Tool time happens here, between calls; whether a slot is held through it is
            # the policy's business (lanes-fifo holds its run's lane).
            self.sim.after(tool, lambda: self._begin_call(cur))
            return
        self.run_done(cur)
        cur.run_index += 1
        cur.call_index = 0
        if cur.run_index < len(cur.agent.runs):
            self._schedule_run(cur, self.sim.now)

    def run_done(self, cur: Cursor) -> None:
        """Hook: a run settled."""


def _productive(hold: SlotHold | None, attempt: Attempt) -> None:
    if hold is not None and attempt.finished_at is not None:
        hold.productive_s += attempt.finished_at - attempt.sent_at


def _sdk_backoff(rng: random.Random, retry_after: float | None, retries_done: int) -> float:
    """openai-python `_calculate_retry_timeout`: honour retry-after when 0 < it <= 60 s,
    otherwise 0.5 s * 2^n capped at 8 s, minus up to 25% jitter."""
    if retry_after is not None and 0 < retry_after <= 60:
        return retry_after
    return min(0.5 * 2 ** retries_done, 8.0) * (1 - 0.25 * rng.random())


# ---------------------------------------------------------------------------------------
class LanesFifo(Policy):
    """OpenClaw-style lanes.

    Source: OpenClaw docs "Command queue" (docs.openclaw.ai/concepts/queue): "a lane-aware
    FIFO queue drains each lane with a configurable concurrency cap"; every run is enqueued on
    its session lane (one active run per session) and then on a global lane (`main`, capped by
    agents.defaults.maxConcurrent; cron runs have their own `cron` lane,
    cron.maxConcurrentRuns). The whole agent run - LLM calls and the tool calls between them -
    executes inside the lane task (`enqueueSession(() => enqueueGlobal(async () => { /* entire
    agent run */ }))`, quoted in openclaw/openclaw#52682), so the slot is freed only when the
    run settles. A provider promise that never settles keeps its lane: openclaw/openclaw#71127
    ("stuck processing sessions are detected but never aborted"), #80330 (draining deadlocked
    by a stalled model_call); the only backstop is the lane task timeout hardcoded at 630 s
    (openclaw/openclaw#77741), modelled here (it cannot fire in a run shorter than 10.5 min).

    Model: interactive and batch runs share `main`; background (cron) runs use `cron` with
    max(1, lanes // 8) of the lanes, so the two caps add up to --lanes. On 429 the run
    sleeps a fixed per-agent backoff (default 5 s, `lanes_fifo_backoff_s`) holding its lane and
    retries; ASSUMPTION: OpenClaw's retry/cooldown rules have changed between releases (a
    stepped 30 s -> 1 m -> 5 m auth-profile cooldown since openclaw/openclaw#49834); a short
    fixed in-run retry is the kinder reading for this baseline.
    """
    name = "lanes-fifo"
    LANE_TASK_TIMEOUT_S = 630.0

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        cron = max(1, ctx.lanes // 8) if ctx.lanes > 1 else 0
        self.caps = {"main": max(1, ctx.lanes - cron), "cron": max(1, cron)}
        self.active = {"main": 0, "cron": 0}
        self.queues: dict[str, deque[Cursor]] = {"main": deque(), "cron": deque()}
        self.backoff_s = float(ctx.options.get("lanes_fifo_backoff_s", 5.0))

    def _lane_of(self, cur: Cursor) -> str:
        return "cron" if cur.agent.priority_class == BACKGROUND else "main"

    def call_ready(self, cur: Cursor) -> None:
        if cur.hold is not None:
            self._send(cur)  # a later call of a run that holds its lane
            return
        # The run's first call (or a timed-out run sent again) waits for a lane; its
        # latency counts from here.
        lane = self._lane_of(cur)
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
            self.sim.after(self.LANE_TASK_TIMEOUT_S, lambda c=cur, t=token: self._lane_timeout(c, t))
            self._send(cur)

    def _send(self, cur: Cursor) -> None:
        attempt = self.link.send(cur.record, lambda a: self._answered(cur, a))
        cur.attempt = attempt
        if attempt.hung:
            cur.hold.hung_since = self.sim.now

    def _answered(self, cur: Cursor, attempt: Attempt) -> None:
        if attempt.answer.admitted:
            _productive(cur.hold, attempt)
            self.call_done(cur)
        else:
            token = cur.token
            self.sim.after(self.backoff_s, lambda: self._send(cur) if cur.token == token else None)

    def run_done(self, cur: Cursor) -> None:
        self._free(cur)

    def _free(self, cur: Cursor) -> None:
        lane = self._lane_of(cur)
        self.recorder.release(self.sim.now, cur.hold)
        cur.hold = None
        cur.token += 1
        self.active[lane] -= 1
        self._pump(lane)

    def _lane_timeout(self, cur: Cursor, token: int) -> None:
        if cur.token != token:
            return
        # The run fails; the user (or the cron) sends it again: the unfinished call is re-run
        # in a fresh lane task, at the back of the queue. If the timeout falls in tool time,
        # the lane is freed and the next call queues for a lane when the tool is done.
        attempt = cur.attempt
        unanswered = attempt is not None and attempt.record is cur.record and not attempt.ok
        if attempt is not None:
            attempt.abandoned = True
        self._free(cur)
        if unanswered:                      # in flight, hung, or backing off after a 429
            self.call_ready(cur)


# ---------------------------------------------------------------------------------------
class AiosFifo(Policy):
    """AIOS-style FIFO batches.

    Source: AIOS paper (Mei et al., "AIOS: LLM Agent Operating System", arXiv 2403.16971)
    and agiresearch/AIOS `aios/scheduler/fifo_scheduler.py`: agents' LLM syscalls go into one
    FIFO queue that the scheduler drains every 1 s ("the timeout is 1 second instead of
    0.05 seconds", the batch interval of the round-robin variant's loop); the drained batch is
    executed at once, with no concurrency cap and no rate-limit awareness. Tool calls are
    separate syscalls that hold no LLM slot.

    Model: each drained call is executed by its own worker (a "slot" for lane accounting)
    through the provider SDK, which AIOS reaches via litellm/openai: on 429 the SDK retries
    up to 2 times (openai-python default max_retries=2), honouring retry-after <= 60 s, else
    exponential backoff 0.5 s * 2^n capped at 8 s. If it still fails the syscall returns an
    error and the agent submits the call again (back of the queue). A hung call blocks its
    worker until the SDK's default 600 s timeout (openai-python DEFAULT_TIMEOUT), then is
    retried the same way. ASSUMPTION: the re-submission after an error (AIOS returns the
    error to the agent; what the agent does is up to the agent).
    """
    name = "aios-fifo"
    BATCH_INTERVAL_S = 1.0
    SDK_RETRIES = 2
    SDK_TIMEOUT_S = 600.0

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.queue: deque[Cursor] = deque()

    def start(self) -> None:
        super().start()
        self.sim.at(self.BATCH_INTERVAL_S, self._drain)

    def _drain(self) -> None:
        batch, self.queue = list(self.queue), deque()
        for cur in batch:
            cur.hold = self.recorder.hold(self.sim.now, "worker")
            self._send(cur, 0)
        self.sim.after(self.BATCH_INTERVAL_S, self._drain)

    def call_ready(self, cur: Cursor) -> None:
        self.queue.append(cur)

    def _send(self, cur: Cursor, retries_done: int) -> None:
        attempt = self.link.send(cur.record, lambda a: self._answered(cur, a, retries_done))
        cur.attempt = attempt
        if attempt.hung:
            cur.hold.hung_since = self.sim.now
            self.sim.after(self.SDK_TIMEOUT_S, lambda: self._timeout(cur, attempt))

    def _timeout(self, cur: Cursor, attempt: Attempt) -> None:
        if attempt.abandoned or attempt.finished_at is not None:
            return
        attempt.abandoned = True
        self._give_up(cur)

    def _answered(self, cur: Cursor, attempt: Attempt, retries_done: int) -> None:
        if attempt.answer.admitted:
            _productive(cur.hold, attempt)
            self.recorder.release(self.sim.now, cur.hold)
            cur.hold = None
            self.call_done(cur)
        elif retries_done < self.SDK_RETRIES:
            wait = _sdk_backoff(self.rng, attempt.answer.retry_after_s, retries_done)
            self.sim.after(wait, lambda: self._send(cur, retries_done + 1))
        else:
            self._give_up(cur)

    def _give_up(self, cur: Cursor) -> None:
        self.recorder.release(self.sim.now, cur.hold)
        cur.hold = None
        self.queue.append(cur)


# ---------------------------------------------------------------------------------------
class LitellmRouter(Policy):
    """LiteLLM Router in front of one deployment.

    Sources: LiteLLM docs "Retries, fallbacks and cooldowns"
    (docs.litellm.ai/docs/router/learn/reliability): the router is the only retry loop
    (provider SDK max_retries = 0), a cooldown takes a deployment out of every pick for a few
    seconds; Router(num_retries, allowed_fails, cooldown_time, timeout=600,
    max_parallel_requests) in the Router API docs; BerriAI/litellm
    `litellm/router_utils/cooldown_handlers.py`: DEFAULT_COOLDOWN_TIME_SECONDS = 5, and
    without an allowed_fails_policy a deployment is cooled down when more than 50%
    (DEFAULT_FAILURE_THRESHOLD_PERCENT) of its requests this minute failed, never on the
    minute's first request. The retry sleep follows `_time_to_sleep_before_retry`: the
    response's retry-after when present (<= 60 s), else exponential backoff.

    Model: max_parallel_requests = --lanes (a FIFO semaphore held per attempt, as the
    router acquires it around each deployment call); num_retries = 2; cooldown 5 s by the
    50%-of-this-minute rule; while cooled down a call fails at once with "no deployments
    available" and is retried like a 429. After the retries the error reaches the agent,
    which calls again after 1 s (ASSUMPTION: an application-level retry; without it the work
    would be lost, and every policy must finish the same work). Hung calls hold their permit
    until the 600 s router timeout. Note: recent LiteLLM skips cooldown for a model group
    with a single deployment below 1000 requests/min; keeping the cooldown is the
    configuration the issue asks for and only makes this baseline more careful.
    """
    name = "litellm-router"
    NUM_RETRIES = 2
    COOLDOWN_S = 5.0
    FAILURE_THRESHOLD = 0.5
    TIMEOUT_S = 600.0
    APP_RETRY_S = 1.0

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.permits = ctx.lanes
        self.waiting: deque[tuple[Cursor, int]] = deque()
        self.cooldown_until = -1.0
        self.minute = -1
        self.minute_ok = 0
        self.minute_failed = 0

    def call_ready(self, cur: Cursor) -> None:
        self._try(cur, 0)

    def _count(self, ok: bool) -> None:
        minute = int(self.sim.now // 60)
        if minute != self.minute:
            self.minute, self.minute_ok, self.minute_failed = minute, 0, 0
        if ok:
            self.minute_ok += 1
            return
        self.minute_failed += 1
        total = self.minute_ok + self.minute_failed
        if total > 1 and self.minute_failed / total > self.FAILURE_THRESHOLD:
            self.cooldown_until = self.sim.now + self.COOLDOWN_S

    def _try(self, cur: Cursor, retries_done: int) -> None:
        if self.sim.now < self.cooldown_until:
            self._failed(cur, retries_done, retry_after=None)
            return
        if self.permits > 0:
            self.permits -= 1
            self._send(cur, retries_done)
        else:
            self.waiting.append((cur, retries_done))

    def _send(self, cur: Cursor, retries_done: int) -> None:
        cur.hold = self.recorder.hold(self.sim.now, "permit")
        attempt = self.link.send(cur.record, lambda a: self._answered(cur, a, retries_done))
        cur.attempt = attempt
        if attempt.hung:
            cur.hold.hung_since = self.sim.now
            self.sim.after(self.TIMEOUT_S, lambda: self._timeout(cur, attempt, retries_done))

    def _release(self, cur: Cursor) -> None:
        self.recorder.release(self.sim.now, cur.hold)
        cur.hold = None
        self.permits += 1
        while self.permits > 0 and self.waiting:
            nxt, retries = self.waiting.popleft()
            if self.sim.now < self.cooldown_until:
                self._failed(nxt, retries, retry_after=None)
                continue
            self.permits -= 1
            self._send(nxt, retries)

    def _timeout(self, cur: Cursor, attempt: Attempt, retries_done: int) -> None:
        if attempt.abandoned or attempt.finished_at is not None:
            return
        attempt.abandoned = True
        self._release(cur)
        self._count(False)
        self._failed(cur, retries_done, retry_after=None)

    def _answered(self, cur: Cursor, attempt: Attempt, retries_done: int) -> None:
        if attempt.answer.admitted:
            _productive(cur.hold, attempt)
            self._release(cur)
            self._count(True)
            self.call_done(cur)
            return
        self._release(cur)
        self._count(False)
        self._failed(cur, retries_done, attempt.answer.retry_after_s)

    def _failed(self, cur: Cursor, retries_done: int, retry_after: float | None) -> None:
        if retries_done < self.NUM_RETRIES:
            wait = _sdk_backoff(self.rng, retry_after, retries_done)
            self.sim.after(wait, lambda: self._try(cur, retries_done + 1))
        else:
            self.sim.after(self.APP_RETRY_S, lambda: self._try(cur, 0))


# What the simulated AgentRM client pays per turn, measured through the real service by the
# live check at the default workload's own rate (`agentrm bench live --agents 200 --minutes 5
# --compression 1 --hang-rate 0.01 --lease-seconds 30`: the API under uvicorn in its own
# process, 200 client tasks and the fake provider in another, on this shared 2-core machine):
# - grant -> the call arrives at the provider: the grant's commit, the requestTurn answer,
#   the client starting its request;
# - the provider's last byte -> the scheduler's decision: the completeTurn round trip, its
#   append, the scheduler's pass.
# Three such runs gave 7.4/6.8, 6.9/6.5 and 9.0/8.3 ms (the machine's load varies); the
# benchmark takes the largest, rounded up to the millisecond. Before the API cached parsed
# documents and woke only satisfied waiters they were 20 and 30 ms; the `slow-clients`
# scenario keeps those.
MEASURED_CLIENT_DELAY_S = 0.009
MEASURED_REPORT_DELAY_S = 0.009


# ---------------------------------------------------------------------------------------
class AgentRM(Policy):
    """The real AgentRM core: MLFQ levels, leases and rate-limit-aware admission.

    The simulation plays the pool's scheduler loop (one writer: inputs folded in order,
    `decide` answering each, `next_deadline` arming the one timer) and the agents' client
    library:
    - before each LLM call the client requests a turn (estimated tokens = the prompt's exact
      count, max output = the call's max_tokens) and waits for the grant; it learns of
      grants, reaps and cancels `client_delay_s` later, as over a subscription;
    - it requests turns with `streams: true`: it heartbeats when the answer's first chunk
      arrives and then every lease/3 s from the task that reads the stream, i.e. only after
      a chunk has arrived. A call that never returns sends no chunk, so it never heartbeats
      and is reaped at its start deadline. (A client that heartbeats from an independent
      timer would keep a hung call's lease alive forever; tying heartbeats to stream
      progress is the behaviour a correct client library must have.)
    - it calls completeTurn with the outcome, the usage and the provider's x-ratelimit-*
      headers; on a 429 it reports RATE_LIMITED and requests a new turn at once (the scheduler
      is the only retry loop and decides when the retry may go);
    - when its turn is reaped it aborts the hung request and requests a new turn for the call;
    - tool time happens outside any turn.
    """
    name = "agentrm"

    def __init__(self, ctx: Context, settings: PoolSettings):
        super().__init__(ctx)
        self.settings = settings
        # The lane is held through both delays; the live check passes in what it measured
        # in its own run, the benchmark uses MEASURED_*_DELAY_S.
        self.client_delay_s = float(ctx.options.get("client_delay_s", MEASURED_CLIENT_DELAY_S))
        self.report_delay_s = float(ctx.options.get("report_delay_s", MEASURED_REPORT_DELAY_S))
        self.heartbeat_s = settings.lease_seconds / 3.0
        self.state = new_pool({"settings": settings.to_dict(), "at": 0.0})
        for cur in self.cursors:
            registration = {"agent_id": cur.agent.agent_id, "name": cur.agent.agent_id,
                            "priority_class": cur.agent.priority_class}
            # Registration is an input the pool's scheduler answers (AgentAdmitted); a core
            # that folds it directly instead is served by apply().
            decide(self.state, ev.AGENT_REGISTERED, registration, 0.0)
            if cur.agent.agent_id not in self.state.agents:
                apply(self.state, ev.AGENT_REGISTERED, registration)
        self.by_turn: dict[str, Cursor] = {}
        self.turn_count = 0
        self.tick_at: float | None = None
        self.decisions = 0
        self.reaps = 0
        self.spurious_reaps = 0  # reaps of calls that were not hung (the deadline was too short)
        self.quarantined: set[str] = set()

    # -- the scheduler loop ---------------------------------------------------------------
    def _decide(self, input_type: str | None, data: dict | None) -> None:
        out = decide(self.state, input_type, data, self.sim.now)
        self.decisions += len(out)
        for type_, d in out:
            self._react(type_, d)
        self._arm_timer()

    def _arm_timer(self) -> None:
        deadline = next_deadline(self.state, self.sim.now)
        if deadline is None:
            return
        if self.tick_at is not None and self.tick_at <= deadline and self.tick_at >= self.sim.now:
            return
        self.tick_at = deadline
        self.sim.at(deadline, lambda when=deadline: self._tick(when))

    def _tick(self, when: float) -> None:
        if self.tick_at != when:
            return  # superseded by an earlier timer
        self.tick_at = None
        self._decide(None, None)

    def _react(self, type_: str, d: dict) -> None:
        cur = self.by_turn.get(d.get("turn_id", ""))
        if cur is None:
            if type_ == ev.AGENT_QUARANTINED:
                self.quarantined.add(d["agent_id"])
            return
        if type_ == ev.TURN_GRANTED:
            cur.hold = self.recorder.hold(self.sim.now, f"lane{d['lane']}")
            token = cur.token
            self.sim.after(self.client_delay_s, lambda: self._granted(cur, d["turn_id"], token))
        elif type_ == ev.TURN_COMPLETED:
            self._drop_turn(cur, d["turn_id"])
        elif type_ == ev.TURN_REAPED:
            self.reaps += 1
            if cur.attempt is not None and cur.attempt.record is cur.record and not cur.attempt.hung:
                self.spurious_reaps += 1
            self._drop_turn(cur, d["turn_id"])
            cur.token += 1
            if cur.attempt is not None and cur.attempt.finished_at is None:
                cur.attempt.abandoned = True
            self.sim.after(self.client_delay_s, lambda: self._request_turn(cur))
        elif type_ == ev.TURN_CANCELLED:
            self._drop_turn(cur, d["turn_id"])
            cur.token += 1
            cur.stuck = True  # quarantined: an operator must release the agent

    def _drop_turn(self, cur: Cursor, turn_id: str) -> None:
        self.by_turn.pop(turn_id, None)
        if cur.hold is not None:
            self.recorder.release(self.sim.now, cur.hold)
            cur.hold = None

    # -- the client library ---------------------------------------------------------------
    def call_ready(self, cur: Cursor) -> None:
        self._request_turn(cur)

    def _request_turn(self, cur: Cursor) -> None:
        self.turn_count += 1
        turn_id = f"{cur.record.call.call_id}-t{self.turn_count}"
        self.by_turn[turn_id] = cur
        call = cur.record.call
        self._decide(ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": cur.agent.agent_id,
                                         "estimated_tokens": call.prompt_tokens,
                                         "max_output_tokens": call.max_output_tokens, "at": self.sim.now,
                                         "streams": True})

    def _granted(self, cur: Cursor, turn_id: str, token: int) -> None:
        if cur.token != token or turn_id not in self.by_turn:
            return
        attempt = self.link.send(cur.record, lambda a: self._answered(cur, turn_id, a))
        cur.attempt = attempt
        if attempt.hung:
            cur.hold.hung_since = self.sim.now
        elif attempt.answer.admitted:
            self.sim.after(attempt.first_chunk_s, lambda: self._heartbeat(cur, turn_id, attempt))

    def _heartbeat(self, cur: Cursor, turn_id: str, attempt: Attempt) -> None:
        if attempt.finished_at is not None or attempt.abandoned or turn_id not in self.by_turn:
            return
        # The heartbeat travels like a completion report (report_delay_s).
        self._after_report_delay(lambda: self._decide(ev.HEARTBEAT_SENT, {"turn_id": turn_id})
                                 if turn_id in self.by_turn else None)
        self.sim.after(self.heartbeat_s, lambda: self._heartbeat(cur, turn_id, attempt))

    def _after_report_delay(self, callback) -> None:
        if self.report_delay_s > 0:
            self.sim.after(self.report_delay_s, callback)
        else:
            callback()

    def _answered(self, cur: Cursor, turn_id: str, attempt: Attempt) -> None:
        self._after_report_delay(lambda: self._report(cur, turn_id, attempt))

    def _report(self, cur: Cursor, turn_id: str, attempt: Attempt) -> None:
        if turn_id not in self.by_turn:
            return
        call, ok = cur.record.call, attempt.answer.admitted
        if ok:
            _productive(cur.hold, attempt)
        self._decide(ev.COMPLETION_REPORTED, {
            "turn_id": turn_id, "outcome": ev.OK if ok else ev.RATE_LIMITED,
            "prompt_tokens": call.prompt_tokens if ok else 0,
            "completion_tokens": call.output_tokens if ok else 0,
            "retry_after_seconds": None if ok else attempt.answer.retry_after_s,
            "rate_limit_headers": attempt.answer.headers})
        if ok:
            self.call_done(cur)
        else:
            self._request_turn(cur)

    def finish(self) -> None:
        super().finish()
        self.recorder.notes.update({"decisions": self.decisions, "reaps": self.reaps,
                                    "spurious_reaps": self.spurious_reaps,
                                    "quarantined_agents": len(self.quarantined),
                                    "rate_factor_end": round(self.state.rate_factor, 3)})


def agentrm_settings(lanes: int, rpm: int, tpm: int, **overrides) -> PoolSettings:
    """The PoolSettings the benchmark runs the core with. Only the provider's limits and the
    lane count come from the workload; everything else is the core's default unless the
    benchmark's published choices (scheduler_bench.AGENTRM_DEFAULTS) override it."""
    return PoolSettings(name="bench", lanes=lanes, rpm=rpm, tpm=tpm, **overrides).validate()


POLICY_NAMES = ("agentrm", "lanes-fifo", "aios-fifo", "litellm-router")


def make_policy(name: str, ctx: Context, agentrm_overrides: dict | None = None) -> Policy:
    if name == "agentrm":
        return AgentRM(ctx, agentrm_settings(ctx.lanes, ctx.provider.rpm, ctx.provider.tpm,
                                             **(agentrm_overrides or {})))
    classes = {"lanes-fifo": LanesFifo, "aios-fifo": AiosFifo, "litellm-router": LitellmRouter}
    return classes[name](ctx)

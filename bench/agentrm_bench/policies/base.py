"""What every policy of the scheduler benchmark shares: the agents' workflow over the trace,
and the few client behaviours several real systems have in common (the openai SDK's retry
backoff).

A policy decides how a requested call reaches the provider (`call_ready`) and reports a
success with `call_done`; everything else (runs, think time, tool time, cron instants, the
recorder's bookkeeping) is here, the same for all, so that metrics mean the same thing for
every policy.

How a policy uses the simulator (sim.py):
- `self.link.send(record, on_answer, hold=hold, on_first_chunk=cb)` sends one attempt; pass
  the slot the attempt runs in as `hold` so in-flight, productive and hung seconds are
  credited to it. `on_answer(attempt)` fires for every answered attempt (a 429 after 0.2 s,
  or the last byte of a success); a hung attempt never answers.
- `attempt.abandon(now)` closes an attempt the client gives up on (timeout, reap); cutting
  one that would have answered counts as a live call cut.
- `Watchdog(self.sim, attempt, first_chunk_s, idle_s, on_fire)` is an HTTP read timeout on a
  stream: it fires when nothing came for first_chunk_s before the first chunk or idle_s
  between chunks.
- `self.recorder.hold(now, name)` / `self.recorder.release(now, hold)` open and close a slot.
- `self.recorder.failed(record)` when an error reaches the agent after the policy's own
  retries; the agent then asks again (`self.agent_retry(cur)`), since every policy must
  finish the same work.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import cast

from ..sim import (
    Attempt,
    CallRecord,
    Provider,
    ProviderLink,
    Recorder,
    RunRecord,
    Simulator,
    SlotHold,
)
from ..workload import AgentScript, Trace

# After the policy's own retries give up, the agent's framework surfaces the error and the
# agent tries the step again this much later. ASSUMPTION, the same for every policy that can
# give up: without it the work would be lost and policies would not finish the same work.
AGENT_RETRY_S = 1.0


@dataclass
class Cursor:
    """Where one agent is in its script."""
    agent: AgentScript
    run_index: int = 0
    call_index: int = 0
    record: CallRecord | None = None
    run_record: RunRecord | None = None
    hold: SlotHold | None = None           # a slot held across calls (openclaw-lanes holds a run)
    attempt: Attempt | None = None
    token: int = 0                         # bumps whenever pending callbacks become stale
    stuck: bool = False                    # the policy will never serve this agent again
    extra: dict = field(default_factory=dict)  # a policy's own per-agent state

    @property
    def run(self):
        return self.agent.runs[self.run_index]

    @property
    def call(self):
        return self.run.calls[self.call_index]

    @property
    def run_key(self) -> str:
        return f"{self.agent.agent_id}-r{self.run_index}"


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

    def __init__(self, ctx: Context, agents: tuple[AgentScript, ...] | None = None):
        self.ctx = ctx
        self.sim, self.recorder, self.link = ctx.sim, ctx.recorder, ctx.link
        # One jitter stream per seed, the same for every policy: two policies that behave
        # alike then draw alike, and a difference in the report is a difference in policy.
        self.rng = random.Random(f"{ctx.seed}/jitter")
        self.cursors = [Cursor(agent) for agent in (ctx.trace.agents if agents is None else agents) if agent.runs]

    def start(self) -> None:
        for cursor in self.cursors:
            self._schedule_run(cursor, 0.0)

    def finish(self) -> None:
        """Hook: the simulated period is over (a policy may add notes to the recorder)."""

    # -- workflow -----------------------------------------------------------------------
    def _schedule_run(self, cur: Cursor, previous_end: float) -> None:
        run = cur.run
        self.sim.at(max(previous_end + run.idle_before_s, run.not_before_s), lambda: self._run_ready(cur))

    def _run_ready(self, cur: Cursor) -> None:
        cur.run_record = self.recorder.run_started(self.sim.now, cur.run_key, cur.agent.agent_id,
                                                   cur.agent.priority_class, len(cur.run.calls))
        self.run_ready(cur)

    def run_ready(self, cur: Cursor) -> None:
        """Hook: a run's first call is due (openclaw-lanes queues the run for a lane here)."""
        self._begin_call(cur)

    def _begin_call(self, cur: Cursor) -> None:
        cur.record = self.recorder.request(self.sim.now, cur.call, cur.agent.agent_id, cur.agent.priority_class,
                                           cur.run_key)
        self.call_ready(cur)

    def call_ready(self, cur: Cursor) -> None:
        raise NotImplementedError  # abstract: each policy sends the call its own way

    def call_done(self, cur: Cursor) -> None:
        tool = cur.call.tool_after_s
        if cur.call_index + 1 < len(cur.run.calls):
            cur.call_index += 1
            # Tool time happens here, between calls; whether a slot is held through it is
            # the policy's business (openclaw-lanes holds its run's lane).
            self.sim.after(tool, lambda: self._begin_call(cur))
            return
        if cur.run_record is not None:
            cur.run_record.completed_at = self.sim.now
        self.run_done(cur)
        cur.run_index += 1
        cur.call_index = 0
        if cur.run_index < len(cur.agent.runs):
            self._schedule_run(cur, self.sim.now)

    def run_done(self, cur: Cursor) -> None:
        """Hook: a run settled."""

    def agent_retry(self, cur: Cursor, delay: float = AGENT_RETRY_S) -> None:
        """The error reached the agent; it asks for the same call again after `delay`."""
        self.recorder.failed(cast(CallRecord, cur.record))   # a call was made
        token = cur.token
        self.sim.after(delay, lambda: self.call_ready(cur) if cur.token == token else None)


# openai-python src/openai/_constants.py: the SDK's retry constants (snapshot 2026-08).
SDK_DEFAULT_TIMEOUT_S = 600.0
SDK_DEFAULT_MAX_RETRIES = 2
SDK_INITIAL_RETRY_DELAY_S = 0.5
SDK_MAX_RETRY_DELAY_S = 8.0
SDK_MAX_RETRY_AFTER_DELAY_S = 120.0   # 60 s before openai/openai-python#3555 (2026-07)


def sdk_backoff(rng: random.Random, retry_after: float | None, retries_done: int) -> float:
    """openai-python `_calculate_retry_timeout` (src/openai/_base_client.py): honour
    retry-after when 0 < it <= MAX_RETRY_AFTER_DELAY, otherwise 0.5 s * 2^n capped at 8 s,
    minus up to 25% jitter. Every SDK-based client of the benchmark sleeps through this."""
    if retry_after is not None and 0 < retry_after <= SDK_MAX_RETRY_AFTER_DELAY_S:
        return retry_after
    sleep = min(SDK_INITIAL_RETRY_DELAY_S * 2.0 ** min(retries_done, 1000), SDK_MAX_RETRY_DELAY_S)
    return max(0.0, sleep * (1 - 0.25 * rng.random()))

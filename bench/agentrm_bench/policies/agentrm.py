"""AgentRM itself: not a model of it, the real domain core (`decide`, `apply`,
`next_deadline`) run on the simulator's clock, with the agents' client library played
around it. `agentrm-fifo` and `agentrm-nodeadline` are ablations of the same core (MLFQ off;
the start deadline off), set only through PoolSettings.
"""
from __future__ import annotations

import random
from typing import cast

from app.domain import events as ev
from app.domain.apply import apply, new_pool
from app.domain.decide import decide, decide_events, next_deadline
from app.domain.settings import PoolSettings

from ..sim import Attempt, CallRecord, SlotHold
from .base import Context, Cursor, Policy

# What the simulated AgentRM client pays per turn, measured through the real service by the
# live check at the default workload's own rate (`agentrm bench live --agents 200 --minutes 5
# --compression 1 --hang-rate 0.01 --lease-seconds 30`: the API under uvicorn in its own
# process, 200 client tasks and the fake provider in another, on this shared 2-core machine):
# - grant -> the call arrives at the provider: the grant's commit, the requestTurn answer,
#   the client starting its request;
# - the provider's last byte -> the scheduler's decision: the completeTurn round trip, its
#   append, the scheduler's pass.
# Three such runs gave 7.4/6.8, 6.9/6.5 and 9.0/8.3 ms (the machine's load varies); the
# benchmark takes the largest, rounded up to the millisecond.
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
    - it names the run each call belongs to (`runId`: the chat answer, the job, the cron
      firing), as a client that knows its own program does, so the pool can charge the run;
    - it requests turns with `streams: true`: it heartbeats when the answer's first chunk
      arrives and then every stall_timeout/3 s (lease/3 without a stall deadline) from the
      task that reads the stream, i.e. only while chunks arrive. A call that never returns
      sends no chunk, so it never heartbeats and is reaped at its start deadline. (A client
      that heartbeats from an independent timer would keep a hung call's lease alive
      forever; tying heartbeats to stream progress is the behaviour a correct client
      library must have.)
    - it calls completeTurn with the outcome, the usage and the provider's x-ratelimit-*
      headers; on a 429 it reports RATE_LIMITED and requests a new turn at once (the scheduler
      is the only retry loop and decides when the retry may go);
    - when its turn is reaped it aborts the hung request and requests a new turn for the call;
    - tool time happens outside any turn.
    """
    name = "agentrm"

    def __init__(self, ctx: Context, settings: PoolSettings, agents=None):
        super().__init__(ctx, agents)
        self.settings = settings
        # The lane is held through both delays; the live check passes in what it measured
        # in its own run, the benchmark uses MEASURED_*_DELAY_S.
        self.client_delay_s = float(ctx.options.get("client_delay_s", MEASURED_CLIENT_DELAY_S))
        self.report_delay_s = float(ctx.options.get("report_delay_s", MEASURED_REPORT_DELAY_S))
        # A live check may pass the delays it measured one by one instead (`*_samples`): on a
        # loaded machine they are heavy-tailed, and a constant mean puts every call past a
        # deadline that only the tail crosses live. Drawn from a seeded stream of their own.
        self._delay_rng = random.Random(f"{ctx.seed}/client-delays")
        self._client_samples = list(ctx.options.get("client_delay_samples") or ())
        self._report_samples = list(ctx.options.get("report_delay_samples") or ())
        # A streaming client heartbeats with its chunks: a third of the stall deadline apart
        # while they flow (a third of the lease where there is none), so a live stream is
        # never taken for a stalled one.
        stall = settings.stall_timeout_seconds
        self.heartbeat_s = min(settings.lease_seconds, stall if stall is not None else settings.lease_seconds) / 3.0
        # The client streams and promises a heartbeat at the first chunk (`streams: true`);
        # agentrm-nodeadline asks with streams false, so its grants keep the plain lease.
        self.streams = bool(ctx.options.get("streams", True))
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
        out = decide_events(self.state, input_type, data, self.sim.now)
        self.decisions += len(out)
        for d in out:
            self._react(d)
        self._arm_timer()

    def _arm_timer(self) -> None:
        deadline = next_deadline(self.state, self.sim.now)
        if deadline is None:
            return
        if self.tick_at is not None and self.tick_at <= deadline and self.tick_at >= self.sim.now:
            return
        self.tick_at = deadline
        self.sim.at(deadline, lambda when=deadline: self._tick(when))  # type: ignore[misc]  # bound now

    def _tick(self, when: float) -> None:
        if self.tick_at != when:
            return  # superseded by an earlier timer
        self.tick_at = None
        self._decide(None, None)

    def _react(self, d: ev.Decided) -> None:
        cur = self.by_turn.get(getattr(d, "turn_id", ""))
        if cur is None:
            if isinstance(d, ev.AgentQuarantined):
                self.quarantined.add(d.agent_id)
            return
        if isinstance(d, ev.TurnGranted):
            cur.hold = self.recorder.hold(self.sim.now, f"lane{d.lane}")
            token = cur.token
            self.sim.after(self._client_delay(), lambda: self._granted(cur, d.turn_id, token))
        elif isinstance(d, ev.TurnCompleted):
            self._drop_turn(cur, d.turn_id)
        elif isinstance(d, ev.TurnReaped):
            self.reaps += 1
            if cur.attempt is not None and cur.attempt.record is cur.record and not cur.attempt.hung:
                self.spurious_reaps += 1
            self._drop_turn(cur, d.turn_id)
            cur.token += 1
            if cur.attempt is not None and cur.attempt.ended_at is None:
                cur.attempt.abandon(self.sim.now)
            self.sim.after(self._client_delay(), lambda: self._request_turn(cur))
        elif isinstance(d, ev.TurnCancelled):
            self._drop_turn(cur, d.turn_id)
            cur.token += 1
            cur.stuck = True  # quarantined: an operator must release the agent
            # The client's call ends in an error the agent cannot retry: a failed call, and
            # an agent this policy no longer serves (its remaining work is lost).
            self.recorder.failed(cast(CallRecord, cur.record))
            self.recorder.stuck_agents += 1

    def _drop_turn(self, cur: Cursor, turn_id: str) -> None:
        self.by_turn.pop(turn_id, None)
        if cur.hold is not None:
            self.recorder.release(self.sim.now, cur.hold)
            cur.hold = None

    # -- the client library ---------------------------------------------------------------
    def call_ready(self, cur: Cursor) -> None:
        self._request_turn(cur)

    def _request_turn(self, cur: Cursor) -> None:
        self._ask(cur, self._next_turn_id(cur))

    def _next_turn_id(self, cur: Cursor) -> str:
        self.turn_count += 1
        return f"{cast(CallRecord, cur.record).call.call_id}-t{self.turn_count}"

    def _ask(self, cur: Cursor, turn_id: str, **fields) -> None:
        """requestTurn for the cursor's call (`fields`: more of TurnRequested's, as a gateway
        that holds the turn sends)."""
        self.by_turn[turn_id] = cur
        call = cast(CallRecord, cur.record).call
        self._decide(ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": cur.agent.agent_id,
                                         "estimated_tokens": call.prompt_tokens,
                                         "max_output_tokens": call.max_output_tokens, "at": self.sim.now,
                                         "streams": self.streams, "run_id": cur.run_key, **fields})

    def _granted(self, cur: Cursor, turn_id: str, token: int) -> None:
        if cur.token != token or turn_id not in self.by_turn:
            return
        attempt = self.link.send(cast(CallRecord, cur.record), lambda a: self._answered(cur, turn_id, a), hold=cur.hold,
                                 on_first_chunk=lambda a: self._heartbeat(cur, turn_id, a))
        cur.attempt = attempt
        if attempt.hung:
            cast(SlotHold, cur.hold).hung_since = attempt.hung_from

    def _heartbeat(self, cur: Cursor, turn_id: str, attempt: Attempt) -> None:
        # Heartbeats come from the code that reads the stream: only while chunks flow, so a
        # stream that stalls stops heartbeating and its lease runs out.
        if not attempt.streaming(self.sim.now) or turn_id not in self.by_turn:
            return
        # The heartbeat travels like a completion report (report_delay_s).
        self._after_report_delay(lambda: self._decide(ev.HEARTBEAT_SENT, {"turn_id": turn_id})
                                 if turn_id in self.by_turn else None)
        self.sim.after(self.heartbeat_s, lambda: self._heartbeat(cur, turn_id, attempt))

    def _client_delay(self) -> float:
        if self._client_samples:
            return self._client_samples[self._delay_rng.randrange(len(self._client_samples))]
        return self.client_delay_s

    def _after_report_delay(self, callback) -> None:
        delay = self._report_samples[self._delay_rng.randrange(len(self._report_samples))] \
            if self._report_samples else self.report_delay_s
        if delay > 0:
            self.sim.after(delay, callback)
        else:
            callback()

    def _answered(self, cur: Cursor, turn_id: str, attempt: Attempt) -> None:
        self._after_report_delay(lambda: self._report(cur, turn_id, attempt))

    def _report(self, cur: Cursor, turn_id: str, attempt: Attempt) -> None:
        if turn_id not in self.by_turn:
            return
        call, ok = cast(CallRecord, cur.record).call, attempt.answer.admitted
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
        self.recorder.quarantined_agents += len(self.quarantined)
        self.recorder.notes.update({"decisions": self.decisions, "reaps": self.reaps,
                                    "spurious_reaps": self.spurious_reaps,
                                    "rate_factor_end": round(self.state.rate_factor, 3)})


def agentrm_settings(lanes: int, rpm: int, tpm: int, **overrides) -> PoolSettings:
    """The PoolSettings the benchmark runs the core with. Only the provider's limits and the
    lane count come from the workload; everything else is the core's default unless the
    benchmark's published choices (scheduler_bench.AGENTRM_DEFAULTS) override it."""
    return PoolSettings(name="bench", lanes=lanes, rpm=rpm, tpm=tpm, **overrides).validate()


# The ablations: the same core with one mechanism switched off through its settings.
VARIANTS: dict[str, tuple[dict, dict]] = {
    # name: (PoolSettings overrides, client options)
    "agentrm": ({}, {}),
    "agentrm-fifo": ({"policy": "fifo", "levels": 1}, {}),      # MLFQ off: one FIFO level
    "agentrm-nodeadline": ({}, {"streams": False}),             # start deadline off: plain lease
    # Not an ablation: the same core reached through the /v1 gateway, which holds the turns
    # (agentrm_gateway.py), with agents on the openai SDK.
    "agentrm-gateway": ({}, {}),
}


def make_agentrm(name: str, ctx: Context, overrides: dict | None = None, agents=None,
                 policy_class: type[AgentRM] = AgentRM) -> AgentRM:
    """The variant `name` of the core, played by `policy_class` (agentrm_gateway.py's for
    agentrm-gateway: the registry in __init__.py picks it)."""
    settings_overrides, client = VARIANTS[name]
    ctx.options = {**ctx.options, **client}
    settings = agentrm_settings(ctx.lanes, ctx.provider.rpm, ctx.provider.tpm,
                                **{**(overrides or {}), **settings_overrides})
    policy = policy_class(ctx, settings, agents)
    policy.name = name
    return policy

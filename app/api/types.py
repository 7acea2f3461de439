"""GraphQL types of the public contract (CONTRACT.md). Names are the contract: keep them."""
from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import overload

import strawberry
from strawberry.scalars import JSON

from app.domain.settings import PoolSettings
from app.projections.documents import AgentView, TurnDoc


@overload
def ts(value: float) -> datetime: ...
@overload
def ts(value: None) -> None: ...
@overload
def ts(value: float | None) -> datetime | None: ...


def ts(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, tz=UTC)


@strawberry.enum
class PriorityClass(Enum):
    INTERACTIVE = "INTERACTIVE"
    BATCH = "BATCH"
    BACKGROUND = "BACKGROUND"


@strawberry.enum(name="AgentState")
class AgentStateEnum(Enum):
    ACTIVE = "ACTIVE"
    HIBERNATED = "HIBERNATED"
    QUARANTINED = "QUARANTINED"


@strawberry.enum
class TurnStatus(Enum):
    QUEUED = "QUEUED"
    GRANTED = "GRANTED"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    REAPED = "REAPED"


@strawberry.enum
class Outcome(Enum):
    OK = "OK"
    RATE_LIMITED = "RATE_LIMITED"
    ERROR = "ERROR"


@strawberry.enum(description="The order in which a pool grants its queued turns (README: Scheduling rules).")
class SchedulingPolicy(Enum):
    DEADLINE = "deadline"
    MLFQ = "mlfq"
    FIFO = "fifo"


@strawberry.enum(description="The shape of the provider's rate limiter a pool admits against "
                            "(docs/concepts/rate-admission.md).")
class RateLimiter(Enum):
    SLIDING_WINDOW = "sliding-window"
    FIXED_WINDOW = "fixed-window"
    TOKEN_BUCKET = "token-bucket"


@strawberry.enum(description="What the gateway does with an agent's conversation (docs/guides/gateway.md).")
class ContextMode(Enum):
    OFF = "off"
    MANAGED = "managed"


@strawberry.type
class Pool:
    name: str
    lanes: int
    rpm: int
    tpm: int
    lease_seconds: float
    start_timeout_floor_seconds: float
    levels: int
    boost_seconds: float
    tokenizer: str
    upstream_base_url: str | None
    has_upstream_api_key: bool
    # The scheduling rules' settings (PoolInput describes each).
    policy: SchedulingPolicy
    class_slack_seconds: list[float]
    run_slack_per_service: float
    run_slack_cap_seconds: float
    size_slack_per_ktoken: float
    size_slack_cap_seconds: float
    run_forget_seconds: float
    output_credit_per_ktoken: float
    output_credit_cap_seconds: float
    agent_backlog_slack_seconds: float = strawberry.field(description=(
        "DEADLINE: seconds of slack per turn an agent holds or has queued beyond one; 0: off "
        "(a pool created before the rule)."))
    agent_backlog_slack_cap_seconds: float
    adaptive_lanes: bool
    adaptive_lanes_initial: int
    adaptive_lanes_minimum: int
    stall_timeout_seconds: float | None
    outage_after_silent_reaps: int
    probe_backoff_cap: int
    request_timeout_seconds: float
    stream_idle_timeout_seconds: float
    model_timeouts: list[ModelTimeout]
    limiter: RateLimiter
    limiter_window_seconds: float
    agent_retry_after_cap_seconds: float | None = strawberry.field(description=(
        "The longest pause an agent's own report of a 429 may cause; null: agents' reports are trusted "
        "(a pool created before the rule)."))
    light_agent_reserve: float = strawberry.field(description=(
        "The share of the rate budget and of the lanes (rounded up; none of a one-lane pool) that only a "
        "light agent (no other turn of its own queued or held) may take, or a turn that has waited "
        "agentBacklogSlackCapSeconds; 0: none (a pool created before the rule)."))
    context_mode: ContextMode = strawberry.field(description=(
        "MANAGED: the gateway keeps each agent's conversation and forwards a prompt assembled within "
        "the model's window; OFF: it forwards what the client sent."))
    context_window_tokens: int | None = strawberry.field(description=(
        "Managed context: the window of a model the gateway does not know; null: 128,000."))

    @classmethod
    def of(cls, s: PoolSettings, has_upstream_api_key: bool, *, show_upstream: bool = True) -> Pool:
        return cls(name=s.name, lanes=s.lanes, rpm=s.rpm, tpm=s.tpm, lease_seconds=s.lease_seconds,
                   start_timeout_floor_seconds=s.start_timeout_floor_seconds, levels=s.levels,
                   boost_seconds=s.boost_seconds, tokenizer=s.tokenizer,
                   upstream_base_url=s.upstream_base_url if show_upstream else None,
                   has_upstream_api_key=has_upstream_api_key,
                   policy=SchedulingPolicy(s.policy), class_slack_seconds=list(s.class_slack_seconds),
                   run_slack_per_service=s.run_slack_per_service, run_slack_cap_seconds=s.run_slack_cap_seconds,
                   size_slack_per_ktoken=s.size_slack_per_ktoken, size_slack_cap_seconds=s.size_slack_cap_seconds,
                   run_forget_seconds=s.run_forget_seconds, output_credit_per_ktoken=s.output_credit_per_ktoken,
                   output_credit_cap_seconds=s.output_credit_cap_seconds,
                   agent_backlog_slack_seconds=s.agent_backlog_slack_seconds,
                   agent_backlog_slack_cap_seconds=s.agent_backlog_slack_cap_seconds,
                   adaptive_lanes=s.adaptive_lanes,
                   adaptive_lanes_initial=s.adaptive_lanes_initial,
                   adaptive_lanes_minimum=s.adaptive_lanes_minimum,
                   stall_timeout_seconds=s.stall_timeout_seconds,
                   outage_after_silent_reaps=s.outage_after_silent_reaps, probe_backoff_cap=s.probe_backoff_cap,
                   request_timeout_seconds=s.request_timeout_seconds,
                   stream_idle_timeout_seconds=s.stream_idle_timeout_seconds,
                   model_timeouts=[ModelTimeout(model=m, request_timeout_seconds=r, stream_idle_timeout_seconds=i)
                                   for m, r, i in s.model_timeouts],
                   # A pool recorded before the setting admitted against a token bucket.
                   limiter=RateLimiter(s.limiter or "token-bucket"),
                   limiter_window_seconds=s.limiter_window_seconds,
                   agent_retry_after_cap_seconds=s.agent_retry_after_cap_seconds,
                   light_agent_reserve=s.light_agent_reserve,
                   context_mode=ContextMode(s.context_mode), context_window_tokens=s.context_window_tokens)


@strawberry.type(description="A model's own timeouts for the calls the gateway holds.")
class ModelTimeout:
    model: str
    request_timeout_seconds: float
    stream_idle_timeout_seconds: float


@strawberry.input(description="A model's own timeouts for the calls the gateway holds.")
class ModelTimeoutInput:
    model: str
    request_timeout_seconds: float
    stream_idle_timeout_seconds: float


@strawberry.type
class Agent:
    id: strawberry.ID
    name: str
    pool: str
    priority_class: PriorityClass
    level: int
    state: AgentStateEnum
    context_budget_tokens: int | None
    reaps: int
    completions: int
    registered_at: datetime

    @classmethod
    def of(cls, v: AgentView) -> Agent:
        return cls(id=strawberry.ID(v["agent_id"]), name=v["name"], pool=v["pool"],
                   priority_class=PriorityClass(v["priority_class"]), level=v["level"],
                   state=AgentStateEnum(v["state"]), context_budget_tokens=v.get("context_budget_tokens"),
                   reaps=v["reaps"], completions=v["completions"], registered_at=ts(v["registered_at"]))


@strawberry.type
class AgentRegistration:
    agent: Agent
    token: str


@strawberry.type
class Turn:
    id: strawberry.ID
    agent_id: strawberry.ID
    pool: str
    status: TurnStatus
    lane: int | None
    level: int | None
    estimated_tokens: int
    max_output_tokens: int
    streams: bool = strawberry.field(description=(
        "The client heartbeats at the answer's first chunk, so the grant ends at an adaptive "
        "start deadline (not a whole lease) if no chunk comes."))
    requested_at: datetime
    queued_at: datetime | None
    granted_at: datetime | None
    lease_expires_at: datetime | None
    finished_at: datetime | None
    outcome: Outcome | None
    reason: str | None
    run_id: str | None = strawberry.field(default=None, description=(
        "The run the request named (TurnRequestInput.runId), if any."))

    @classmethod
    def of(cls, v: TurnDoc) -> Turn:
        return cls(id=strawberry.ID(v["turn_id"]), agent_id=strawberry.ID(v["agent_id"]), pool=v["pool"],
                   status=TurnStatus(v["status"]), lane=v["lane"], level=v["level"],
                   estimated_tokens=v["estimated_tokens"], max_output_tokens=v["max_output_tokens"],
                   streams=bool(v.get("streams", False)), requested_at=ts(v["requested_at"]),
                   queued_at=ts(v["queued_at"]),
                   granted_at=ts(v["granted_at"]), lease_expires_at=ts(v["lease_expires_at"]),
                   finished_at=ts(v["finished_at"]),
                   outcome=Outcome(v["outcome"]) if v.get("outcome") else None, reason=v.get("reason"),
                   run_id=v.get("run_id"))


@strawberry.type
class LaneSlot:
    index: int
    turn_id: strawberry.ID | None
    agent_id: strawberry.ID | None
    granted_at: datetime | None = None
    lease_expires_at: datetime | None = strawberry.field(default=None, description=(
        "When the holder's grant ends unless a heartbeat extends it: its start deadline while "
        "awaitingFirstChunk, else its lease."))
    awaiting_first_chunk: bool = False


@strawberry.type
class QueuedTurn:
    turn_id: strawberry.ID
    agent_id: strawberry.ID
    queued_at: datetime | None = None
    estimated_tokens: int | None = None


@strawberry.type
class LevelQueue:
    level: int
    queued: list[QueuedTurn]


@strawberry.type
class RateLimit:
    rpm: int
    tpm: int
    available_requests: float
    available_tokens: float
    paused_until: datetime | None
    rate_factor: float


@strawberry.type
class SchedulerState:
    pool: str
    position: int
    lanes: list[LaneSlot]
    levels: list[LevelQueue]
    rate_limit: RateLimit


@strawberry.type
class Event:
    position: int
    stream: str
    version: int
    type: str
    data: JSON
    metadata: JSON
    recorded_at: datetime

    @classmethod
    def of(cls, e) -> Event:
        return cls(position=e.position, stream=e.stream, version=e.version, type=e.type,
                   data=e.data, metadata=e.metadata, recorded_at=e.recorded_at)


@strawberry.type
class ReplayReport:
    events_replayed: int
    live_hash: str
    replay_hash: str
    matches: bool
    position: int


@strawberry.input
class PoolInput:
    name: str
    lanes: int
    rpm: int
    tpm: int
    lease_seconds: float = 30.0
    start_timeout_floor_seconds: float | None = None
    levels: int | None = None
    boost_seconds: float | None = None
    tokenizer: str | None = None
    upstream_base_url: str | None = None
    upstream_api_key: str | None = None
    # The scheduling rules (docs/reference/pool-settings.md); each left out takes its
    # default, and a bad value is refused with its reason (BAD_USER_INPUT), creating nothing.
    policy: SchedulingPolicy | None = strawberry.field(default=None, description=(
        "Grant order: DEADLINE (default), MLFQ or FIFO."))
    class_slack_seconds: list[float] | None = strawberry.field(default=None, description=(
        "DEADLINE: seconds of slack per class, [interactive, batch, background] (default [0, 6, 12]), "
        "each 0-3600."))
    run_slack_per_service: float | None = strawberry.field(default=None, description=(
        "DEADLINE: seconds of slack per lane-second the turn's run has held (default 0: off), 0-1000."))
    run_slack_cap_seconds: float | None = strawberry.field(default=None, description=(
        "DEADLINE: the most run slack a turn gets (default 120), 0-3600."))
    size_slack_per_ktoken: float | None = strawberry.field(default=None, description=(
        "DEADLINE: seconds of slack per 1,000 reserved tokens (default 0: off), 0-3600."))
    size_slack_cap_seconds: float | None = strawberry.field(default=None, description=(
        "DEADLINE: the most size slack a turn gets (default 30), 0-3600."))
    run_forget_seconds: float | None = strawberry.field(default=None, description=(
        "A run with nothing live for this long is forgotten (default 600), 1-86400."))
    output_credit_per_ktoken: float | None = strawberry.field(default=None, description=(
        "DEADLINE, while the rate budget binds (a bucket below half): class slack is off and a turn's "
        "deadline moves earlier by this many seconds per 1,000 max-output tokens (default 3; 0: off), 0-3600."))
    output_credit_cap_seconds: float | None = strawberry.field(default=None, description=(
        "DEADLINE: the most output credit a turn gets (default 30), 0-3600."))
    agent_backlog_slack_seconds: float | None = strawberry.field(default=None, description=(
        "DEADLINE, per-agent fairness: every queued turn of an agent that holds or has queued n turns "
        "waits this many seconds more per turn beyond the first, n - 1 (default 2; 0: off), 0-3600."))
    agent_backlog_slack_cap_seconds: float | None = strawberry.field(default=None, description=(
        "DEADLINE: the most backlog slack a turn gets (default 60), 0-3600."))
    adaptive_lanes: bool | None = strawberry.field(default=None, description=(
        "Learn how many of the lanes to use from the provider's time to first chunk (default true); "
        "false uses every configured lane."))
    adaptive_lanes_initial: int | None = strawberry.field(default=None, description=(
        "Adaptive lanes: lanes in use before any sample, at most `lanes` (default 16)."))
    adaptive_lanes_minimum: int | None = strawberry.field(default=None, description=(
        "Adaptive lanes: the fewest lanes the learned limit goes to (default 2), "
        "1 to adaptiveLanesInitial."))
    stall_timeout_seconds: float | None = strawberry.field(default=strawberry.UNSET, description=(
        "Streaming turns after their first chunk: each heartbeat extends the lease by this much "
        "(default 6), 0.5-3600; null: no stall deadline (the plain lease)."))
    outage_after_silent_reaps: int | None = strawberry.field(default=None, description=(
        "Start-deadline reaps in a row, with no first chunk between, that suspend the pool to one "
        "probe at a time (default 3), 0 (off) to 1000."))
    probe_backoff_cap: int | None = strawberry.field(default=None, description=(
        "During an outage, how many times a failed probe doubles the next probe's start deadline "
        "(default 2), 0-16."))
    request_timeout_seconds: float | None = strawberry.field(default=None, description=(
        "Gateway calls: the longest one call may take, first byte to last (default 600, as the SDKs), "
        "1-86400. The gateway keeps a live call's lease itself; this is its wall-clock limit."))
    stream_idle_timeout_seconds: float | None = strawberry.field(default=None, description=(
        "Gateway calls: the longest silence allowed before a stream's first chunk and between its chunks "
        "(default 120), 1-86400."))
    model_timeouts: list[ModelTimeoutInput] | None = strawberry.field(default=None, description=(
        "Per-model request and stream idle timeouts of gateway calls (at most 32 models), overriding "
        "the pool's two for calls that name that model."))
    limiter: RateLimiter | None = strawberry.field(default=None, description=(
        "The shape of the provider's limiter: SLIDING_WINDOW (default: safe against every shape), "
        "FIXED_WINDOW (the same rule) or TOKEN_BUCKET (buckets refilled continuously, one minute's worth)."))
    limiter_window_seconds: float | None = strawberry.field(default=None, description=(
        "SLIDING_WINDOW and FIXED_WINDOW: the window W (default 60; 10 for Azure's 10-second slices), "
        "1-3600. At most rpm x W/60 requests and tpm x W/60 tokens are admitted in any W + 1 seconds."))
    agent_retry_after_cap_seconds: float | None = strawberry.field(default=None, description=(
        "An agent's own report of a 429 is a claim: its retry-after is capped at this (default 30), "
        "0-60, and it pauses only that agent unless the gateway or another agent reported one within it."))
    light_agent_reserve: float | None = strawberry.field(default=None, description=(
        "The share of the rate budget and of the lanes (default 0.1, 0-0.5; lanes rounded up, none of a "
        "one-lane pool) that an agent with another turn queued or held may not take until its turn has "
        "waited agentBacklogSlackCapSeconds: a flooding agent cannot make every other agent's next call "
        "wait for the window to slide or for its next completion."))
    context_mode: ContextMode | None = strawberry.field(default=None, description=(
        "MANAGED: the gateway appends each call's new messages to the agent's context and forwards a "
        "prompt assembled within the model's window (docs/guides/gateway.md); OFF (default): as sent. "
        "A call can ask for either with the x-agentrm-context header."))
    context_window_tokens: int | None = strawberry.field(default=None, description=(
        "Managed context: the context window of a model the gateway does not know (default 128000), "
        "1024-10000000."))


@strawberry.input
class RegisterAgentInput:
    name: str
    pool: str = "default"
    priority_class: PriorityClass = PriorityClass.INTERACTIVE
    context_budget_tokens: int | None = None


@strawberry.input
class TurnRequestInput:
    estimated_tokens: int
    max_output_tokens: int | None = None
    wait_seconds: float = 0.0
    streams: bool = strawberry.field(default=False, description=(
        "Promise to heartbeat as soon as the answer's first chunk arrives (then at least every "
        "lease/3). The grant then lasts only until an adaptive start deadline unless that "
        "heartbeat comes, so a provider call that never starts frees its lane in seconds."))
    request_id: str | None = strawberry.field(default=None, description=(
        "The client's id for this command: a retry with the same id returns the first answer "
        "and appends nothing."))
    run_id: str | None = strawberry.field(default=None, description=(
        "The client's run (one program: a chat answer, a job) this call belongs to, at most "
        "200 characters. A pool with run slack set orders turns by the lane time their run "
        "has already used (short runs first, with a bounded wait for long ones)."))


@strawberry.input
class CompleteTurnInput:
    turn_id: strawberry.ID
    outcome: Outcome = Outcome.OK
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    retry_after_seconds: float | None = None
    rate_limit_headers: JSON | None = None
    request_id: str | None = strawberry.field(default=None, description=(
        "The client's id for this command: a retry with the same id returns the first answer "
        "and appends nothing."))

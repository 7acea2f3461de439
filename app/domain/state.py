"""The scheduler state of one pool: what a fold of its events gives.

Only live turns (queued or granted) are kept: a finished turn leaves the state, and its
history stays in the log and in the turns read model. That bounds memory by the number of
outstanding calls, not by the length of history.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from operator import attrgetter
from typing import Any

from .admission import Bucket
from .concurrency import LaneLimit
from .rate_scopes import Hold, ModelLimits
from .rate_window import RateWindow
from .settings import PoolSettings


@dataclass
class TurnState:
    turn_id: str
    agent_id: str
    level: int
    seq: int                     # FIFO order within a level; a retry inherits its original's
    status: str
    estimated_tokens: int
    max_output_tokens: int
    requested_at: float
    queued_at: float
    granted_at: float | None = None
    lane: int | None = None
    lease_expires_at: float | None = None
    reserved_tokens: int = 0
    granted_mark: float = 0.0    # the pool's reserved_total just before this grant
    grant_number: int = 0        # the pool's granted_total just before this grant
    streams: bool = False        # the client heartbeats at its first chunk (start deadline applies)
    start_backoff: int = 0       # how many times its start deadline was doubled (Karn)
    progressed: bool = False     # a heartbeat arrived since the grant
    run_id: str | None = None    # the client's run (program) this call belongs to, if it said
    # A held call (the gateway renews its lease while the upstream request is open): when it
    # becomes a suspect, and whether it has (app/domain/deadlines.py, "held calls").
    holder: str | None = None
    model: str | None = None
    suspect_at: float | None = None
    suspected: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = flat_dict(self)
        for key in _LATER_TURN_FIELDS:
            if d[key] is None or d[key] is False:
                del d[key]       # as before the rule existed: old logs keep their state hash
        return d

    @property
    def need_tokens(self) -> int:
        return self.estimated_tokens + self.max_output_tokens


_LATER_TURN_FIELDS = ("run_id", "holder", "model", "suspect_at", "suspected")


def flat_dict(obj: Any) -> dict[str, Any]:
    """asdict() of a dataclass whose fields are all plain values (str, numbers, None), as
    TurnState, AgentState and RunState are: the same dict, without asdict's recursion and
    deep copy of every value. A pool's state holds one of these per agent and per live
    turn, and is serialised whole each time the read model is persisted (once a second),
    and asdict's recursion and copies would be half of that work."""
    names, getter = _FLAT.get(type(obj)) or _flat_fields(type(obj))
    return dict(zip(names, getter(obj)))


_FLAT: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def _flat_fields(cls: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    names = tuple(f.name for f in fields(cls))
    # attrgetter of one name returns the value, not a 1-tuple
    getter = attrgetter(*names) if len(names) > 1 else (lambda o: (getattr(o, names[0]),))
    _FLAT[cls] = (names, getter)
    return _FLAT[cls]


@dataclass
class StartEstimator:
    """Grant-to-first-chunk times of streaming turns, smoothed as RFC 6298 smooths round
    trips (srtt a moving mean, rttvar a moving mean deviation, deadline srtt + K rttvar),
    but over the logarithm of the time: a provider's time to first token varies by factors
    (queueing), not by seconds, so its spread is multiplicative. Folded from LeaseExtended
    events (and from start-deadline reaps, as censored samples; see apply).

    Samples are taken per prompt size: a provider's time to first token is a base latency
    plus prefill, which grows linearly with the prompt. Each sample is divided by
    1 + prompt/PROMPT_REF (at about 10k tokens prefill is comparable to the base latency of
    hosted models), and a grant's deadline is scaled back by its own prompt. Without this a
    run of short prompts shrinks the deadline below what a long prompt needs to start.

    Why K = 4 in log space: with a log-normal spread sigma, the mean deviation is about
    0.8 sigma, so the deadline sits about 3.2 sigma above the typical start (a spurious reap
    for well under 1% of calls), where the lane time lost to hung calls and to calls cut
    short balance (the benchmark's default workload: 1% hangs, sigma 0.5)."""
    srtt: float | None = None      # moving mean of log(seconds to first chunk / size)
    rttvar: float = 0.0            # moving mean deviation of the same, in log units
    samples: int = 0

    # RFC 6298's gains (1/8, 1/4) suit one RTT sample per window on a path that changes; a
    # pool gets many first-chunk samples a second from one noisy distribution, and with
    # those gains the estimate wanders enough to cut live calls (56 per 13k in the
    # benchmark, against 13 with these). A slowdown is still learned within seconds: reaps
    # feed censored samples and each agent backs off (Karn). Until 1/gain samples are in,
    # the gains are 1/n: a plain mean, so the first sample does not linger.
    ALPHA = 1 / 32
    BETA = 1 / 16
    K = 4
    WARM_AFTER = 8                 # below this many samples the full lease applies
    PROMPT_REF = 10_000
    FIRST_RTTVAR = 0.5             # RFC 6298 starts at R/2; here a factor of e^(4*0.5) at first
    MIN_MARGIN = math.log(1.5)     # the margin never under 50% above the typical start

    @classmethod
    def size(cls, prompt_tokens: int) -> float:
        return 1.0 + max(0, prompt_tokens) / cls.PROMPT_REF

    def observe(self, seconds: float, prompt_tokens: int, spread: bool = True) -> None:
        sample = math.log(max(seconds, 1e-3) / self.size(prompt_tokens))
        n = self.samples + 1
        if self.srtt is None:
            self.srtt, self.rttvar = sample, self.FIRST_RTTVAR
        else:
            alpha, beta = max(self.ALPHA, 1 / n), max(self.BETA, 1 / n)
            if spread:
                self.rttvar = (1 - beta) * self.rttvar + beta * abs(self.srtt - sample)
            self.srtt = (1 - alpha) * self.srtt + alpha * sample
        self.samples = n

    def timeout(self, prompt_tokens: int, floor: float, ceiling: float, backoff: int) -> float:
        """The start deadline of a grant: ceiling until warm, then exp(srtt + margin) scaled
        to the prompt, within [floor, ceiling], doubled `backoff` times (the agent's
        consecutive start-deadline reaps: Karn's backoff)."""
        if self.srtt is None or self.samples < self.WARM_AFTER:
            return ceiling
        typical = math.exp(min(50.0, self.srtt + max(self.K * self.rttvar, self.MIN_MARGIN)))
        rto = max(floor, typical * self.size(prompt_tokens))
        doubling: int = 2 ** min(backoff, 16)
        return min(ceiling, rto * doubling)


@dataclass
class RunState:
    """A client's run (one agent program: a chat answer, a job): the lane-seconds its finished
    calls held (attained service, as PLAS charges a program) and when it was last active."""
    service_s: float = 0.0
    last_at: float = 0.0
    live: int = 0                  # its turns queued or granted now


@dataclass
class AgentState:
    agent_id: str
    name: str
    priority_class: str
    level: int
    state: str = "ACTIVE"
    used_seconds: float = 0.0      # lane-seconds used at the current level since the last boost
    used_tokens: float = 0.0
    consecutive_reaps: int = 0     # reaps that count towards quarantine (see apply)
    start_misses: int = 0          # consecutive start-deadline reaps: doubles the next deadline
    reaps: int = 0
    completions: int = 0


@dataclass
class PoolState:
    settings: PoolSettings
    created_at: float
    requests: Bucket
    tokens: Bucket
    version: int = -1              # the pool stream's version: the writer's expected version
    position: int = 0              # the last global position folded in
    inputs_through: int = 0        # the last input position a decision answered
    agents: dict[str, AgentState] = field(default_factory=dict)
    turns: dict[str, TurnState] = field(default_factory=dict)
    queues: list[list[str]] = field(default_factory=list)
    lanes: list[str | None] = field(default_factory=list)
    rate_factor: float = 1.0
    rate_factor_at: float = 0.0
    paused_until: float | None = None
    last_boost_at: float = 0.0
    next_seq: int = 0
    reserved_total: float = 0.0    # tokens ever reserved by grants (a monotonic counter)
    granted_total: int = 0         # grants ever made
    clock: float = 0.0             # the latest `at` folded in (time never runs backwards)
    start: StartEstimator = field(default_factory=lambda: StartEstimator())
    runs: dict[str, RunState] = field(default_factory=dict)   # by run id (turns that name one)
    # Capacity and failure rules added later; stored only when not at their initial value,
    # so the state of a pool that never used them serialises as it always did.
    lane_limit: LaneLimit = field(default_factory=lambda: LaneLimit())
    limit_in_use: int | None = None   # lanes in use by the last LaneLimitChanged (None: initial)
    silent_reaps: int = 0             # start-deadline reaps in a row, no first chunk in between
    silent_from: float | None = None  # the earliest grant among those reaps
    outage_since: float | None = None  # a suspected provider outage began (one probe at a time)
    failed_probes: int = 0
    # First-chunk (and whole-answer) times of held calls, one estimator per model: one pool may
    # serve a fast chat model and a slow reasoning model (deadlines.estimator_key).
    model_starts: dict[str, StartEstimator] = field(default_factory=dict)
    # The limiter rules (app/domain/limiter.py), each stored only when it holds something:
    # the grants of the last window (window limiters), each model's pause and AIMD factor,
    # the holds of provider headers (by model, rate_scopes.POOL for the pool), each agent's
    # own pause after its report of a 429, and the recent 429 reports [at, reporter, model]
    # that corroborate an agent's (decide.py).
    window: RateWindow = field(default_factory=lambda: RateWindow())
    model_limits: dict[str, ModelLimits] = field(default_factory=dict)
    holds: dict[str, Hold] = field(default_factory=dict)
    agent_pauses: dict[str, float] = field(default_factory=dict)
    rate_reports: list[list[Any]] = field(default_factory=list)

    # Each agent's QUEUED turns, counted: an index of the queues, not state of its own (not
    # stored, not compared). Built from the queues by the first queued_of(), then kept by
    # apply's _enqueue and _dequeue; None until then, so a state made any other way (loaded,
    # copied) builds it from what it holds.
    queued_by_agent: dict[str, int] | None = field(default=None, repr=False, compare=False)

    _LATER = ("limit_in_use", "silent_reaps", "silent_from", "outage_since", "failed_probes")

    @classmethod
    def new(cls, settings: PoolSettings, at: float) -> PoolState:
        return cls(settings=settings, created_at=at,
                   requests=Bucket(settings.rpm, float(settings.rpm), at),
                   tokens=Bucket(settings.tpm, float(settings.tpm), at),
                   queues=[[] for _ in range(settings.levels)],
                   lanes=[None] * settings.lanes, rate_factor_at=at, last_boost_at=at, clock=at)

    # -- queries the decisions and the API need ------------------------------------------
    def free_lanes(self) -> list[int]:
        return [i for i, t in enumerate(self.lanes) if t is None]

    def queued_count(self) -> int:
        return sum(len(q) for q in self.queues)

    def busy_lanes(self) -> int:
        # list.count, not a generator over every lane: a 1,000-lane pool asks on every
        # grant and completion.
        return len(self.lanes) - self.lanes.count(None)

    def queued_of(self, agent_id: str) -> int:
        """The agent's QUEUED turns. A count of the queues took every request in a batch
        through the whole queue once the pool held more than an agent's cap: a batch of k
        requests behind a long queue cost k x q. Every queued turn is in one of the queues
        (and only queued ones are), so the index counts the queues' entries once, as
        _enqueue and _dequeue then move them."""
        if self.queued_by_agent is None:
            counts: dict[str, int] = {}
            for queue in self.queues:
                for turn_id in queue:
                    if (t := self.turns.get(turn_id)) is not None:
                        counts[t.agent_id] = counts.get(t.agent_id, 0) + 1
            self.queued_by_agent = counts
        return self.queued_by_agent.get(agent_id, 0)

    def backlog_of(self, agent_id: str) -> int:
        """The agent's turns queued or holding a lane now. A grant moves a turn from one to
        the other, so the count stands through a granting pass (ordering.GrantOrder relies
        on it)."""
        held = sum(1 for turn_id in self.lanes
                   if turn_id is not None and (t := self.turns.get(turn_id)) is not None and t.agent_id == agent_id)
        return self.queued_of(agent_id) + held

    def lanes_in_use(self) -> int:
        """How many lanes may be granted at once: all configured ones, or the learned limit."""
        if not self.settings.adaptive_lanes:
            return self.settings.lanes
        if self.limit_in_use is not None:
            return self.limit_in_use
        # until the first change
        return LaneLimit().lanes_in_use(self.settings.lanes, self.settings.adaptive_lanes_initial)

    def head(self) -> TurnState | None:
        for queue in self.queues:
            if queue:
                return self.turns[queue[0]]
        return None

    # -- canonical serialisation (projection storage, replay hashes) ----------------------
    def to_dict(self) -> dict[str, Any]:
        d = {
            "settings": self.settings.to_dict(), "created_at": self.created_at,
            "requests": self.requests.to_dict(), "tokens": self.tokens.to_dict(),
            "version": self.version, "position": self.position, "inputs_through": self.inputs_through,
            "agents": {k: flat_dict(v) for k, v in sorted(self.agents.items())},
            "turns": {k: v.to_dict() for k, v in sorted(self.turns.items())},
            "queues": self.queues, "lanes": self.lanes, "rate_factor": self.rate_factor,
            "rate_factor_at": self.rate_factor_at, "paused_until": self.paused_until,
            "last_boost_at": self.last_boost_at, "next_seq": self.next_seq, "clock": self.clock,
            "reserved_total": self.reserved_total, "granted_total": self.granted_total,
            "start": asdict(self.start),
        }
        if self.runs:  # absent while no turn names a run: old logs keep their state hash
            d["runs"] = {k: flat_dict(v) for k, v in sorted(self.runs.items())}
        if self.lane_limit != LaneLimit():
            d["lane_limit"] = asdict(self.lane_limit)
        if self.model_starts:
            d["model_starts"] = {k: asdict(v) for k, v in sorted(self.model_starts.items())}
        if self.window.slices:
            d["window"] = self.window.to_list()
        if self.model_limits:
            d["model_limits"] = {k: flat_dict(v) for k, v in sorted(self.model_limits.items())}
        if self.holds:
            d["holds"] = {k: flat_dict(v) for k, v in sorted(self.holds.items())}
        if self.agent_pauses:
            d["agent_pauses"] = dict(sorted(self.agent_pauses.items()))
        if self.rate_reports:
            d["rate_reports"] = [list(r) for r in self.rate_reports]
        for key in self._LATER:
            value = getattr(self, key)
            if value != PoolState.__dataclass_fields__[key].default:
                d[key] = value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PoolState:
        state = cls(settings=PoolSettings.from_dict(d["settings"]), created_at=d["created_at"],
                    requests=Bucket(**d["requests"]), tokens=Bucket(**d["tokens"]))
        for key in ("version", "position", "inputs_through", "queues", "lanes", "rate_factor",
                    "rate_factor_at", "paused_until", "last_boost_at", "next_seq", "clock"):
            setattr(state, key, d[key])
        state.reserved_total = d.get("reserved_total", 0.0)
        state.granted_total = d.get("granted_total", 0)
        state.start = StartEstimator(**d.get("start", {}))
        state.lane_limit = LaneLimit(**d.get("lane_limit", {}))
        state.model_starts = {k: StartEstimator(**v) for k, v in d.get("model_starts", {}).items()}
        state.window = RateWindow([list(entry) for entry in d.get("window", [])])
        state.model_limits = {k: ModelLimits(**v) for k, v in d.get("model_limits", {}).items()}
        state.holds = {k: Hold(**v) for k, v in d.get("holds", {}).items()}
        state.agent_pauses = dict(d.get("agent_pauses", {}))
        state.rate_reports = [list(r) for r in d.get("rate_reports", [])]
        for key in cls._LATER:
            if key in d:
                setattr(state, key, d[key])
        state.agents = {k: AgentState(**v) for k, v in d["agents"].items()}
        state.turns = {k: TurnState(**v) for k, v in d["turns"].items()}
        state.runs = {k: RunState(**v) for k, v in d.get("runs", {}).items()}
        return state

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def copy(self) -> PoolState:
        return PoolState.from_dict(json.loads(json.dumps(self.to_dict())))

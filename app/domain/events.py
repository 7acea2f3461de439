"""Event type names. Inputs are facts a client asserted; decisions are what a pool's
scheduler concluded from them. Every decision carries `at`, the scheduler's `now`, so
that apply() never reads a clock and replay is exact.

The classes below give each type its fields (event_base.py: how an event is written to the
log and read back); the catalogue at the end maps every type name, the resource manager's
included, to its class."""
from typing import Any

from . import resource_events
from .event_base import Decided as Decided  # the API of events
from .event_base import Event as Event
from .event_base import EventError as EventError
from .event_base import event

# -- inputs (appended by the API on behalf of operators and agents) --------------------
POOL_CREATED = "PoolCreated"                  # stream pool-<name>
AGENT_REGISTERED = "AgentRegistered"          # stream agent-<id>
AGENT_RELEASED = "AgentReleased"              # operator lifts a quarantine
AGENT_HIBERNATED = "AgentHibernated"
AGENT_WOKEN = "AgentWoken"
TURN_REQUESTED = "TurnRequested"              # stream turn-<id>
HEARTBEAT_SENT = "HeartbeatSent"
COMPLETION_REPORTED = "CompletionReported"
CANCEL_REQUESTED = "CancelRequested"
AGENT_TOKEN_ROTATED = "AgentTokenRotated"     # stream agent-<id>: a new token (its hash); the old one stops
AGENT_TOKEN_REVOKED = "AgentTokenRevoked"     # stream agent-<id>: no token works until the next rotation

# An agent's credentials: folded by the read model only (no scheduler answers them).
TOKEN_EVENTS = frozenset({AGENT_TOKEN_ROTATED, AGENT_TOKEN_REVOKED})

# The inputs a pool's scheduler answers; each carries `pool`.
INPUTS = frozenset({AGENT_REGISTERED, AGENT_RELEASED, TURN_REQUESTED, HEARTBEAT_SENT,
                    COMPLETION_REPORTED, CANCEL_REQUESTED})

# -- decisions (appended by the pool's scheduler loop to stream pool-<name>) ----------
# A pool's scheduler state is the fold of its own stream and nothing else, so replay is
# exact whatever inputs interleave with the decisions in the global log.
AGENT_ADMITTED = "AgentAdmitted"
QUARANTINE_LIFTED = "QuarantineLifted"
TURN_QUEUED = "TurnQueued"
TURN_GRANTED = "TurnGranted"
LEASE_EXTENDED = "LeaseExtended"
TURN_COMPLETED = "TurnCompleted"
TURN_CANCELLED = "TurnCancelled"
TURN_REAPED = "TurnReaped"
TURN_SUSPECTED = "TurnSuspected"              # a held call is late: its lane may go, the call stays
AGENT_DEMOTED = "AgentDemoted"
LEVELS_BOOSTED = "LevelsBoosted"
TURN_PROMOTED = "TurnPromoted"
AGENT_QUARANTINED = "AgentQuarantined"
POOL_PAUSED = "PoolPaused"
POOL_RESUMED = "PoolResumed"
RATE_OBSERVED = "RateObserved"
# Capacity and failure rules (app/domain/concurrency.py, app/domain/deadlines.py).
LANE_LIMIT_CHANGED = "LaneLimitChanged"              # the number of lanes in use moved
PROVIDER_OUTAGE_SUSPECTED = "ProviderOutageSuspected"  # one probe at a time from here
PROVIDER_RECOVERED = "ProviderRecovered"
RATE_RECOVERED = "RateRecovered"                    # the AIMD factor, folded forward for a waiting head
MODEL_PAUSED = "ModelPaused"                        # a 429 on one model: that model pauses, not the pool
AGENT_PAUSED = "AgentPaused"                        # an agent's own report of a 429: only its turns wait

DECISIONS = frozenset({AGENT_ADMITTED, QUARANTINE_LIFTED, TURN_QUEUED, TURN_GRANTED, LEASE_EXTENDED, TURN_COMPLETED,
                       TURN_CANCELLED, TURN_REAPED, TURN_SUSPECTED, AGENT_DEMOTED, LEVELS_BOOSTED, TURN_PROMOTED,
                       AGENT_QUARANTINED,
                       POOL_PAUSED, POOL_RESUMED, RATE_OBSERVED, LANE_LIMIT_CHANGED, PROVIDER_OUTAGE_SUSPECTED,
                       PROVIDER_RECOVERED, RATE_RECOVERED, MODEL_PAUSED, AGENT_PAUSED})

# Turn statuses and agent states, as the public contract spells them.
QUEUED, GRANTED, COMPLETED, CANCELLED, REAPED = "QUEUED", "GRANTED", "COMPLETED", "CANCELLED", "REAPED"
FINISHED = frozenset({COMPLETED, CANCELLED, REAPED})
ACTIVE, HIBERNATED, QUARANTINED = "ACTIVE", "HIBERNATED", "QUARANTINED"
OK, RATE_LIMITED, ERROR = "OK", "RATE_LIMITED", "ERROR"
INTERACTIVE, BATCH, BACKGROUND = "INTERACTIVE", "BATCH", "BACKGROUND"
PRIORITY_CLASSES = (INTERACTIVE, BATCH, BACKGROUND)


# -- inputs ---------------------------------------------------------------------------
# Fields a producer may leave out (the benchmark's client and the tests send the core only
# what it reads) are optional; what the core cannot answer without is required.

@event
class PoolCreated(Event):
    TYPE = POOL_CREATED
    settings: dict[str, Any]
    at: float
    upstream_api_key_fingerprint: str | None = None


@event
class AgentRegistered(Event):
    TYPE = AGENT_REGISTERED
    agent_id: str
    name: str
    priority_class: str
    pool: str | None = None
    token_hash: str | None = None
    context_budget_tokens: int | None = None
    at: float | None = None


@event
class AgentReleased(Event):
    TYPE = AGENT_RELEASED
    agent_id: str
    pool: str | None = None
    at: float | None = None


@event
class AgentHibernated(Event):
    TYPE = AGENT_HIBERNATED
    agent_id: str
    pool: str | None = None
    at: float | None = None
    resume_point: dict[str, Any] | None = None
    reason: str | None = None


@event
class AgentWoken(Event):
    TYPE = AGENT_WOKEN
    agent_id: str
    pool: str | None = None
    at: float | None = None
    reason: str | None = None


@event
class AgentTokenRotated(Event):
    TYPE = AGENT_TOKEN_ROTATED
    agent_id: str
    token_hash: str
    at: float | None = None


@event
class AgentTokenRevoked(Event):
    TYPE = AGENT_TOKEN_REVOKED
    agent_id: str
    at: float | None = None


@event
class TurnRequested(Event):
    TYPE = TURN_REQUESTED
    turn_id: str
    agent_id: str
    estimated_tokens: int
    pool: str | None = None
    max_output_tokens: int | None = None
    at: float | None = None
    streams: bool | None = None
    request_id: str | None = None      # the client's id for the command: a retry appends nothing
    run_id: str | None = None          # the client's run (program); absent in older logs
    queue_cap: int | None = None       # the most turns its agent may have queued; absent: no cap
    holder: str | None = None          # "gateway": the gateway holds the call and renews its lease
    model: str | None = None           # the model the call names (start deadlines are learned per model)


@event
class HeartbeatSent(Event):
    TYPE = HEARTBEAT_SENT
    turn_id: str
    agent_id: str | None = None
    pool: str | None = None
    at: float | None = None
    request_id: str | None = None
    keepalive: bool | None = None      # the holder is alive; says nothing of the call's progress
    # With a keepalive of a stream that has begun: seconds since its last chunk, as its holder
    # saw it (the stall suspicion is decided from it, so replay decides the same).
    idle_s: float | None = None


@event
class CompletionReported(Event):
    TYPE = COMPLETION_REPORTED
    turn_id: str
    agent_id: str | None = None
    pool: str | None = None
    at: float | None = None
    outcome: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    retry_after_seconds: float | None = None
    rate_limit_headers: dict[str, Any] | None = None
    request_id: str | None = None


@event
class CancelRequested(Event):
    TYPE = CANCEL_REQUESTED
    turn_id: str
    agent_id: str | None = None
    pool: str | None = None
    at: float | None = None
    reason: str | None = None
    request_id: str | None = None


# -- decisions: each a Decided (event_base.py): `at`, and `cause` when an input caused it --

@event
class AgentAdmitted(Decided):
    TYPE = AGENT_ADMITTED
    agent_id: str
    name: str
    priority_class: str
    level: int


@event
class QuarantineLifted(Decided):
    TYPE = QUARANTINE_LIFTED
    agent_id: str


@event
class TurnQueued(Decided):
    TYPE = TURN_QUEUED
    turn_id: str
    agent_id: str
    level: int
    seq: int
    estimated_tokens: int
    max_output_tokens: int
    requested_at: float
    priority_class: str
    streams: bool | None = None        # absent in logs written before the start deadline
    run_id: str | None = None          # set when the request named its run
    holder: str | None = None          # set when the gateway holds the call
    model: str | None = None           # set when the request named its model


@event
class TurnGranted(Decided):
    TYPE = TURN_GRANTED
    turn_id: str
    agent_id: str
    lane: int
    level: int
    lease_expires_at: float
    reserved_tokens: int
    start_deadline: bool | None = None     # set (True) when the lease ends at the start deadline
    start_backoff: int | None = None       # set (> 0) when that deadline was doubled
    probe: bool | None = None              # set (True) for a grant made during a suspected outage
    # Policy "deadline" only: the virtual deadline the turn won by, and its terms (ordering.py).
    order_deadline: float | None = None
    run_service_s: float | None = None     # its run's attained service when granted
    rate_bound: bool | None = None         # set (True) when chosen by the rate-bound order
    # A held turn (its holder renews the lease): when a call this slow becomes a suspect.
    suspect_at: float | None = None


@event
class LeaseExtended(Decided):
    TYPE = LEASE_EXTENDED
    turn_id: str
    agent_id: str
    lease_expires_at: float
    first_chunk_s: float | None = None     # set on a streaming turn's first heartbeat
    stall_deadline: bool | None = None     # set (True) when the lease ends at the stall deadline
    keepalive: bool | None = None          # set (True) when the holder renewed it (no progress)


@event
class TurnCompleted(Decided):
    TYPE = TURN_COMPLETED
    turn_id: str
    agent_id: str
    lane: int
    outcome: str
    prompt_tokens: int
    completion_tokens: int
    lane_seconds: float
    reserved_tokens: int
    level: int
    queued_at: float
    granted_at: float | None


@event
class TurnCancelled(Decided):
    """Two shapes: a refusal or a quarantine's cancel (no lane fields), and a cancel the
    client asked for, which always writes `lane` (null for a queued turn) and `lane_seconds`."""
    TYPE = TURN_CANCELLED
    turn_id: str
    agent_id: str
    reason: str
    lane: int | None = None
    lane_seconds: float | None = None
    rule: str | None = None      # a refusal by pool capability: the access rule that refused

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.lane_seconds is not None:
            out.setdefault("lane", None)
        return out


@event
class TurnReaped(Decided):
    TYPE = TURN_REAPED
    turn_id: str
    agent_id: str
    lane: int
    lease_expires_at: float
    granted_at: float | None
    no_first_chunk: bool | None = None     # set (True) for a streaming call that never started
    full_lease: bool | None = None         # with it: whether that call had held a whole lease
    stalled: bool | None = None            # set (True) for a stream that started and went silent


@event
class TurnSuspected(Decided):
    """A held call is slower than its model's learned deadline: it may be hung. It is not
    cut (its holder is alive and may yet get an answer); its lane is freed so the pool keeps
    moving, unless as many suspects are already off their lanes as the pool has lanes.
    With `stalled_s`, the call had begun streaming and then went silent for that long (the
    pool's stall timeout or more, by its holder's keepalive); otherwise it showed nothing by
    its model's deadline."""
    TYPE = TURN_SUSPECTED
    turn_id: str
    agent_id: str
    lane: int
    waited_s: float
    lane_freed: bool
    stalled_s: float | None = None   # set when a begun stream went silent this long (not a late start)


@event
class AgentDemoted(Decided):
    TYPE = AGENT_DEMOTED
    agent_id: str
    from_level: int
    to_level: int
    reason: str
    used_seconds: float
    used_tokens: float
    allotment_seconds: float | None        # null for an unlimited allotment
    allotment_tokens: float | None


@event
class LevelsBoosted(Decided):
    TYPE = LEVELS_BOOSTED


@event
class TurnPromoted(Decided):
    TYPE = TURN_PROMOTED
    turn_id: str
    agent_id: str
    from_level: int
    to_level: int
    waited: float


@event
class AgentQuarantined(Decided):
    TYPE = AGENT_QUARANTINED
    agent_id: str
    consecutive_reaps: int


@event
class PoolPaused(Decided):
    TYPE = POOL_PAUSED
    turn_id: str
    until: float
    retry_after: float
    jitter: float
    rate_factor: float
    reporter: str | None = None            # "gateway" or the agent whose report it was (claims rule on)


@event
class PoolResumed(Decided):
    TYPE = POOL_RESUMED


@event
class RateObserved(Decided):
    """The provider's rate-limit headers, aged to the decision (see decide); each field only
    when the provider sent it."""
    TYPE = RATE_OBSERVED
    turn_id: str
    remaining_requests: float | None = None
    remaining_tokens: float | None = None
    limit_requests: float | None = None
    limit_tokens: float | None = None
    reset_requests_s: float | None = None
    reset_tokens_s: float | None = None
    retry_after_s: float | None = None
    observed_remaining_requests: float | None = None
    observed_remaining_tokens: float | None = None
    age_s: float | None = None
    # Set when the headers hold grants back until their reset (rate_scopes.Hold): the scope
    # (the call's model; absent: the pool), the end, what may still be granted before it
    # (absent: no bound of that kind), and when the observed call was granted.
    model: str | None = None
    hold_until: float | None = None
    hold_requests: float | None = None
    hold_tokens: float | None = None
    hold_as_of: float | None = None


@event
class LaneLimitChanged(Decided):
    """The whole number of lanes the pool uses moved (adaptive lanes); the estimator's
    moving means of the first-chunk time per prompt size are given in seconds."""
    TYPE = LANE_LIMIT_CHANGED
    lanes_in_use: int
    previous: int
    limit: float
    first_chunk_short_s: float | None = None   # None while no call has streamed
    first_chunk_long_s: float | None = None


@event
class ProviderOutageSuspected(Decided):
    TYPE = PROVIDER_OUTAGE_SUSPECTED
    silent_reaps: int                      # start-deadline reaps in a row, no first chunk between


@event
class ProviderRecovered(Decided):
    TYPE = PROVIDER_RECOVERED
    turn_id: str                           # the probe whose answer showed it
    outage_s: float
    failed_probes: int


@event
class RateRecovered(Decided):
    """A queued head needs more tokens than the factor of the last decision allowed, and the
    factor has grown since: this folds the pool's clock forward so admission can see it."""
    TYPE = RATE_RECOVERED
    turn_id: str
    rate_factor: float


@event
class ModelPaused(Decided):
    """A 429 on a call that named its model: that model's turns wait until `until` and are
    then admitted at `rate_factor` (the model's AIMD factor); the pool's other models go on."""
    TYPE = MODEL_PAUSED
    turn_id: str
    model: str
    until: float
    retry_after: float
    jitter: float
    rate_factor: float
    reporter: str | None = None            # "gateway" or the agent whose report it was


@event
class AgentPaused(Decided):
    """An agent's own report of a 429, which nothing corroborated: a claim, so only that
    agent's turns wait, for its retry-after capped at agent_retry_after_cap_seconds."""
    TYPE = AGENT_PAUSED
    turn_id: str
    agent_id: str
    until: float
    retry_after: float                     # as capped
    claimed_retry_after: float | None = None   # set when the claim asked for longer
    model: str | None = None               # the call's model, if it named one


# -- context (stream context-<agent>; folded by app.domain.context) -------------------
CONTEXT_APPENDED = "ContextAppended"          # one message into the hot tier
CONTEXT_COMPACTED = "ContextCompacted"        # a hot span moved to warm (summary, facts) and cold
CONTEXT_FACTS_EXTRACTED = "ContextFactsExtracted"  # key facts of appended messages, before any compaction
# What the context fold reads: its own events and the hibernation pair that parks and wakes it.
CONTEXT_EVENTS = frozenset({CONTEXT_APPENDED, CONTEXT_COMPACTED, CONTEXT_FACTS_EXTRACTED, AGENT_HIBERNATED,
                            AGENT_WOKEN})


@event
class ContextAppended(Event):
    """One message into the agent's hot tier. ``tokens`` is count_message(role, content) in
    the pool's tokenizer, recorded so that a fold never needs a tokenizer."""
    TYPE = CONTEXT_APPENDED
    agent_id: str
    seq: int
    role: str
    content: str
    tokens: int
    at: float
    pinned: bool | None = None   # absent reads as False
    # Its key facts are extracted soon after the append (a ContextFactsExtracted follows):
    # until then it is pending extraction. Absent in logs written before append-time
    # extraction, whose messages get their facts from their compaction only.
    facts_at_append: bool | None = None


@event
class ContextCompacted(Event):
    """Messages ``from_seq``..``to_seq`` (unpinned, hot) moved to warm (``summary``, key
    ``facts``, and the live facts they ``superseded``) and cold (their originals, and
    ``chunks`` of them). ``facts``, ``superseded`` and ``chunks`` are lists of plain records
    as app.context.compactor writes them; the rest are the compaction's own accounting, for
    readers of the log (the fold does not read them)."""
    TYPE = CONTEXT_COMPACTED
    agent_id: str
    segment_id: str
    from_seq: int
    to_seq: int
    summary: str
    summary_tokens: int
    at: float
    facts: list[dict[str, Any]] | None = None  # [{fact_id, kind, text, key, value, source_seq, role, tokens, shape}]
    superseded: list[dict[str, Any]] | None = None # [{fact_id, by}]
    chunks: list[dict[str, Any]] | None = None     # [{chunk_id, from_seq, to_seq, text, tokens}]
    budget_tokens: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    hot_tokens_before: int | None = None
    hot_tokens_after: int | None = None
    facts_kept: int | None = None
    summarizer: str | None = None
    # The summarizer's cost: {cpu_seconds, sentences} for the extractive one (the CPU of the
    # process that ran it, the background model's since this round, embedding included;
    # with sentences_not_embedded when the span had more candidates than it embeds), or
    # {prompt_tokens, completion_tokens} for an LLM.
    cost: dict[str, Any] | None = None
    # How many of the span's messages (its newest) gave no key facts because the
    # compaction's extraction budget ran out; absent when every message was scanned. They
    # moved to cold like the others, verbatim and searchable.
    messages_not_scanned: int | None = None
    # The messages whose key facts it looked for: the span's messages still pending
    # extraction when it was planned (the others had theirs recorded at append time), less
    # the ones not scanned. Absent: the whole span but its newest messages_not_scanned.
    scanned_seqs: list[int] | None = None


@event
class ContextFactsExtracted(Event):
    """The key facts of appended messages ``seqs`` (ascending), extracted soon after their
    append, whatever tier they are in by then. ``facts`` and ``superseded`` are records as
    ``ContextCompacted`` has them; ``extractor`` names the extractor's version, for readers
    of the log: the fold reads the recorded facts, so replay never extracts again. A message
    whose facts a compaction recorded first gives none here (the fold keeps the first)."""
    TYPE = CONTEXT_FACTS_EXTRACTED
    agent_id: str
    seqs: list[int]
    facts: list[dict[str, Any]]       # [{fact_id, kind, text, key, value, source_seq, role, tokens, shape}]
    superseded: list[dict[str, Any]]  # [{fact_id, by}]
    extractor: str
    at: float
    cpu_seconds: float | None = None  # the extraction's CPU time, for readers of the log


# -- the catalogue: every event type by name, the one table decoding reads ------------

def _catalogue(*classes: type[Event]) -> dict[str, type[Event]]:
    table: dict[str, type[Event]] = {}
    for cls in classes:
        if not cls.TYPE or cls.TYPE in table:
            raise TypeError(f"{cls.__name__}: an event type needs a name of its own, got {cls.TYPE!r}")
        table[cls.TYPE] = cls
    return table


_REGISTRY = _catalogue(
    PoolCreated, AgentRegistered, AgentReleased, AgentHibernated, AgentWoken, AgentTokenRotated,
    AgentTokenRevoked, TurnRequested, HeartbeatSent, CompletionReported, CancelRequested,
    AgentAdmitted, QuarantineLifted, TurnQueued, TurnGranted, LeaseExtended, TurnCompleted,
    TurnCancelled, TurnReaped, TurnSuspected, AgentDemoted, LevelsBoosted, TurnPromoted, AgentQuarantined,
    PoolPaused, PoolResumed, RateObserved, LaneLimitChanged, ProviderOutageSuspected,
    ProviderRecovered, RateRecovered, ModelPaused, AgentPaused,
    ContextAppended, ContextCompacted, ContextFactsExtracted,
    *resource_events.EVENTS,
)


def parse(type_: str, data: dict[str, Any], *, partial: bool = False) -> Event:
    """The typed event of `type_` from its logged data; EventError for an unknown type or
    data that lacks a required field (unless `partial`: see Event.from_dict)."""
    cls = _REGISTRY.get(type_)
    if cls is None:
        raise EventError(f"unknown event type {type_!r}")
    return cls.from_dict(data, partial=partial)


def is_event_type(type_: str) -> bool:
    return type_ in _REGISTRY


def event_class(type_: str) -> type[Event]:
    try:
        return _REGISTRY[type_]
    except KeyError:
        raise EventError(f"unknown event type {type_!r}") from None


def registered() -> dict[str, type[Event]]:
    return dict(_REGISTRY)

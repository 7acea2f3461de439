"""Event type names. Inputs are facts a client asserted; decisions are what a pool's
scheduler concluded from them. Every decision carries `at`, the scheduler's `now`, so
that apply() never reads a clock and replay is exact."""

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
AGENT_DEMOTED = "AgentDemoted"
LEVELS_BOOSTED = "LevelsBoosted"
TURN_PROMOTED = "TurnPromoted"
AGENT_QUARANTINED = "AgentQuarantined"
POOL_PAUSED = "PoolPaused"
POOL_RESUMED = "PoolResumed"
RATE_OBSERVED = "RateObserved"

DECISIONS = frozenset({AGENT_ADMITTED, QUARANTINE_LIFTED, TURN_QUEUED, TURN_GRANTED, LEASE_EXTENDED, TURN_COMPLETED, TURN_CANCELLED,
                       TURN_REAPED, AGENT_DEMOTED, LEVELS_BOOSTED, TURN_PROMOTED, AGENT_QUARANTINED,
                       POOL_PAUSED, POOL_RESUMED, RATE_OBSERVED})

# Turn statuses and agent states, as the public contract spells them.
QUEUED, GRANTED, COMPLETED, CANCELLED, REAPED = "QUEUED", "GRANTED", "COMPLETED", "CANCELLED", "REAPED"
FINISHED = frozenset({COMPLETED, CANCELLED, REAPED})
ACTIVE, HIBERNATED, QUARANTINED = "ACTIVE", "HIBERNATED", "QUARANTINED"
OK, RATE_LIMITED, ERROR = "OK", "RATE_LIMITED", "ERROR"
INTERACTIVE, BATCH, BACKGROUND = "INTERACTIVE", "BATCH", "BACKGROUND"
PRIORITY_CLASSES = (INTERACTIVE, BATCH, BACKGROUND)

# -- context (stream context-<agent>; folded by app.domain.context) -------------------
CONTEXT_APPENDED = "ContextAppended"          # one message into the hot tier
CONTEXT_COMPACTED = "ContextCompacted"        # a hot span moved to warm (summary, facts) and cold
# What the context fold reads: its own events and the hibernation pair that parks and wakes it.
CONTEXT_EVENTS = frozenset({CONTEXT_APPENDED, CONTEXT_COMPACTED, AGENT_HIBERNATED, AGENT_WOKEN})

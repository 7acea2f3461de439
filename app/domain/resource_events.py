"""Typed events of the resource manager and the access manager (same rules as events.py:
one frozen dataclass per type, registered by name, optional fields written only when set).

Streams (app/domain/streams.py):
- `resource-<name>`: ResourceDefined (operator), one per name;
- `lease-<id>`: an agent's acquire, heartbeats and release of one lease;
- `access-<agent>`: the operator's grants and revocations for that agent, and the
  refusals of turns from a pool the agent may not draw from;
- `resources-decisions`: every decision of the resource manager, and nothing else, so a
  second writer can never double-grant (expected version, as for a pool's stream).
"""
from __future__ import annotations

from typing import Any

from .event_base import Decided, Event, event

# -- inputs ---------------------------------------------------------------------------
RESOURCE_DEFINED = "ResourceDefined"
RESOURCE_ACQUIRE_REQUESTED = "ResourceAcquireRequested"
RESOURCE_HEARTBEAT_SENT = "ResourceHeartbeatSent"
RESOURCE_RELEASE_REQUESTED = "ResourceReleaseRequested"
ACCESS_GRANTED = "AccessGranted"
ACCESS_REVOKED = "AccessRevoked"
ACCESS_REFUSED = "AccessRefused"          # a turn refused by pool capability (the service's check)

# The inputs the resource manager answers or folds, in log order.
RESOURCE_INPUTS = frozenset({RESOURCE_DEFINED, RESOURCE_ACQUIRE_REQUESTED, RESOURCE_HEARTBEAT_SENT,
                             RESOURCE_RELEASE_REQUESTED, ACCESS_GRANTED, ACCESS_REVOKED})

# -- decisions (stream resources-decisions) -------------------------------------------
RESOURCE_WAITING = "ResourceWaiting"
RESOURCE_GRANTED = "ResourceGranted"
RESOURCE_LEASE_EXTENDED = "ResourceLeaseExtended"
RESOURCE_RELEASED = "ResourceReleased"
RESOURCE_REAPED = "ResourceReaped"
RESOURCE_REFUSED = "ResourceRefused"

RESOURCE_DECISIONS = frozenset({RESOURCE_WAITING, RESOURCE_GRANTED, RESOURCE_LEASE_EXTENDED,
                                RESOURCE_RELEASED, RESOURCE_REAPED, RESOURCE_REFUSED})

RESOURCE_TYPES = RESOURCE_INPUTS | RESOURCE_DECISIONS | {ACCESS_REFUSED}

# Lease statuses and modes, as the public contract spells them.
WAITING, HELD, RELEASED, REAPED, REFUSED = "WAITING", "HELD", "RELEASED", "REAPED", "REFUSED"
LIVE = frozenset({WAITING, HELD})
EXCLUSIVE, SHARED = "EXCLUSIVE", "SHARED"
MODES = (EXCLUSIVE, SHARED)
# Why a request was refused (ResourceRefused.reason).
FORBIDDEN, DEADLOCK, UNKNOWN = "forbidden", "deadlock", "unknown resource"


@event
class ResourceDefined(Event):
    TYPE = RESOURCE_DEFINED
    name: str
    capacity: int
    lease_seconds: float
    at: float


@event
class ResourceAcquireRequested(Event):
    """`level` is the agent's MLFQ level in its pool's scheduler when it asked: the order
    among waiters, recorded so that replay does not depend on the scheduler's later state.
    `wait_seconds`: how long the caller stays blocked in the request; its waiting lease
    runs that much longer (a caller blocked in the call cannot heartbeat)."""
    TYPE = RESOURCE_ACQUIRE_REQUESTED
    lease_id: str
    agent_id: str
    resource: str
    mode: str
    level: int
    at: float
    wait_seconds: float | None = None


@event
class ResourceHeartbeatSent(Event):
    TYPE = RESOURCE_HEARTBEAT_SENT
    lease_id: str
    agent_id: str
    at: float


@event
class ResourceReleaseRequested(Event):
    TYPE = RESOURCE_RELEASE_REQUESTED
    lease_id: str
    agent_id: str
    at: float


@event
class AccessGranted(Event):
    TYPE = ACCESS_GRANTED
    grant_id: str
    agent_id: str
    pattern: str
    modes: list[str]
    at: float


@event
class AccessRevoked(Event):
    TYPE = ACCESS_REVOKED
    grant_id: str
    agent_id: str
    at: float


@event
class AccessRefused(Event):
    TYPE = ACCESS_REFUSED
    agent_id: str
    target: str             # "pool:<name>"
    rule: str
    reason: str
    at: float


# -- decisions ------------------------------------------------------------------------

@event
class ResourceWaiting(Decided):
    TYPE = RESOURCE_WAITING
    lease_id: str
    agent_id: str
    resource: str
    mode: str
    level: int
    seq: int
    requested_at: float
    lease_expires_at: float
    blocked_by: list[str]       # the agents it waits for (holders and waiters ahead)
    rule: str                   # the access rule that allowed it


@event
class ResourceGranted(Decided):
    TYPE = RESOURCE_GRANTED
    lease_id: str
    agent_id: str
    resource: str
    mode: str
    level: int
    seq: int
    requested_at: float
    lease_expires_at: float
    rule: str | None = None     # set when granted at once (no ResourceWaiting before it)


@event
class ResourceLeaseExtended(Decided):
    TYPE = RESOURCE_LEASE_EXTENDED
    lease_id: str
    agent_id: str
    lease_expires_at: float


@event
class ResourceReleased(Decided):
    TYPE = RESOURCE_RELEASED
    lease_id: str
    agent_id: str
    resource: str
    was: str                    # HELD, or WAITING for a withdrawn request


@event
class ResourceReaped(Decided):
    TYPE = RESOURCE_REAPED
    lease_id: str
    agent_id: str
    resource: str
    was: str
    lease_expires_at: float


@event
class ResourceRefused(Decided):
    TYPE = RESOURCE_REFUSED
    lease_id: str
    agent_id: str
    resource: str
    mode: str
    reason: str                 # forbidden | deadlock | unknown resource
    message: str
    rule: str | None = None     # the access rule that refused (forbidden)
    cycle: list[dict[str, Any]] | None = None  # [{agent_id, waits_for, resource}] around the cycle (deadlock)


# Every type of this module, in the order above, for the catalogue (events.py).
EVENTS = (ResourceDefined, ResourceAcquireRequested, ResourceHeartbeatSent, ResourceReleaseRequested,
          AccessGranted, AccessRevoked, AccessRefused, ResourceWaiting, ResourceGranted,
          ResourceLeaseExtended, ResourceReleased, ResourceReaped, ResourceRefused)

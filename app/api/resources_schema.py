"""GraphQL for the resource and access managers (CONTRACT.md: defineResource,
acquireResource, heartbeatResource, releaseResource, resources, grantAccess, revokeAccess).
Thin resolvers over app.resources.service, where the rules live."""
from __future__ import annotations

from datetime import datetime
from enum import Enum

import strawberry
from strawberry.types import Info

from app.errors import NotFound

from .context import principal, runtime
from .types import ts


@strawberry.enum
class ResourceMode(Enum):
    EXCLUSIVE = "EXCLUSIVE"
    SHARED = "SHARED"


@strawberry.enum
class LeaseStatus(Enum):
    WAITING = "WAITING"
    HELD = "HELD"
    RELEASED = "RELEASED"
    REAPED = "REAPED"
    REFUSED = "REFUSED"


@strawberry.type
class ResourceLease:
    id: strawberry.ID
    resource: str
    mode: ResourceMode
    status: LeaseStatus
    lease_expires_at: datetime | None
    agent_id: strawberry.ID
    level: int
    requested_at: datetime
    granted_at: datetime | None
    finished_at: datetime | None
    reason: str | None
    message: str | None

    @classmethod
    def of(cls, d: dict) -> ResourceLease:
        return cls(id=strawberry.ID(d["lease_id"]), resource=d["resource"], mode=ResourceMode(d["mode"]),
                   status=LeaseStatus(d["status"]), lease_expires_at=ts(d["lease_expires_at"]),
                   agent_id=strawberry.ID(d["agent_id"]), level=d["level"], requested_at=ts(d["requested_at"]),
                   granted_at=ts(d["granted_at"]), finished_at=ts(d["finished_at"]), reason=d["reason"],
                   message=d["message"])


@strawberry.type(description="A lease holding or waiting for a resource. An agent sees whose it is "
                              "(agentId, leaseId) only for its own leases: for other agents' both read "
                              "\"hidden\". The operator sees every id.")
class ResourceHolder:
    agent_id: strawberry.ID
    mode: ResourceMode
    lease_id: strawberry.ID
    level: int
    lease_expires_at: datetime
    mine: bool = strawberry.field(description="Whether the lease is the asking agent's (false for the operator).")

    @classmethod
    def of(cls, d: dict) -> ResourceHolder:
        return cls(agent_id=strawberry.ID(d["agent_id"]), mode=ResourceMode(d["mode"]),
                   lease_id=strawberry.ID(d["lease_id"]), level=d["level"],
                   lease_expires_at=ts(d["lease_expires_at"]), mine=d["mine"])


@strawberry.type
class Resource:
    name: str
    capacity: int
    lease_seconds: float
    holders: list[ResourceHolder]
    waiters: list[ResourceHolder]    # in the order they will be granted

    @classmethod
    def of(cls, d: dict) -> Resource:
        return cls(name=d["name"], capacity=d["capacity"], lease_seconds=d["lease_seconds"],
                   holders=[ResourceHolder.of(x) for x in d["holders"]],
                   waiters=[ResourceHolder.of(x) for x in d["waiters"]])


@strawberry.type
class AccessGrant:
    id: strawberry.ID
    agent_id: strawberry.ID
    pattern: str
    modes: list[ResourceMode]
    revoked: bool
    granted_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, d: dict) -> AccessGrant:
        return cls(id=strawberry.ID(d["grant_id"]), agent_id=strawberry.ID(d["agent_id"]), pattern=d["pattern"],
                   modes=[ResourceMode(m) for m in d["modes"]], revoked=d["revoked"],
                   granted_at=ts(d["granted_at"]), revoked_at=ts(d["revoked_at"]))


@strawberry.input
class ResourceInput:
    name: str
    capacity: int = 1
    lease_seconds: float = 30.0


@strawberry.input
class AcquireInput:
    name: str
    mode: ResourceMode = ResourceMode.EXCLUSIVE
    wait_seconds: float = 0.0


@strawberry.input
class AccessInput:
    agent_id: strawberry.ID
    pattern: str
    modes: list[ResourceMode] | None = None    # both when left out; ignored for pool: patterns


@strawberry.type
class ResourceQuery:
    @strawberry.field
    def resources(self, info: Info) -> list[Resource]:
        return [Resource.of(v) for v in runtime(info).resources.list_resources(principal(info))]

    @strawberry.field
    def resource_lease(self, info: Info, id: strawberry.ID) -> ResourceLease | None:
        try:
            return ResourceLease.of(runtime(info).resources.visible_lease(principal(info), str(id)))
        except NotFound:
            return None

    @strawberry.field
    def access_grants(self, info: Info, agent_id: strawberry.ID | None = None) -> list[AccessGrant]:
        found = runtime(info).resources.list_grants(principal(info), str(agent_id) if agent_id else None)
        return [AccessGrant.of(g) for g in found]


@strawberry.type
class ResourceMutation:
    @strawberry.mutation
    async def define_resource(self, info: Info, input: ResourceInput) -> Resource:
        return Resource.of(await runtime(info).resources.define_resource(
            principal(info), input.name, input.capacity, input.lease_seconds))

    @strawberry.mutation
    async def acquire_resource(self, info: Info, input: AcquireInput) -> ResourceLease:
        return ResourceLease.of(await runtime(info).resources.acquire(
            principal(info), input.name, input.mode.value, input.wait_seconds))

    @strawberry.mutation
    async def heartbeat_resource(self, info: Info, lease_id: strawberry.ID) -> ResourceLease:
        return ResourceLease.of(await runtime(info).resources.heartbeat(principal(info), str(lease_id)))

    @strawberry.mutation
    async def release_resource(self, info: Info, lease_id: strawberry.ID) -> ResourceLease:
        return ResourceLease.of(await runtime(info).resources.release(principal(info), str(lease_id)))

    @strawberry.mutation
    async def grant_access(self, info: Info, input: AccessInput) -> AccessGrant:
        modes = None if input.modes is None else [m.value for m in input.modes]
        return AccessGrant.of(await runtime(info).resources.grant_access(
            principal(info), str(input.agent_id), input.pattern, modes))

    @strawberry.mutation
    async def revoke_access(self, info: Info, grant_id: strawberry.ID) -> AccessGrant:
        return AccessGrant.of(await runtime(info).resources.revoke_access(principal(info), str(grant_id)))

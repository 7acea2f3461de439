"""The resource and access commands: checked against the caller's rights and the read
model before anything is appended (bad input appends nothing), then answered by the
resource manager's decision, which the caller waits for, as a turn request waits for
the scheduler's."""
from __future__ import annotations

from typing import Any, cast

from app.auth import Principal, require, require_operator
from app.domain import resource_events as rev
from app.domain.access import POOL_PREFIX, valid_pattern
from app.domain.resources import describe_cycle
from app.domain.streams import access_stream, lease_stream, resource_stream
from app.errors import BadInput, Conflict, Deadlock, Forbidden, NotFound, Unavailable
from app.eventstore.model import NO_STREAM, ConcurrencyError, NewEvent
from app.resources.replies import LeaseReplies, answers_acquire, answers_heartbeat, ends_lease, ends_wait
from app.service import DECISION_TIMEOUT, MAX_WAIT_SECONDS, Service, _check_float, _check_int

MAX_CAPACITY = 100_000
DEFAULT_LEASE_SECONDS = 30.0
# What an agent reads in place of the agent and lease ids of another agent's lease: never
# a real id (ids are UUIDs), so comparing it with one's own id stays meaningful.
HIDDEN_ID = "hidden"


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 128 or "\x00" in name or name != name.strip():
        raise BadInput("a resource name must be 1 to 128 characters, without NUL or surrounding spaces")
    if name.startswith(POOL_PREFIX):
        raise BadInput(f"resource names may not start with {POOL_PREFIX!r}: that prefix names pools in grants")
    return name


def _check_mode(mode: Any) -> str:
    if mode not in rev.MODES:
        raise BadInput(f"mode must be one of {', '.join(rev.MODES)}")
    return mode


class ResourceService:
    def __init__(self, service: Service):
        self.service = service
        self.replies = LeaseReplies(service.projector.subscribe)

    @property
    def model(self):
        return self.service.model.resources

    @property
    def state(self):
        return self.model.state

    # -- resources ----------------------------------------------------------------------
    def resource_view(self, name: str, seen_by: Principal | None = None) -> dict:
        """The resource with its holders and waiters. `seen_by` an agent: the entries of
        other agents' leases keep their mode, level and expiry (what the agent needs to
        judge its wait) but not whose they are: their agent and lease ids read
        `HIDDEN_ID`, so that one agent cannot map what the others hold, across pools.
        A placeholder rather than null keeps the contract's non-null `agentId`."""
        definition = self.state.resources.get(name)
        if definition is None:
            raise NotFound(f"no resource named {name!r}")
        viewer = None if seen_by is None or seen_by.is_operator else seen_by.agent_id

        def entry(x) -> dict:
            named = viewer is None or x.agent_id == viewer
            return {"agent_id": x.agent_id if named else HIDDEN_ID, "mode": x.mode,
                    "lease_id": x.lease_id if named else HIDDEN_ID, "level": x.level,
                    "lease_expires_at": x.lease_expires_at,
                    "mine": viewer is not None and x.agent_id == viewer}
        return {"name": name, "capacity": definition.capacity, "lease_seconds": definition.lease_seconds,
                "holders": [entry(x) for x in self.state.holders(name)],
                "waiters": [entry(x) for x in self.state.waiters(name)]}

    def list_resources(self, principal: Principal | None) -> list[dict]:
        principal = require(principal)
        return [self.resource_view(name, principal) for name in sorted(self.state.resources)]

    async def define_resource(self, principal: Principal | None, name: str, capacity: int = 1,
                              lease_seconds: float = DEFAULT_LEASE_SECONDS) -> dict:
        principal = require_operator(principal)
        name = _check_name(name)
        capacity = _check_int("capacity", capacity, 1, MAX_CAPACITY)
        lease_seconds = _check_float("leaseSeconds", lease_seconds, 1.0, 86_400.0)
        if name in self.state.resources:
            raise Conflict(f"resource {name!r} already exists")
        data = {"name": name, "capacity": capacity, "lease_seconds": lease_seconds, "at": self.service.clock()}
        try:
            await self.service._append([NewEvent(resource_stream(name), rev.RESOURCE_DEFINED, data,
                                                 self.service._meta(principal))], {resource_stream(name): NO_STREAM})
        except ConcurrencyError:
            raise Conflict(f"resource {name!r} already exists") from None
        return self.resource_view(name)

    # -- leases -------------------------------------------------------------------------
    def lease_view(self, lease_id: str) -> dict:
        doc = self.model.leases.get(lease_id)
        if doc is None:
            raise NotFound(f"no lease with id {lease_id!r}")
        return doc

    def _own_lease(self, principal: Principal | None, lease_id: Any, *, operator_ok: bool = False) -> dict:
        principal = require(principal)
        if not isinstance(lease_id, str) or not lease_id:
            raise BadInput("leaseId is required")
        doc = self.lease_view(lease_id)
        if principal.is_operator:
            if not operator_ok:
                raise Forbidden("only the lease's agent may do this")
        elif doc["agent_id"] != principal.agent_id:
            raise Forbidden("this lease belongs to another agent")
        return doc

    def visible_lease(self, principal: Principal | None, lease_id: str) -> dict:
        return self._own_lease(principal, lease_id, operator_ok=True)

    async def acquire(self, principal: Principal | None, name: str, mode: str = rev.EXCLUSIVE,
                      wait_seconds: float = 0.0) -> dict:
        principal = require(principal)
        if principal.is_operator:
            raise Forbidden("resources are acquired by agents; use an agent token")
        agent = await self.service.fresh(self.service.agent_view, principal.agent_id)
        mode = _check_mode(mode)
        wait = _check_float("waitSeconds", wait_seconds or 0.0, 0.0, MAX_WAIT_SECONDS)
        if name not in self.state.resources:
            await self.service.projector.catch_up()   # defined a moment ago on another worker?
        if _check_name(name) not in self.state.resources:
            raise NotFound(f"no resource named {name!r}; an operator defines it with defineResource")
        lease_id = self.service.ids()
        # The agent's MLFQ level as its pool's scheduler has it now: the order among waiters.
        data = {"lease_id": lease_id, "agent_id": agent["agent_id"], "resource": name, "mode": mode,
                "level": agent["level"], "at": self.service.clock()}
        if wait > 0:
            data["wait_seconds"] = wait
        async with self.replies.expect(lease_id, answers_acquire) as answered, \
                self.replies.expect(lease_id, ends_wait) as wait_ended:
            await self.service._append([NewEvent(lease_stream(lease_id), rev.RESOURCE_ACQUIRE_REQUESTED, data,
                                                 self.service._meta(principal, lease_id))],
                                       {lease_stream(lease_id): NO_STREAM})
            answer = await answered.wait(DECISION_TIMEOUT)
            if answer is None:
                raise Unavailable(f"the resource manager has not answered lease {lease_id} yet; "
                                  "query it again (the request is recorded)")
            if wait > 0 and isinstance(answer, rev.ResourceWaiting):
                await wait_ended.wait(wait)
        doc = self.lease_view(lease_id)
        if doc["status"] == rev.REFUSED:
            if doc["reason"] == rev.DEADLOCK:
                raise Deadlock(self._cycle_message(doc))
            raise (Forbidden if doc["reason"] == rev.FORBIDDEN else NotFound)(doc["message"])
        return doc

    def _cycle_message(self, doc: dict) -> str:
        """The refusal's cycle with the agents' names beside their ids (the log keeps ids)."""
        names = {}
        for step in doc["cycle"]:
            for agent_id in (step["agent_id"], step["waits_for"]):
                view = self.service.model.agent_view(agent_id)
                names[agent_id] = f"{view['name']} ({agent_id})" if view else agent_id
        return (f"acquiring {doc['resource']} ({doc['mode']}) would deadlock: "
                f"{describe_cycle(doc['cycle'], names)}; refused instead of waiting for ever")

    async def heartbeat(self, principal: Principal | None, lease_id: str) -> dict:
        doc = await self.service.fresh(self._own_lease, principal, lease_id)
        if doc["status"] not in rev.LIVE:
            raise Conflict(f"lease {lease_id} is {doc['status']}; only a WAITING or HELD lease takes heartbeats")
        # _own_lease required a principal
        return await self._input_and_wait(cast(Principal, principal), doc, rev.RESOURCE_HEARTBEAT_SENT,
                                          answers_heartbeat)

    async def release(self, principal: Principal | None, lease_id: str) -> dict:
        doc = await self.service.fresh(lambda: self._own_lease(principal, lease_id, operator_ok=True))
        if doc["status"] not in rev.LIVE:
            raise Conflict(f"lease {lease_id} is already {doc['status']}")
        # _own_lease required a principal
        return await self._input_and_wait(cast(Principal, principal), doc, rev.RESOURCE_RELEASE_REQUESTED, ends_lease)

    async def _input_and_wait(self, principal: Principal, doc: dict, type_: str, answers) -> dict:
        lease_id = doc["lease_id"]
        data = {"lease_id": lease_id, "agent_id": doc["agent_id"], "at": self.service.clock()}
        async with self.replies.expect(lease_id, answers) as answered:
            await self.service._append([NewEvent(lease_stream(lease_id), type_, data,
                                                 self.service._meta(principal, lease_id))])
            await answered.wait(DECISION_TIMEOUT)
        return self.lease_view(lease_id)

    # -- access ---------------------------------------------------------------------------
    def grant_view(self, grant_id: str) -> dict:
        g = self.state.policy.grants.get(grant_id)
        if g is None:
            raise NotFound(f"no access grant with id {grant_id!r}")
        return {"grant_id": g.grant_id, "agent_id": g.agent_id, "pattern": g.pattern, "modes": list(g.modes),
                "granted_at": g.granted_at, "revoked_at": g.revoked_at, "revoked": g.revoked_at is not None}

    def list_grants(self, principal: Principal | None, agent_id: str | None = None) -> list[dict]:
        principal = require(principal)
        if not principal.is_operator:
            if agent_id is not None and agent_id != principal.agent_id:
                raise Forbidden("agents may read only their own grants")
            agent_id = principal.agent_id
        grants = sorted(self.state.policy.grants.values(), key=lambda g: (g.granted_at, g.grant_id))
        return [self.grant_view(g.grant_id) for g in grants if agent_id is None or g.agent_id == agent_id]

    async def grant_access(self, principal: Principal | None, agent_id: str, pattern: str,
                           modes: list[str] | None = None) -> dict:
        principal = require_operator(principal)
        await self.service.fresh(self.service.agent_view, agent_id)
        problem = valid_pattern(pattern)
        if problem:
            raise BadInput(problem)
        modes = list(rev.MODES) if modes is None else list(modes)
        if not modes or len(set(modes)) != len(modes) or any(m not in rev.MODES for m in modes):
            raise BadInput(f"modes must be a non-empty list of distinct modes among {', '.join(rev.MODES)}")
        grant_id = self.service.ids()
        data = {"grant_id": grant_id, "agent_id": agent_id, "pattern": pattern,
                "modes": sorted(modes, key=rev.MODES.index), "at": self.service.clock()}
        await self.service._append([NewEvent(access_stream(agent_id), rev.ACCESS_GRANTED, data,
                                             self.service._meta(principal))])
        return self.grant_view(grant_id)

    async def revoke_access(self, principal: Principal | None, grant_id: str) -> dict:
        principal = require_operator(principal)
        if not isinstance(grant_id, str) or not grant_id:
            raise BadInput("grantId is required")
        view = await self.service.fresh(self.grant_view, grant_id)
        if view["revoked"]:
            raise Conflict(f"grant {grant_id} is already revoked")
        data = {"grant_id": grant_id, "agent_id": view["agent_id"], "at": self.service.clock()}
        await self.service._append([NewEvent(access_stream(view["agent_id"]), rev.ACCESS_REVOKED, data,
                                             self.service._meta(principal))])
        return self.grant_view(grant_id)

    async def check_pool(self, principal: Principal, agent: dict) -> None:
        """The pool capability check of a turn request (Service.pool_guard): a refusal is
        recorded with the rule that refused, then raised as FORBIDDEN."""
        verdict = self.state.policy.check_pool(agent["agent_id"], agent["pool"])
        if verdict.allowed:
            return
        data = {"agent_id": agent["agent_id"], "target": POOL_PREFIX + agent["pool"], "rule": verdict.rule,
                "reason": verdict.reason, "at": self.service.clock()}
        await self.service._append([NewEvent(access_stream(agent["agent_id"]), rev.ACCESS_REFUSED, data,
                                             self.service._meta(principal))])
        raise Forbidden(verdict.reason)

"""Invariant checker of the resource manager's decisions, restated independently of its
core (it keeps its own holder sets, not app.domain.resources' state):
- an EXCLUSIVE hold never overlaps any other hold of the same resource;
- SHARED holds never exceed the resource's capacity, and never sit beside an EXCLUSIVE one;
- a lease is granted at most once, and released or reaped only while live;
- a reap comes at or after the lease's expiry, after every extension;
- a request is admitted (granted or queued) only when the access policy as of the
  request's position allowed it.
Pure, over Records in position order; the first violation stops the check, as in verify."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.domain import resource_events as rev
from app.domain.access import AccessPolicy
from app.domain.streams import RESOURCE_DECISIONS_STREAM

from . import Record
from .verify import Violation, ViolationsReport

CATEGORIES = ("resource", "lease", "access", "resources")


@dataclass
class ResourceVerifyReport(ViolationsReport):
    decisions_checked: int = 0
    grants_checked: int = 0
    violations: list[Violation] = field(default_factory=list)


def _policy_at(access: list[Record], position: int) -> AccessPolicy:
    policy = AccessPolicy()
    for r in access:
        if r.position >= position:
            break
        if r.type == rev.ACCESS_GRANTED:
            policy.grant(r.data["grant_id"], r.data["agent_id"], r.data["pattern"], r.data["modes"], r.data["at"])
        elif r.type == rev.ACCESS_REVOKED:
            policy.revoke(r.data["grant_id"], r.data["at"])
    return policy


class _Check:
    def __init__(self, access: list[Record]):
        self.access = access
        self.capacity: dict[str, int] = {}
        self.holds: dict[str, dict[str, tuple[str, str]]] = {}   # resource -> lease -> (agent, mode)
        self.live: dict[str, str] = {}                           # lease -> WAITING | HELD
        self.expires: dict[str, float] = {}
        self.finished: set[str] = set()
        self.requests: dict[str, Record] = {}                    # lease -> its acquire input

    def check(self, r: Record) -> str | None:
        d = r.data
        lease: Any = d.get("lease_id")   # as logged: a forged log may hold anything
        if r.type in (rev.RESOURCE_WAITING, rev.RESOURCE_GRANTED):
            if lease in self.finished or self.live.get(lease) == rev.HELD:
                state = "finished" if lease in self.finished else "granted"
                return f"lease {lease} admitted again after it was {state}"
            if lease not in self.live:
                problem = self._access(lease, d)
                if problem:
                    return problem
        if r.type == rev.RESOURCE_GRANTED:
            return self._grant(lease, d)
        if r.type in (rev.RESOURCE_RELEASED, rev.RESOURCE_REAPED, rev.RESOURCE_LEASE_EXTENDED):
            if lease not in self.live:
                return f"lease {lease} {r.type[len('Resource'):].lower()} but it is not live"
        if r.type == rev.RESOURCE_REAPED and d.get("at", 0) < self.expires.get(lease, float("inf")):
            return f"lease {lease} reaped at {d.get('at')} before it expired at {self.expires.get(lease)}"
        return None

    def _access(self, lease: str, d: dict) -> str | None:
        request = self.requests.get(lease)
        if request is None:
            return f"lease {lease} admitted without an acquire request"
        verdict = _policy_at(self.access, request.position).check_resource(
            request.data["agent_id"], request.data["resource"], request.data["mode"])
        if not verdict.allowed:
            return f"lease {lease} admitted though the access policy refused it: {verdict.reason}"
        return None

    def _grant(self, lease: str, d: dict) -> str | None:
        name, mode, agent = d.get("resource"), d.get("mode"), d.get("agent_id")
        if name not in self.capacity:
            return f"lease {lease} granted on {name!r}, which is not defined"
        holds = self.holds.setdefault(name, {})
        others = ", ".join(f"lease {k} ({m}, agent {a})" for k, (a, m) in holds.items())
        if mode == rev.EXCLUSIVE and holds:
            return f"exclusive hold of lease {lease} (agent {agent}) on {name} overlaps {others}"
        if mode == rev.SHARED:
            if any(m == rev.EXCLUSIVE for _a, m in holds.values()):
                return f"shared hold of lease {lease} on {name} overlaps the exclusive {others}"
            if len(holds) >= self.capacity[name]:
                return (f"shared hold of lease {lease} on {name} exceeds its capacity of "
                        f"{self.capacity[name]} (held by {others})")
        return None

    def after(self, r: Record) -> None:
        d = r.data
        lease: Any = d.get("lease_id")   # as logged: a forged log may hold anything
        if r.type == rev.RESOURCE_WAITING:
            self.live[lease] = rev.WAITING
            self.expires[lease] = d["lease_expires_at"]
        elif r.type == rev.RESOURCE_GRANTED:
            self.live[lease] = rev.HELD
            self.expires[lease] = d["lease_expires_at"]
            self.holds.setdefault(d["resource"], {})[lease] = (d["agent_id"], d["mode"])
        elif r.type == rev.RESOURCE_LEASE_EXTENDED:
            self.expires[lease] = d["lease_expires_at"]
        elif r.type in (rev.RESOURCE_RELEASED, rev.RESOURCE_REAPED, rev.RESOURCE_REFUSED):
            self.live.pop(lease, None)
            self.finished.add(lease)
            for holds in self.holds.values():
                holds.pop(lease, None)


def verify_resources(records: Iterable[Record]) -> ResourceVerifyReport:
    ordered = sorted(records, key=lambda r: r.position)
    access = [r for r in ordered if r.type in (rev.ACCESS_GRANTED, rev.ACCESS_REVOKED)]
    check, report = _Check(access), ResourceVerifyReport()
    for r in ordered:
        if r.type == rev.RESOURCE_DEFINED:
            check.capacity.setdefault(r.data["name"], r.data["capacity"])
            continue
        if r.type == rev.RESOURCE_ACQUIRE_REQUESTED:
            check.requests[r.data["lease_id"]] = r
            continue
        if r.stream != RESOURCE_DECISIONS_STREAM:
            continue
        report.decisions_checked += 1
        report.grants_checked += r.type == rev.RESOURCE_GRANTED
        try:
            problem = check.check(r)
        except (KeyError, TypeError, ValueError) as exc:
            problem = f"cannot be checked: {type(exc).__name__} {exc}"
        if problem is not None:
            report.violations.append(Violation(r.position, r.stream, r.type, problem))
            return report
        check.after(r)
    return report

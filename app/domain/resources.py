"""The resource manager as a pure core: state, apply and decide for named resources that
agents hold in EXCLUSIVE or SHARED mode (repositories, tools, environments, APIs).

Like the scheduler (decide.py) it does no I/O and reads no clock: `now` is a value and
every decision records it as `at`, so folding the log gives exactly the live state.

Holding. A resource has a capacity (1 = a mutex). A SHARED hold takes one unit of it; an
EXCLUSIVE hold takes the whole resource. So an EXCLUSIVE request fits when nobody holds
the resource, a SHARED one when no EXCLUSIVE hold is in and fewer than `capacity` SHARED
holds are. A repository that N readers may share at once has capacity N.

Order among waiters: by the agent's MLFQ level when it asked (lower first: interactive
work is not stuck behind batch work), then by arrival (FIFO within a level).

Readers and writers: waiters are granted strictly in that order, and the first waiter
that does not fit stops the granting: nobody passes a waiter ahead of it, not even a
SHARED request that would fit beside the current SHARED holders. Hence
- writers do not starve: a reader arriving after a waiting writer queues behind it, so the
  writer waits only for the holds in when it arrived and the waiters ahead of it;
- readers do not starve: the readers queued before a writer are granted before it, and
  the readers queued behind it are granted together when it releases.
Both bounds hold within a level; across levels a steady stream of interactive requests can
hold batch waiters back, exactly as the scheduler's levels do with turns, and a lease
bounds how long any hold blocks.

Leases. Every request is a lease, waiting or held, that expires `lease_seconds` after it
was granted or last heartbeated (a waiting one after it asked, plus the time the caller
said it would stay blocked in the request, or after its last heartbeat). An
expired lease is reaped, as a turn is, and the waiters behind it proceed. A waiter must
heartbeat too: a dead agent's request would otherwise sit in the queue and in the
wait-for graph for ever.

Deadlocks. The wait-for graph has an edge from each waiting agent to each agent that
keeps its request from being granted: the holders it does not fit beside, and every
waiter ahead of it (FIFO makes it wait for them). The graph has no cycle before a request
(invariant), so any cycle after placing one runs through the requesting agent: decide
looks for that cycle before the request waits, and refuses the request with the cycle
named instead of letting it hang. A request granted at once is checked too: of a lower
level than waiters already queued, it passes them, and they then wait for its agent,
which may itself be waiting elsewhere. Re-entrant requests (an agent asking for a resource it
holds, or waits for, in a conflicting way) are the cycle of length one.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from . import resource_events as rev
from .access import AccessPolicy
from .events import Decided, Event, EventError, parse

# As for turns (decide.REAP_GRACE_S): an input stamped before the deadline may still be on
# its way through the log when the deadline comes.
REAP_GRACE_S = 0.25
_IN_TIME = (rev.ResourceHeartbeatSent, rev.ResourceReleaseRequested)
# What the state is a fold of: the decisions, and the inputs that define resources and
# grant or revoke access (a lease's own inputs change nothing until a decision answers them).
FOLDED = rev.RESOURCE_DECISIONS | {rev.RESOURCE_DEFINED, rev.ACCESS_GRANTED, rev.ACCESS_REVOKED}


@dataclass
class ResourceDef:
    name: str
    capacity: int
    lease_seconds: float
    defined_at: float


@dataclass
class LeaseState:
    lease_id: str
    agent_id: str
    resource: str
    mode: str
    level: int
    seq: int
    status: str                     # WAITING or HELD (finished leases leave the state)
    requested_at: float
    lease_expires_at: float
    granted_at: float | None = None

    @property
    def order(self) -> tuple[int, int]:
        return (self.level, self.seq)


@dataclass
class ResourceState:
    resources: dict[str, ResourceDef] = field(default_factory=dict)
    leases: dict[str, LeaseState] = field(default_factory=dict)
    policy: AccessPolicy = field(default_factory=AccessPolicy)
    next_seq: int = 0
    clock: float = 0.0
    inputs_through: int = 0          # the last input position a decision answered
    version: int = -1                # the decisions stream's version (the writer's expected version)
    # Live lease ids per resource: derived from `leases` (never serialised), so that a
    # resource's holders and waiters cost its own leases, not every live lease.
    by_resource: dict[str, set[str]] = field(default_factory=dict, repr=False, compare=False)

    def add_lease(self, lease: LeaseState) -> None:
        self.leases[lease.lease_id] = lease
        self.by_resource.setdefault(lease.resource, set()).add(lease.lease_id)

    def drop_lease(self, lease_id: str) -> None:
        lease = self.leases.pop(lease_id, None)
        if lease is not None:
            ids = self.by_resource.get(lease.resource)
            if ids is not None:
                ids.discard(lease_id)
                if not ids:
                    del self.by_resource[lease.resource]

    # -- queries ------------------------------------------------------------------------
    def _live(self, name: str, status: str) -> list[LeaseState]:
        return [x for x in map(self.leases.__getitem__, self.by_resource.get(name, ())) if x.status == status]

    def holders(self, name: str) -> list[LeaseState]:
        return sorted(self._live(name, rev.HELD), key=lambda x: (x.granted_at, x.seq))

    def waiters(self, name: str) -> list[LeaseState]:
        return sorted(self._live(name, rev.WAITING), key=lambda x: x.order)

    def fits(self, name: str, mode: str, holders: list[LeaseState] | None = None) -> bool:
        held = self.holders(name) if holders is None else holders
        if mode == rev.EXCLUSIVE:
            return not held
        return all(x.mode == rev.SHARED for x in held) and len(held) < self.resources[name].capacity

    # -- canonical serialisation --------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"resources": {k: asdict(v) for k, v in sorted(self.resources.items())},
                "leases": {k: asdict(v) for k, v in sorted(self.leases.items())},
                "policy": self.policy.to_dict(), "next_seq": self.next_seq, "clock": self.clock,
                "inputs_through": self.inputs_through, "version": self.version}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ResourceState:
        state = cls(resources={k: ResourceDef(**v) for k, v in d["resources"].items()},
                    policy=AccessPolicy.from_dict(d["policy"]), next_seq=d["next_seq"], clock=d["clock"],
                    inputs_through=d["inputs_through"], version=d["version"])
        for v in d["leases"].values():
            state.add_lease(LeaseState(**v))
        return state

    def copy(self) -> ResourceState:
        return ResourceState.from_dict(json.loads(json.dumps(self.to_dict())))


# -- apply: the only way the state changes ---------------------------------------------

def apply(state: ResourceState, type_: str, data: dict[str, Any]) -> ResourceState:
    """Fold one logged event (an input the manager folds, or a decision); other types
    change nothing."""
    if type_ in FOLDED:
        apply_event(state, parse(type_, data))
    return state


def apply_event(state: ResourceState, e: Event) -> ResourceState:
    if isinstance(e, rev.ResourceDefined):
        if e.name not in state.resources:
            state.resources[e.name] = ResourceDef(e.name, e.capacity, e.lease_seconds, e.at)
        return state
    if isinstance(e, rev.AccessGranted):
        state.policy.grant(e.grant_id, e.agent_id, e.pattern, e.modes, e.at)
        return state
    if isinstance(e, rev.AccessRevoked):
        state.policy.revoke(e.grant_id, e.at)
        return state
    e = cast(Decided, e)   # the rest of FOLDED: the manager's decisions
    state.clock = max(state.clock, e.at)
    if e.cause is not None:
        state.inputs_through = max(state.inputs_through, e.cause)
    if isinstance(e, rev.ResourceWaiting):
        state.add_lease(LeaseState(e.lease_id, e.agent_id, e.resource, e.mode, e.level, e.seq,
                                   rev.WAITING, e.requested_at, e.lease_expires_at))
        state.next_seq = max(state.next_seq, e.seq + 1)
    elif isinstance(e, rev.ResourceGranted):
        lease = state.leases.get(e.lease_id)
        if lease is None:
            lease = LeaseState(e.lease_id, e.agent_id, e.resource, e.mode, e.level, e.seq, rev.HELD,
                               e.requested_at, e.lease_expires_at)
            state.add_lease(lease)
        lease.status, lease.granted_at, lease.lease_expires_at = rev.HELD, e.at, e.lease_expires_at
        state.next_seq = max(state.next_seq, e.seq + 1)
    elif isinstance(e, rev.ResourceLeaseExtended):
        if e.lease_id in state.leases:
            state.leases[e.lease_id].lease_expires_at = e.lease_expires_at
    elif isinstance(e, (rev.ResourceReleased, rev.ResourceReaped)):
        state.drop_lease(e.lease_id)
    return state  # a refusal takes no place in a queue: nothing to fold


# -- the wait-for graph ------------------------------------------------------------------

def _blocking(lease: LeaseState, holders: list[LeaseState], waiters: list[LeaseState],
              capacity: int) -> list[LeaseState]:
    if lease.mode == rev.EXCLUSIVE or len(holders) >= capacity:
        blocking = list(holders)
    else:
        blocking = [x for x in holders if x.mode == rev.EXCLUSIVE]
    return blocking + [x for x in waiters if x.order < lease.order]


def blockers(state: ResourceState, lease: LeaseState) -> list[LeaseState]:
    """The leases that keep waiting `lease` from being granted: holders it does not fit
    beside, and every waiter ahead of it."""
    return _blocking(lease, state.holders(lease.resource), state.waiters(lease.resource),
                     state.resources[lease.resource].capacity)


def wait_for_graph(state: ResourceState) -> dict[str, list[tuple[str, str]]]:
    """agent -> [(agent it waits for, resource)], each edge once, in a stable order."""
    holders: dict[str, list[LeaseState]] = {}
    waiters: dict[str, list[LeaseState]] = {}
    for x in state.leases.values():
        (holders if x.status == rev.HELD else waiters).setdefault(x.resource, []).append(x)
    for queue in waiters.values():
        queue.sort(key=lambda x: x.order)
    graph: dict[str, list[tuple[str, str]]] = {}
    for lease in sorted((x for q in waiters.values() for x in q), key=lambda x: x.seq):
        edges = graph.setdefault(lease.agent_id, [])
        for other in _blocking(lease, holders.get(lease.resource, []), waiters[lease.resource],
                               state.resources[lease.resource].capacity):
            edge = (other.agent_id, lease.resource)
            if edge not in edges:
                edges.append(edge)
    return graph


class _WaitsFor:
    """The wait-for graph's edges computed only for the agents a search reaches (a request
    that closes no cycle usually reaches few), with the same edges as wait_for_graph."""

    def __init__(self, state: ResourceState):
        self.state = state
        self.waiting: dict[str, list[LeaseState]] = {}
        for x in sorted((x for x in state.leases.values() if x.status == rev.WAITING), key=lambda x: x.seq):
            self.waiting.setdefault(x.agent_id, []).append(x)

    def get(self, agent_id: str, default: Iterable[tuple[str, str]] = ()) -> list[tuple[str, str]]:
        edges: list[tuple[str, str]] = []
        for lease in self.waiting.get(agent_id, ()):
            for other in blockers(self.state, lease):
                edge = (other.agent_id, lease.resource)
                if edge not in edges:
                    edges.append(edge)
        return edges or list(default)


def find_cycle(graph: dict[str, list[tuple[str, str]]] | _WaitsFor, start: str) -> list[dict[str, Any]] | None:
    """A cycle through `start` as [{agent_id, waits_for, resource}], or None. Depth-first,
    with an explicit stack (a chain of waiting agents may be longer than Python's recursion
    limit); each agent is expanded once."""
    path: list[tuple[str, str, str]] = []          # the edges from start to the current node
    stack = [iter(graph.get(start, ()))]
    nodes = [start]
    seen = {start}
    while stack:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            nodes.pop()
            if path:
                path.pop()
            continue
        nxt, resource = step
        if nxt == start:
            path.append((nodes[-1], nxt, resource))
            return [{"agent_id": a, "waits_for": b, "resource": r} for a, b, r in path]
        if nxt in seen:
            continue
        seen.add(nxt)
        path.append((nodes[-1], nxt, resource))
        nodes.append(nxt)
        stack.append(iter(graph.get(nxt, ())))
    return None


def describe_cycle(cycle: list[dict[str, Any]], names: dict[str, str] | None = None) -> str:
    names = names or {}

    def who(agent_id: str) -> str:
        return names.get(agent_id) or agent_id
    return ", ".join(f"agent {who(c['agent_id'])} waits for {who(c['waits_for'])} on {c['resource']}"
                     for c in cycle)


# -- decide ---------------------------------------------------------------------------------

class _Step:
    cause: int | None

    def __init__(self, state: ResourceState, now: float):
        self.state, self.now, self.cause = state, now, None
        self.out: list[Decided] = []

    def emit(self, kind: type[Decided], **fields: Any) -> None:
        e = kind(**fields, at=self.now, cause=self.cause)
        apply_event(self.state, e)
        self.out.append(e)


def decide(state: ResourceState, inputs: Iterable[tuple[str, dict[str, Any], int | None]], now: float) -> list[Decided]:
    """The decisions (typed events) for a batch of inputs that arrived together, in order:
    first the leases due to be reaped, then each input, then every grant that now fits.
    `state` is advanced as the decisions are made (pass a copy to keep it)."""
    now = max(now, state.clock)
    step = _Step(state, now)
    typed = [(e, cause) for e, cause in ((_typed(t, d), cause) for t, d, cause in inputs) if e is not None]
    _reap(step, [e for e, _cause in typed])
    for e, cause in typed:
        step.cause = cause
        if isinstance(e, (rev.ResourceDefined, rev.AccessGranted, rev.AccessRevoked)):
            apply_event(state, e)   # folded in log order: later requests see them
        elif isinstance(e, rev.ResourceAcquireRequested):
            _on_acquire(step, e)
        elif isinstance(e, rev.ResourceHeartbeatSent):
            _on_heartbeat(step, e)
        elif isinstance(e, rev.ResourceReleaseRequested):
            _on_release(step, e)
    _dispatch(step)
    return step.out


def _typed(type_: str | None, data: dict[str, Any] | None) -> Event | None:
    """The typed input, or None for a type the manager does not answer or data that is not
    that type (a forged input must not wedge the writer: it changes nothing)."""
    if type_ not in rev.RESOURCE_INPUTS:
        return None
    try:
        return parse(type_, data or {})
    except EventError:
        return None


def next_deadline(state: ResourceState) -> float | None:
    times = [x.lease_expires_at + REAP_GRACE_S for x in state.leases.values()]
    return min(times) if times else None


def _reap(step: _Step, inputs: list[Event]) -> None:
    def in_time(lease: LeaseState) -> bool:
        return any(isinstance(e, _IN_TIME) and e.lease_id == lease.lease_id and e.at <= lease.lease_expires_at
                   for e in inputs)
    due = sorted((x for x in step.state.leases.values()
                  if x.lease_expires_at + REAP_GRACE_S <= step.now and not in_time(x)),
                 key=lambda x: (x.lease_expires_at, x.lease_id))
    for lease in due:
        step.emit(rev.ResourceReaped, lease_id=lease.lease_id, agent_id=lease.agent_id,
                  resource=lease.resource, was=lease.status, lease_expires_at=lease.lease_expires_at)


def _refuse(step: _Step, e: rev.ResourceAcquireRequested, reason: str, message: str, **extra: Any) -> None:
    step.emit(rev.ResourceRefused, lease_id=e.lease_id, agent_id=e.agent_id, resource=e.resource,
              mode=e.mode, reason=reason, message=message, **extra)


def _on_acquire(step: _Step, e: rev.ResourceAcquireRequested) -> None:
    state = step.state
    if e.lease_id in state.leases:
        return  # already answered (a replayed input after failover)
    definition = state.resources.get(e.resource)
    if definition is None:
        _refuse(step, e, rev.UNKNOWN, f"no resource named {e.resource!r}")
        return
    if e.mode not in rev.MODES:
        _refuse(step, e, rev.UNKNOWN, f"mode must be one of {', '.join(rev.MODES)}")
        return
    verdict = state.policy.check_resource(e.agent_id, e.resource, e.mode)
    if not verdict.allowed:
        _refuse(step, e, rev.FORBIDDEN, verdict.reason, rule=verdict.rule)
        return
    seq = state.next_seq
    lease = LeaseState(e.lease_id, e.agent_id, e.resource, e.mode, e.level, seq, rev.WAITING,
                       e.at, step.now + float(e.wait_seconds or 0.0) + definition.lease_seconds)
    common = dict(lease_id=e.lease_id, agent_id=e.agent_id, resource=e.resource, mode=e.mode,
                  level=e.level, seq=seq, requested_at=e.at)
    ahead = [x for x in state.waiters(e.resource) if x.order < lease.order]
    grant_now = not ahead and state.fits(e.resource, e.mode)
    if grant_now:
        # Granted at once it may pass waiters of a higher level, which then wait for this
        # agent: if the agent itself waits elsewhere, that can close a cycle too.
        lease.status, lease.granted_at = rev.HELD, step.now
    # Would it close a cycle? Try it in the graph, take it out again.
    state.add_lease(lease)
    try:
        cycle = find_cycle(_WaitsFor(state), e.agent_id)
        blocked_by = [] if grant_now else sorted({x.agent_id for x in blockers(state, lease)})
    finally:
        state.drop_lease(e.lease_id)
    if cycle is not None:
        _refuse(step, e, rev.DEADLOCK, f"acquiring {e.resource} ({e.mode}) would deadlock: "
                + describe_cycle(cycle), cycle=cycle)
        return
    if grant_now:
        step.emit(rev.ResourceGranted, **common, lease_expires_at=step.now + definition.lease_seconds,
                  rule=verdict.rule)
        return
    step.emit(rev.ResourceWaiting, **common, lease_expires_at=lease.lease_expires_at,
              blocked_by=blocked_by, rule=verdict.rule)


def _on_heartbeat(step: _Step, e: rev.ResourceHeartbeatSent) -> None:
    lease = step.state.leases.get(e.lease_id)
    if lease is None or lease.agent_id != e.agent_id:
        return
    definition = step.state.resources[lease.resource]
    # Never shortens: a waiting lease may run longer (the time its caller stays blocked).
    step.emit(rev.ResourceLeaseExtended, lease_id=lease.lease_id, agent_id=lease.agent_id,
              lease_expires_at=max(lease.lease_expires_at, step.now + definition.lease_seconds))


def _on_release(step: _Step, e: rev.ResourceReleaseRequested) -> None:
    lease = step.state.leases.get(e.lease_id)
    if lease is None or lease.agent_id != e.agent_id:
        return
    step.emit(rev.ResourceReleased, lease_id=lease.lease_id, agent_id=lease.agent_id,
              resource=lease.resource, was=lease.status)


def _dispatch(step: _Step) -> None:
    """Grant, per resource, the waiters in order while the first one fits (see the module
    docstring: nobody passes a waiter ahead of it)."""
    state = step.state
    names = sorted({x.resource for x in state.leases.values() if x.status == rev.WAITING})
    for name in names:
        definition = state.resources[name]
        for lease in state.waiters(name):
            if not state.fits(name, lease.mode):
                break
            step.emit(rev.ResourceGranted, lease_id=lease.lease_id, agent_id=lease.agent_id,
                      resource=name, mode=lease.mode, level=lease.level, seq=lease.seq,
                      requested_at=lease.requested_at, lease_expires_at=step.now + definition.lease_seconds)

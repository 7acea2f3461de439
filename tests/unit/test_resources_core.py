"""The resource manager's pure core: holds and capacity, the order among waiters (MLFQ
level, then arrival; nobody passes a waiter ahead), leases and reaping, deadlock refusal
naming the cycle, the access policy; and a property test over random workloads of several
agents: exclusive holds never overlap (checked by the core's own state and by the
independent verifier over the log it wrote), the wait-for graph never holds a cycle, and
folding the log gives the state the core had."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.audit import Record
from app.audit.resource_verify import verify_resources
from app.domain import resource_events as rev
from app.domain.resources import (
    REAP_GRACE_S,
    ResourceState,
    _WaitsFor,
    apply,
    decide,
    find_cycle,
    wait_for_graph,
)
from app.domain.streams import RESOURCE_DECISIONS_STREAM, access_stream, lease_stream, resource_stream


class Log:
    """Drives the core as the manager does and keeps the log it would write."""

    def __init__(self):
        self.state = ResourceState()
        self.records: list[Record] = []
        self.now = 1000.0
        self.leases = 0

    def _record(self, stream: str, type_: str, data: dict) -> int:
        position = len(self.records) + 1
        self.records.append(Record(position, stream, 0, type_, json.loads(json.dumps(data))))
        return position

    def input(self, stream: str, type_: str, data: dict) -> list:
        position = self._record(stream, type_, data)
        out = decide(self.state, [(type_, data, position)], self.now)
        for d in out:
            self._record(RESOURCE_DECISIONS_STREAM, d.TYPE, d.to_dict())
        return out

    def tick(self, seconds: float) -> list:
        self.now += seconds
        out = decide(self.state, [], self.now)
        for d in out:
            self._record(RESOURCE_DECISIONS_STREAM, d.TYPE, d.to_dict())
        return out

    def define(self, name: str, capacity: int = 1, lease: float = 30.0) -> None:
        self.input(resource_stream(name), rev.RESOURCE_DEFINED,
                   {"name": name, "capacity": capacity, "lease_seconds": lease, "at": self.now})

    def acquire(self, agent: str, name: str, mode: str = rev.EXCLUSIVE, level: int = 0):
        self.leases += 1
        lease_id = f"L{self.leases}"
        out = self.input(lease_stream(lease_id), rev.RESOURCE_ACQUIRE_REQUESTED,
                         {"lease_id": lease_id, "agent_id": agent, "resource": name, "mode": mode,
                          "level": level, "at": self.now})
        return lease_id, [d for d in out if d.lease_id == lease_id][0]

    def release(self, agent: str, lease_id: str) -> list:
        return self.input(lease_stream(lease_id), rev.RESOURCE_RELEASE_REQUESTED,
                          {"lease_id": lease_id, "agent_id": agent, "at": self.now})

    def heartbeat(self, agent: str, lease_id: str) -> list:
        return self.input(lease_stream(lease_id), rev.RESOURCE_HEARTBEAT_SENT,
                          {"lease_id": lease_id, "agent_id": agent, "at": self.now})

    def grant(self, grant_id: str, agent: str, pattern: str, modes=rev.MODES) -> None:
        self.input(access_stream(agent), rev.ACCESS_GRANTED, {"grant_id": grant_id, "agent_id": agent,
                                                              "pattern": pattern, "modes": list(modes),
                                                              "at": self.now})

    def revoke(self, grant_id: str, agent: str) -> None:
        self.input(access_stream(agent), rev.ACCESS_REVOKED, {"grant_id": grant_id, "agent_id": agent,
                                                              "at": self.now})

    def holders(self, name: str) -> list[tuple[str, str]]:
        return [(x.agent_id, x.mode) for x in self.state.holders(name)]

    def status(self, lease_id: str) -> str | None:
        lease = self.state.leases.get(lease_id)
        return lease.status if lease else None


def test_shared_holds_coexist_up_to_capacity_and_exclusive_waits_for_all_of_them():
    log = Log()
    log.define("repo:billing", capacity=2)
    _a, first = log.acquire("a", "repo:billing", rev.SHARED)
    _b, second = log.acquire("b", "repo:billing", rev.SHARED)
    c, third = log.acquire("c", "repo:billing", rev.SHARED)
    assert [first.TYPE, second.TYPE, third.TYPE] == [rev.RESOURCE_GRANTED, rev.RESOURCE_GRANTED,
                                                     rev.RESOURCE_WAITING]
    assert log.holders("repo:billing") == [("a", rev.SHARED), ("b", rev.SHARED)]
    assert sorted(third.blocked_by) == ["a", "b"]          # capacity full: waits for every holder
    w, writer = log.acquire("w", "repo:billing", rev.EXCLUSIVE)
    assert writer.TYPE == rev.RESOURCE_WAITING and sorted(writer.blocked_by) == ["a", "b", "c"]
    log.release("a", "L1")
    assert log.status(c) == rev.HELD and log.status(w) == rev.WAITING
    log.release("b", "L2")
    log.release("c", c)
    assert log.holders("repo:billing") == [("w", rev.EXCLUSIVE)]


def test_a_reader_behind_a_waiting_writer_does_not_pass_it_and_readers_ahead_go_first():
    log = Log()
    log.define("repo:x", capacity=5)
    r1, _ = log.acquire("r1", "repo:x", rev.SHARED)
    w, _ = log.acquire("w", "repo:x", rev.EXCLUSIVE)
    r2, late = log.acquire("r2", "repo:x", rev.SHARED)
    assert late.TYPE == rev.RESOURCE_WAITING and late.blocked_by == ["w"]   # it would fit, yet waits
    log.release("r1", r1)
    assert log.status(w) == rev.HELD and log.status(r2) == rev.WAITING
    log.release("w", w)
    assert log.status(r2) == rev.HELD


def test_waiters_are_granted_by_level_then_arrival():
    log = Log()
    log.define("tool:browser")
    holder, _ = log.acquire("h", "tool:browser")
    batch1, _ = log.acquire("batch1", "tool:browser", level=1)
    background, _ = log.acquire("bg", "tool:browser", level=2)
    batch2, _ = log.acquire("batch2", "tool:browser", level=1)
    interactive, _ = log.acquire("inter", "tool:browser", level=0)
    order = []
    current = holder
    owner = "h"
    for _ in range(4):
        log.release(owner, current)
        [x] = log.state.holders("tool:browser")
        order.append(x.agent_id)
        current, owner = x.lease_id, x.agent_id
    assert order == ["inter", "batch1", "batch2", "bg"]


def test_a_reaped_hold_frees_its_waiters_and_a_heartbeat_keeps_a_hold():
    log = Log()
    log.define("env:staging", lease=10.0)
    held, _ = log.acquire("a", "env:staging")
    waiting, _ = log.acquire("b", "env:staging")
    log.tick(5.0)
    log.heartbeat("b", waiting)          # a waiter heartbeats too
    log.tick(5.0 + REAP_GRACE_S)
    reaps = [r for r in log.records if r.type == rev.RESOURCE_REAPED]
    assert [r.data["lease_id"] for r in reaps] == [held] and reaps[0].data["was"] == rev.HELD
    assert log.status(waiting) == rev.HELD
    log.heartbeat("b", waiting)
    log.tick(9.0)
    assert log.status(waiting) == rev.HELD    # extended from the heartbeat, not from the grant


def test_two_and_three_agent_deadlocks_are_refused_with_the_cycle_named():
    log = Log()
    for name in ("r1", "r2", "r3"):
        log.define(name)
    log.acquire("a", "r1")
    log.acquire("b", "r2")
    log.acquire("a", "r2")                  # a waits for b
    _lease, refused = log.acquire("b", "r1")
    assert refused.TYPE == rev.RESOURCE_REFUSED and refused.reason == rev.DEADLOCK
    assert refused.cycle == [{"agent_id": "b", "waits_for": "a", "resource": "r1"},
                             {"agent_id": "a", "waits_for": "b", "resource": "r2"}]
    assert "agent b waits for a on r1, agent a waits for b on r2" in refused.message

    log = Log()
    for name in ("r1", "r2", "r3"):
        log.define(name)
    for agent, name in (("a", "r1"), ("b", "r2"), ("c", "r3")):
        log.acquire(agent, name)
    log.acquire("a", "r2")
    log.acquire("b", "r3")
    _lease, refused = log.acquire("c", "r1")
    assert refused.reason == rev.DEADLOCK
    assert [(x["agent_id"], x["waits_for"]) for x in refused.cycle] == [("c", "a"), ("a", "b"), ("b", "c")]
    assert find_cycle(wait_for_graph(log.state), "c") is None      # the refusal left no cycle behind


def test_a_deadlock_through_the_fifo_order_is_found_too():
    """c asks for a SHARED hold that fits beside the SHARED holder, but must queue behind the
    waiting writer b, who waits for a; a then asks for what c holds."""
    log = Log()
    log.define("x", capacity=4)
    log.define("y")
    log.acquire("a", "x", rev.SHARED)
    log.acquire("b", "x", rev.EXCLUSIVE)
    log.acquire("c", "y")
    log.acquire("c", "x", rev.SHARED)       # waits behind b
    _lease, refused = log.acquire("a", "y")
    assert refused.reason == rev.DEADLOCK
    assert [(x["agent_id"], x["waits_for"]) for x in refused.cycle] == [("a", "c"), ("c", "b"), ("b", "a")]


def test_a_grant_at_once_that_passes_a_lower_priority_waiter_is_checked_for_a_cycle():
    """b holds m and waits (batch level 2) for an EXCLUSIVE hold on s, which c shares; a waits
    for b on m. a's interactive SHARED request for s fits and nobody of its level is ahead,
    but granting it would make b wait for a as well: a -> b -> a. It is refused, the cycle
    named, and nothing is held or queued for it."""
    log = Log()
    log.define("m")
    log.define("s", capacity=2)
    log.acquire("b", "m")
    log.acquire("c", "s", rev.SHARED)
    _lease, waiting = log.acquire("b", "s", rev.EXCLUSIVE, level=2)
    assert waiting.TYPE == rev.RESOURCE_WAITING
    _lease, waiting = log.acquire("a", "m")
    assert waiting.TYPE == rev.RESOURCE_WAITING
    before = log.state.to_dict()["leases"]
    lease, refused = log.acquire("a", "s", rev.SHARED, level=0)
    assert refused.TYPE == rev.RESOURCE_REFUSED and refused.reason == rev.DEADLOCK
    assert refused.cycle == [{"agent_id": "a", "waits_for": "b", "resource": "m"},
                             {"agent_id": "b", "waits_for": "a", "resource": "s"}]
    assert lease not in log.state.leases and log.state.to_dict()["leases"] == before
    graph = wait_for_graph(log.state)
    assert all(find_cycle(graph, agent) is None for agent in graph)
    # Without the wait elsewhere the same request is granted at once, ahead of the batch waiter.
    _lease, granted = log.acquire("d", "s", rev.SHARED, level=0)
    assert granted.TYPE == rev.RESOURCE_GRANTED


def test_passing_ones_own_lower_priority_waiter_is_the_cycle_of_one():
    """The property test's shrunk example: b waits (level 1) for an EXCLUSIVE hold on s that
    a shares; b's SHARED request at level 0 fits beside a and would be granted ahead of b's
    own waiting request, which would then wait for b."""
    log = Log()
    log.define("s", capacity=2)
    log.acquire("a", "s", rev.SHARED)
    _lease, waiting = log.acquire("b", "s", rev.EXCLUSIVE, level=1)
    assert waiting.TYPE == rev.RESOURCE_WAITING
    _lease, refused = log.acquire("b", "s", rev.SHARED, level=0)
    assert refused.reason == rev.DEADLOCK
    assert refused.cycle == [{"agent_id": "b", "waits_for": "b", "resource": "s"}]
    graph = wait_for_graph(log.state)
    assert all(find_cycle(graph, agent) is None for agent in graph)


def test_asking_again_for_what_one_holds_is_the_cycle_of_one():
    log = Log()
    log.define("x", capacity=3)
    log.acquire("a", "x", rev.SHARED)
    _lease, upgrade = log.acquire("a", "x", rev.EXCLUSIVE)
    assert upgrade.reason == rev.DEADLOCK and upgrade.cycle == [{"agent_id": "a", "waits_for": "a",
                                                                "resource": "x"}]


def test_access_is_open_until_the_first_grant_then_default_deny_with_the_rule_named():
    log = Log()
    log.define("repo:billing", capacity=3)
    log.define("env:staging")
    first, open_ = log.acquire("a", "repo:billing", rev.SHARED)
    assert open_.TYPE == rev.RESOURCE_GRANTED and open_.rule == "open"
    log.grant("g1", "a", "repo:*", [rev.SHARED])
    _l, shared = log.acquire("a", "repo:billing", rev.SHARED)
    assert shared.TYPE == rev.RESOURCE_GRANTED and shared.rule == "grant:g1"
    _l, wrong_mode = log.acquire("a", "repo:billing", rev.EXCLUSIVE)
    assert wrong_mode.reason == rev.FORBIDDEN and wrong_mode.rule == "grant:g1"
    _l, other = log.acquire("b", "repo:billing", rev.SHARED)
    assert other.reason == rev.FORBIDDEN and other.rule == "default-deny"
    assert "default deny" in other.message
    log.revoke("g1", "a")
    _l, revoked = log.acquire("a", "repo:billing", rev.SHARED)
    assert revoked.rule == "grant:g1" and "revoked" in revoked.message
    # revoking every grant does not open the resources again
    _l, env = log.acquire("a", "env:staging")
    assert env.reason == rev.FORBIDDEN and env.rule == "default-deny"
    assert verify_resources(log.records).ok


def test_pool_grants_switch_on_the_pool_policy_only():
    log = Log()
    log.grant("g1", "a", "pool:default")
    policy = log.state.policy
    assert policy.check_pool("a", "default").allowed and not policy.check_pool("b", "default").allowed
    assert not policy.check_pool("a", "other").allowed
    assert policy.check_resource("b", "anything", rev.EXCLUSIVE).allowed    # resources still open


def test_verify_finds_overlapping_exclusive_holds_in_a_forged_log():
    log = Log()
    log.define("x")
    log.acquire("a", "x")
    lease, _ = log.acquire("b", "x")
    assert verify_resources(log.records).ok
    forged = dict(lease_id=lease, agent_id="b", resource="x", mode=rev.EXCLUSIVE, level=0, seq=1,
                  requested_at=log.now, lease_expires_at=log.now + 30, at=log.now)
    records = log.records + [Record(len(log.records) + 1, RESOURCE_DECISIONS_STREAM, 0, rev.RESOURCE_GRANTED,
                                    forged)]
    report = verify_resources(records)
    assert not report.ok and "exclusive hold of lease L2 (agent b) on x overlaps lease L1" in report.first.message


def test_verify_finds_a_grant_the_policy_refused():
    log = Log()
    log.define("x")
    log.grant("g1", "a", "y")
    lease, refused = log.acquire("b", "x")
    assert refused.reason == rev.FORBIDDEN
    forged = dict(lease_id=lease, agent_id="b", resource="x", mode=rev.EXCLUSIVE, level=0, seq=0,
                  requested_at=log.now, lease_expires_at=log.now + 30, at=log.now)
    records = [r for r in log.records if r.type != rev.RESOURCE_REFUSED]
    records.append(Record(len(log.records) + 1, RESOURCE_DECISIONS_STREAM, 0, rev.RESOURCE_GRANTED, forged))
    report = verify_resources(records)
    assert not report.ok and "access policy refused it" in report.first.message


AGENTS = ["a", "b", "c", "d"]
NAMES = ["m", "s", "t"]     # a mutex, a capacity-2 resource, a capacity-3 resource
step = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(AGENTS), st.sampled_from(NAMES),
              st.sampled_from(rev.MODES), st.integers(0, 2)),
    st.tuples(st.just("release"), st.sampled_from(AGENTS), st.integers(0, 40)),
    st.tuples(st.just("heartbeat"), st.sampled_from(AGENTS), st.integers(0, 40)),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 3.0, 11.0])),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=60))
def test_random_workloads_keep_exclusive_holds_apart_and_never_deadlock(steps):
    log = Log()
    log.define("m", lease=10.0)
    log.define("s", capacity=2, lease=10.0)
    log.define("t", capacity=3, lease=10.0)
    issued: list[tuple[str, str]] = []
    for s in steps:
        if s[0] == "acquire":
            lease_id, _ = log.acquire(s[1], s[2], s[3], s[4])
            issued.append((lease_id, s[1]))
        elif s[0] in ("release", "heartbeat") and issued:
            lease_id, agent = issued[s[2] % len(issued)]
            getattr(log, s[0])(agent, lease_id)
        elif s[0] == "tick":
            log.tick(s[1])
        for name, definition in log.state.resources.items():
            held = log.state.holders(name)
            if any(x.mode == rev.EXCLUSIVE for x in held):
                assert len(held) == 1
            assert len(held) <= definition.capacity
            # nobody waits while the head of the queue would fit (no lost wake-up)
            waiters = log.state.waiters(name)
            assert not waiters or not log.state.fits(name, waiters[0].mode)
        graph = wait_for_graph(log.state)
        assert all(find_cycle(graph, agent) is None for agent in graph)
        lazy = _WaitsFor(log.state)       # the graph decide searches: the same edges
        assert {agent: lazy.get(agent) for agent in graph} == graph
    report = verify_resources(log.records)
    assert report.ok, report.first
    replayed = ResourceState()
    for r in log.records:
        apply(replayed, r.type, r.data)
    assert replayed.to_dict() == json.loads(json.dumps(log.state.to_dict()))


def test_a_cycle_longer_than_the_recursion_limit_is_found():
    n = 5000
    graph = {f"a{i}": [(f"a{i + 1}", f"r{i + 1}")] for i in range(n)}
    graph[f"a{n}"] = [("a0", "r0")]
    cycle = find_cycle(graph, "a0")
    assert len(cycle) == n + 1 and cycle[-1] == {"agent_id": f"a{n}", "waits_for": "a0", "resource": "r0"}
    graph[f"a{n}"] = [("a7", "r7")]          # a cycle that does not pass through a0
    assert find_cycle(graph, "a0") is None


def test_a_malformed_input_changes_nothing_and_does_not_stop_the_core():
    log = Log()
    log.define("x")
    before = log.state.to_dict()
    assert log.input(lease_stream("bad"), rev.RESOURCE_ACQUIRE_REQUESTED, {"lease_id": "bad"}) == []
    assert log.state.to_dict() == before
    _lease, granted = log.acquire("a", "x")
    assert granted.TYPE == rev.RESOURCE_GRANTED


def test_a_heartbeat_never_shortens_the_lease_of_a_caller_blocked_in_its_request():
    log = Log()
    log.define("x", lease=10.0)
    log.acquire("a", "x")
    lease_id = "L2"
    log.input(lease_stream(lease_id), rev.RESOURCE_ACQUIRE_REQUESTED,
              {"lease_id": lease_id, "agent_id": "b", "resource": "x", "mode": rev.EXCLUSIVE, "level": 0,
               "at": log.now, "wait_seconds": 60.0})
    assert log.state.leases[lease_id].lease_expires_at == log.now + 70.0
    log.heartbeat("b", lease_id)
    assert log.state.leases[lease_id].lease_expires_at == log.now + 70.0
    log.tick(65.0)
    log.heartbeat("b", lease_id)
    assert log.state.leases[lease_id].lease_expires_at == log.now + 10.0

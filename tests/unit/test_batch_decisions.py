"""decide_many(): a batch of inputs answered in one pass, with the pool capability policy
folded in log order (app/domain/pool_access.py).

What the batch form adds to decide(): access grants and revocations in the batch are folded
into the policy where they stand, so a request behind a revocation is refused and one behind
a grant is queued; they are not inputs of the pool (no decision cites them) and the inputs
after them are answered as usual; and an input stamped before a lease expiry that is in the
same batch as the expiry wins over it, as in decide()."""
from __future__ import annotations

from app.domain import events as ev
from app.domain import resource_events as rev
from app.domain.access import DEFAULT_DENY, AccessPolicy
from app.domain.apply import new_pool
from app.domain.decide import REAP_GRACE_S, decide_many
from app.domain.settings import PoolSettings


def pool(**kw):
    s = PoolSettings(**{"name": "main", "lanes": 1, "rpm": 600, "tpm": 60_000, "lease_seconds": 5.0,
                        "policy": "mlfq", **kw})
    return new_pool({"settings": s.to_dict(), "at": 0.0})


def registered(agent_id, cause=None):
    return (ev.AGENT_REGISTERED, {"agent_id": agent_id, "name": agent_id, "priority_class": ev.BATCH}, cause)


def requested(turn_id, agent_id, at, cause=None, **fields):
    return (ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": agent_id, "estimated_tokens": 100, "at": at,
                                **fields}, cause)


def granted_access(grant_id, agent_id, pattern, at):
    return (rev.ACCESS_GRANTED, {"grant_id": grant_id, "agent_id": agent_id, "pattern": pattern,
                                 "modes": ["use"], "at": at}, None)


def revoked_access(grant_id, at):
    return (rev.ACCESS_REVOKED, {"grant_id": grant_id, "at": at}, None)


def by_type(out, type_):
    return [d for t, d in out if t == type_]


def test_a_request_with_no_policy_given_is_queued_whatever_access_events_the_batch_holds():
    s = pool()
    out = decide_many(s, [registered("a", 1), granted_access("g1", "b", "pool:main", 0.0),
                          requested("t1", "a", 0.0, cause=3)], 0.0)
    # No policy passed: the access event is skipped, and the request after it answered.
    assert [t for t, _ in out] == [ev.AGENT_ADMITTED, ev.TURN_QUEUED, ev.TURN_GRANTED]
    assert [d["cause"] for _, d in out] == [1, 3, 3]


def test_a_pool_grant_in_the_batch_refuses_the_agents_it_does_not_name():
    s = pool(lanes=2)
    access = AccessPolicy()
    out = decide_many(s, [registered("a"), registered("b"),
                          granted_access("g1", "a", "pool:main", 0.0),
                          requested("ta", "a", 0.0, cause=5), requested("tb", "b", 0.0, cause=6)], 0.0, access)
    # The grant turns pool access to default deny: "a" is allowed by its grant, "b" refused.
    assert access.pools_enforced and set(access.grants) == {"g1"}
    assert [d["turn_id"] for d in by_type(out, ev.TURN_QUEUED)] == ["ta"]
    assert [d["turn_id"] for d in by_type(out, ev.TURN_GRANTED)] == ["ta"]
    [refused] = by_type(out, ev.TURN_CANCELLED)
    assert (refused["turn_id"], refused["agent_id"], refused["rule"], refused["cause"]) == \
        ("tb", "b", DEFAULT_DENY, 6)
    assert refused["reason"].startswith("access refused: default deny")
    assert "tb" not in s.turns


def test_a_request_before_a_revocation_is_queued_and_one_after_it_refused():
    s = pool(lanes=1)
    access = AccessPolicy()
    decide_many(s, [registered("a"), granted_access("g1", "a", "pool:*", 0.0)], 0.0, access)
    out = decide_many(s, [requested("t1", "a", 1.0, cause=10), revoked_access("g1", 1.0),
                          requested("t2", "a", 1.0, cause=12)], 1.0, access)
    assert access.grants["g1"].revoked_at == 1.0
    assert [d["turn_id"] for d in by_type(out, ev.TURN_QUEUED)] == ["t1"]
    [refused] = by_type(out, ev.TURN_CANCELLED)
    assert (refused["turn_id"], refused["rule"], refused["cause"]) == ("t2", "grant:g1", 12)
    assert "revoked" in refused["reason"]


def test_a_request_behind_a_grant_in_the_same_batch_is_allowed():
    s = pool()
    access = AccessPolicy()
    decide_many(s, [registered("a"), registered("b"), granted_access("g1", "b", "pool:main", 0.0)], 0.0, access)
    out = decide_many(s, [requested("t1", "a", 1.0, cause=20), granted_access("g2", "a", "pool:main", 1.0),
                          requested("t2", "a", 1.0, cause=22)], 1.0, access)
    assert [(d["turn_id"], d["rule"]) for d in by_type(out, ev.TURN_CANCELLED)] == [("t1", DEFAULT_DENY)]
    assert [d["turn_id"] for d in by_type(out, ev.TURN_QUEUED)] == ["t2"]


def test_a_heartbeat_in_the_batch_stamped_before_the_expiry_saves_the_turn():
    s = pool(lease_seconds=5.0)
    decide_many(s, [registered("a"), requested("t1", "a", 1.0)], 1.0)    # lease until 6.0
    late = 6.0 + REAP_GRACE_S + 1.0
    out = decide_many(s, [(ev.HEARTBEAT_SENT, {"turn_id": "t1", "at": 5.5}, 30)], late)
    assert [t for t, _ in out] == [ev.LEASE_EXTENDED]
    assert s.turns["t1"].status == ev.GRANTED and s.turns["t1"].lease_expires_at == late + 5.0


def test_a_heartbeat_in_the_batch_stamped_after_the_expiry_comes_too_late():
    s = pool(lease_seconds=5.0)
    decide_many(s, [registered("a"), requested("t1", "a", 1.0)], 1.0)
    late = 6.0 + REAP_GRACE_S + 1.0
    out = decide_many(s, [(ev.HEARTBEAT_SENT, {"turn_id": "t1", "at": 6.5}, 30)], late)
    assert [t for t, _ in out] == [ev.TURN_REAPED]
    assert "t1" not in s.turns

"""The resource manager in the application, on the in-memory log with a manual clock:
leases expire by the clock alone (no real time), and a new leader answers what arrived
while no manager led, exactly once."""
from __future__ import annotations

import asyncio

import pytest

from app.adapters.memory_leadership import AlwaysLeads
from app.audit import load_records
from app.audit.access import access_story
from app.auth import OPERATOR
from app.domain import events as ev
from app.domain import resource_events as rev
from app.domain.resources import REAP_GRACE_S
from app.domain.streams import RESOURCE_DECISIONS_STREAM, lease_stream, turn_stream
from app.errors import Forbidden
from app.eventstore.model import NewEvent
from app.resources.manager import ResourceManager
from app.scheduler.loop import SchedulerSupervisor

from .conftest import SETTLE


def status(app, lease_id: str) -> str | None:
    return app.service.model.resources.leases[lease_id]["status"]


async def test_leases_expire_by_the_clock_and_the_waiter_behind_proceeds(app, register, clock):
    await app.resources.define_resource(OPERATOR, "env:staging", 1, 10.0)
    a, b = await register("a"), await register("b")
    held = await app.resources.acquire(a, "env:staging")
    waiting = await app.resources.acquire(b, "env:staging")
    assert (held["status"], waiting["status"]) == (rev.HELD, rev.WAITING)
    clock.advance(5_000)
    await app.resources.heartbeat(b, waiting["lease_id"])      # the waiter stays alive
    clock.advance(5_000 + int(REAP_GRACE_S * 1000))
    assert await app.projector.wait_until(lambda: status(app, waiting["lease_id"]) == rev.HELD, SETTLE)
    assert status(app, held["lease_id"]) == rev.REAPED
    doc = app.service.model.resources.leases[waiting["lease_id"]]
    assert doc["granted_at"] == clock() and doc["lease_expires_at"] == clock() + 10.0


async def test_a_new_leader_answers_what_arrived_while_none_led_exactly_once(app, register, clock):
    await app.resources.define_resource(OPERATOR, "repo:x", 1, 30.0)
    a, b = await register("a"), await register("b")
    first = await app.resources.acquire(a, "repo:x")
    await app.resource_manager.stop()
    # b asks while no manager leads: the request is on record, unanswered
    data = {"lease_id": "late", "agent_id": b.agent_id, "resource": "repo:x", "mode": rev.EXCLUSIVE,
            "level": 0, "at": clock()}
    await app.store.append([NewEvent(lease_stream("late"), rev.RESOURCE_ACQUIRE_REQUESTED, data)])
    await app.store.append([NewEvent(lease_stream(first["lease_id"]), rev.RESOURCE_RELEASE_REQUESTED,
                                     {"lease_id": first["lease_id"], "agent_id": a.agent_id, "at": clock()})])
    successor = ResourceManager(app.store, clock=clock, leadership=AlwaysLeads(), wakeups=app.store)
    await successor.start()
    try:
        assert await app.projector.wait_until(lambda: status(app, "late") == rev.HELD, SETTLE)
        decisions = await app.store.read(0, 1000, streams=[RESOURCE_DECISIONS_STREAM])
        assert [(e.type, e.data["lease_id"]) for e in decisions] == [
            (rev.RESOURCE_GRANTED, first["lease_id"]), (rev.RESOURCE_WAITING, "late"),
            (rev.RESOURCE_RELEASED, first["lease_id"]), (rev.RESOURCE_GRANTED, "late")]
    finally:
        await successor.stop()


async def test_a_turn_request_behind_a_revocation_in_the_log_is_refused_by_the_scheduler(app, register):
    """The API's pool check reads its read model, which can be a moment behind the log. The
    pool's scheduler decides it again in log order: a request that follows a revocation
    is refused, even when the worker that took it had not folded the revocation yet."""
    a = await register("a")
    grant = await app.resources.grant_access(OPERATOR, a.agent_id, "pool:default")
    assert (await app.service.request_turn(a, 10))["status"] == ev.GRANTED
    await app.resources.revoke_access(OPERATOR, grant["grant_id"])
    # A worker whose read model still shows the grant: its own check lets the request through.
    app.service.pool_guard = None
    with pytest.raises(Forbidden, match="access refused: .*was revoked"):
        await app.service.request_turn(a, 10)
    [refusal] = await app.store.read(0, 1000, types=[ev.TURN_CANCELLED])
    assert refusal.data["rule"] == f"grant:{grant['grant_id']}" and refusal.stream == "pool-default"
    story = access_story(await load_records(app.store), a.agent_id)
    assert [(p["target"], p["rule"]) for p in story["pool_refusals"]] == [("pool:default", refusal.data["rule"])]
    # Granted again: the next request, behind the new grant in the log, is queued.
    await app.resources.grant_access(OPERATOR, a.agent_id, "pool:*")
    assert (await app.service.request_turn(a, 10))["status"] == ev.QUEUED


async def test_a_new_scheduler_decides_the_backlog_with_the_policy_of_its_moment(app, register):
    """Requests that arrived while no scheduler led are decided, on takeover, with the
    policy as of each request's place in the log: a grant before one, a revocation after."""
    a = await register("a")
    grant = await app.resources.grant_access(OPERATOR, a.agent_id, "pool:default")
    await app.supervisor.stop()
    app.service.pool_guard = None   # the requests pass the API; the scheduler must decide
    for turn_id in ("before", "after"):
        await app.store.append([NewEvent(turn_stream(turn_id), ev.TURN_REQUESTED,
                                         {"turn_id": turn_id, "agent_id": a.agent_id, "pool": "default",
                                          "estimated_tokens": 10, "at": 0.0}, {})])
        if turn_id == "before":
            await app.resources.revoke_access(OPERATOR, grant["grant_id"])
    supervisor = SchedulerSupervisor(app.store, clock=app.service.clock, leadership=AlwaysLeads(),
                                     wakeups=app.store)
    await supervisor.start()
    try:
        answers: dict[str, dict] = {}
        async with asyncio.timeout(SETTLE):   # a bound on waiting for the answers, not a measurement
            async for event in app.store.subscribe(0, types=[ev.TURN_QUEUED, ev.TURN_CANCELLED]):
                answers[event.data["turn_id"]] = {"type": event.type, **event.data}
                if {"before", "after"} <= set(answers):
                    break
        assert answers["before"]["type"] == ev.TURN_QUEUED
        assert answers["after"]["type"] == ev.TURN_CANCELLED
        assert answers["after"]["reason"].startswith("access refused:") and answers["after"]["rule"]
    finally:
        await supervisor.stop()

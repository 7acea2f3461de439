"""The resource manager in the application, on the in-memory log with a manual clock:
leases expire by the clock alone (no real time), and a new leader answers what arrived
while no manager led, exactly once."""
from __future__ import annotations

from app.adapters.memory_leadership import AlwaysLeads
from app.auth import OPERATOR
from app.domain import resource_events as rev
from app.domain.resources import REAP_GRACE_S
from app.domain.streams import RESOURCE_DECISIONS_STREAM, lease_stream
from app.eventstore.model import NewEvent
from app.resources.manager import ResourceManager

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

"""Commands, waits, hibernation and quarantine, through the Service, on the in-memory log."""
from __future__ import annotations

import asyncio

import pytest

from app.auth import OPERATOR
from app.domain import events as ev
from app.domain.decide import REAP_GRACE_S
from app.domain.streams import pool_stream, turn_stream
from app.errors import BadInput, Conflict, Forbidden, NotFound

from .conftest import SETTLE


async def decisions(app, type_: str) -> list:
    return await app.store.read(0, 10_000, streams=[pool_stream("default")], types=[type_])


async def test_register_appends_the_agent_and_the_scheduler_admits_it(app, register, clock):
    me = await register("alice", priority_class=ev.BATCH)
    view = app.service.agent_view(me.agent_id)
    assert (view["name"], view["pool"], view["priority_class"]) == ("alice", "default", ev.BATCH)
    assert await app.projector.wait_until(lambda: len(app.projector.model.pools["default"].agents) == 1, SETTLE)
    [admitted] = await decisions(app, ev.AGENT_ADMITTED)
    assert admitted.data["agent_id"] == me.agent_id and admitted.data["at"] == clock()


async def test_bad_commands_append_nothing(app, register):
    me = await register()
    head = await app.store.head()
    with pytest.raises(BadInput):
        await app.service.register_agent(OPERATOR, "")
    with pytest.raises(NotFound):
        await app.service.register_agent(OPERATOR, "x", pool="nowhere")
    with pytest.raises(BadInput):
        await app.service.request_turn(me, -1)
    with pytest.raises(Forbidden):
        await app.service.request_turn(OPERATOR, 10)
    with pytest.raises(BadInput):
        await app.service.create_pool(OPERATOR, app.service.model.pools["default"].settings.__class__(name="p2"),
                                      upstream_api_key="sk-not-kept-in-memory")
    assert await app.store.head() == head


async def test_request_heartbeat_complete(app, register, clock):
    me = await register()
    turn = await app.service.request_turn(me, 100, 50)
    assert turn["status"] == ev.GRANTED and turn["lane"] == 0
    assert turn["lease_expires_at"] == clock() + 30
    clock.advance(10_000)
    beat = await app.service.heartbeat(me, turn["turn_id"])
    assert beat["lease_expires_at"] == clock() + 30
    done = await app.service.complete_turn(me, turn["turn_id"], ev.OK, 90, 40)
    assert (done["status"], done["prompt_tokens"], done["completion_tokens"]) == (ev.COMPLETED, 90, 40)
    with pytest.raises(Conflict):
        await app.service.complete_turn(me, turn["turn_id"], ev.OK, 1, 1)
    types = [e.type for e in await app.store.read(0, 1000, streams=[turn_stream(turn["turn_id"])])]
    assert types == [ev.TURN_REQUESTED, ev.HEARTBEAT_SENT, ev.COMPLETION_REPORTED]


async def test_a_second_request_queues_and_a_waiting_one_is_granted_when_the_lane_frees(app, register):
    first, second = await register("first"), await register("second")
    held = await app.service.request_turn(first, 10)
    assert held["status"] == ev.GRANTED
    queued = await app.service.request_turn(second, 10)
    assert queued["status"] == ev.QUEUED and queued["level"] is not None
    await app.service.cancel_turn(second, queued["turn_id"])
    # A request that waits: answered QUEUED at once, returned GRANTED when the lane frees.
    waiting = asyncio.create_task(app.service.request_turn(second, 10, wait_seconds=SETTLE))
    await app.projector.wait_until(
        lambda: any(t["status"] == ev.QUEUED for t in app.projector.model.turns.values()), SETTLE)
    assert not waiting.done()
    await app.service.complete_turn(first, held["turn_id"], ev.OK, 5, 5)
    granted = await asyncio.wait_for(waiting, SETTLE)
    assert granted["status"] == ev.GRANTED and granted["lane"] == 0


async def test_cancel_a_queued_turn(app, register):
    first, second = await register("first"), await register("second")
    await app.service.request_turn(first, 10)
    queued = await app.service.request_turn(second, 10)
    cancelled = await app.service.cancel_turn(second, queued["turn_id"])
    assert cancelled["status"] == ev.CANCELLED and cancelled["reason"] == f"cancelled by {second.actor}"
    with pytest.raises(Conflict):
        await app.service.cancel_turn(second, queued["turn_id"])


async def test_a_turn_request_wakes_a_hibernated_agent(app, register):
    me = await register()
    parked = await app.service.set_hibernated(OPERATOR, me.agent_id, True)
    assert parked["hibernated"] is True
    hibernated = await app.store.read(0, 100, types=[ev.AGENT_HIBERNATED])
    assert hibernated[0].data["resume_point"]
    turn = await app.service.request_turn(me, 10)
    assert turn["status"] == ev.GRANTED
    assert app.service.agent_view(me.agent_id)["hibernated"] is False
    [woken] = await app.store.read(0, 100, types=[ev.AGENT_WOKEN])
    assert woken.data["reason"] == "turn requested"


async def test_expired_leases_are_reaped_on_the_clock_and_repeated_reaps_quarantine(app, register, clock):
    me = await register()
    settings = app.service.model.pools["default"].settings
    assert REAP_GRACE_S == 0.25
    for _n in range(settings.quarantine_after_reaps):
        turn = await app.service.request_turn(me, 10)
        assert turn["status"] == ev.GRANTED
        clock.advance(30_249)   # past the lease, inside the reap grace: nothing to reap yet
        clock.advance(1)        # lease + grace (REAP_GRACE_S) exactly: due
        assert await app.projector.wait_until(
            lambda turn=turn: app.service.turn_view(turn["turn_id"])["status"] == ev.REAPED, SETTLE,
            turn_id=turn["turn_id"])
        assert app.service.turn_view(turn["turn_id"])["finished_at"] == clock()
    assert await app.projector.wait_until(
        lambda: app.service.agent_view(me.agent_id)["state"] == ev.QUARANTINED, SETTLE)
    assert len(await decisions(app, ev.TURN_REAPED)) == settings.quarantine_after_reaps
    with pytest.raises(Forbidden):
        await app.service.request_turn(me, 10)
    released = await app.service.release_agent(OPERATOR, me.agent_id)
    assert released["state"] != ev.QUARANTINED
    assert (await app.service.request_turn(me, 10))["status"] == ev.GRANTED


async def test_a_wake_by_turn_request_waits_for_the_agents_lock(app, register):
    # hibernation, wakes and context appends of one agent take one lock (Service.agent_lock):
    # a turn request that must wake the agent cannot interleave with an append or an idle
    # hibernation holding it
    me = await register("locked")
    await app.service.set_hibernated(OPERATOR, me.agent_id, True)
    async with app.service.agent_lock(me.agent_id):
        request = asyncio.create_task(app.service.request_turn(me, 100, 100))
        for _ in range(20):
            await asyncio.sleep(0)          # let the request run as far as it can
        assert await app.store.read(0, 100, types=[ev.AGENT_WOKEN]) == []
        assert not request.done()
    turn = await request
    assert turn["status"] in (ev.QUEUED, ev.GRANTED)
    assert len(await app.store.read(0, 100, types=[ev.AGENT_WOKEN])) == 1


async def test_a_pool_created_later_gets_its_scheduler_from_the_log(app, register):
    settings = app.service.pool_settings("default").__class__(name="later", lanes=1, lease_seconds=30)
    await app.service.create_pool(OPERATOR, settings)
    me = await register("in-later", pool="later")
    turn = await app.service.request_turn(me, 10)
    assert (turn["pool"], turn["status"]) == ("later", ev.GRANTED)
    [created] = await app.store.read(0, 10, types=[ev.POOL_CREATED], streams=[pool_stream("later")])
    assert set(app.supervisor.schedulers) == {"default", "later"}
    assert app.supervisor.schedulers["later"].state.version >= 1 and created.version == 0


async def test_a_run_id_is_recorded_with_the_request_and_charged_to_its_run(app, register, clock):
    me = await register()
    turn = await app.service.request_turn(me, 100, 50, run_id="chat-7")
    [requested] = await app.store.read(0, 100, streams=[turn_stream(turn["turn_id"])], types=[ev.TURN_REQUESTED])
    assert requested.data["run_id"] == "chat-7"
    [queued] = await decisions(app, ev.TURN_QUEUED)
    assert queued.data["run_id"] == "chat-7"
    clock.advance(4_000)
    await app.service.complete_turn(me, turn["turn_id"], ev.OK, 90, 40)
    pool = app.projector.model.pools["default"]
    assert await app.projector.wait_until(lambda: pool.runs.get("chat-7") is not None
                                          and pool.runs["chat-7"].live == 0, SETTLE)
    assert pool.runs["chat-7"].service_s == 4.0
    plain = await app.service.request_turn(me, 100, 50)
    [requested] = await app.store.read(0, 100, streams=[turn_stream(plain["turn_id"])], types=[ev.TURN_REQUESTED])
    assert "run_id" not in requested.data


async def test_a_bad_run_id_is_refused_and_appends_nothing(app, register):
    me = await register()
    head = await app.store.head()
    for bad in ("", "x" * 201, "tab\there", 7):
        with pytest.raises(BadInput, match="runId"):
            await app.service.request_turn(me, 100, 50, run_id=bad)
    assert await app.store.head() == head

"""Idempotent commands (a client requestId) and containment (a per-agent cap on queued
turns, absurd estimates), through the Service on the in-memory log."""
from __future__ import annotations

import pytest

from app.domain import events as ev
from app.domain.streams import turn_stream
from app.errors import BadInput, Conflict, LimitExceeded


async def turn_inputs(app, turn_id: str) -> list[str]:
    return [e.type for e in await app.store.read(0, 1000, streams=[turn_stream(turn_id)])]


async def test_a_retried_request_turn_returns_the_first_turn_and_appends_nothing(app, register):
    me = await register()
    first = dict(await app.service.request_turn(me, 100, 10, request_id="req-1"))
    head = await app.store.head()
    again = await app.service.request_turn(me, 100, 10, request_id="req-1")
    assert again["turn_id"] == first["turn_id"] and again["status"] == ev.GRANTED
    assert await app.store.head() == head
    [requested] = await app.store.read(0, 10, streams=[turn_stream(first["turn_id"])])
    assert requested.data["request_id"] == "req-1"
    # Another id is another turn; the same id from another agent is that agent's own turn.
    other = await app.service.request_turn(me, 100, 10, request_id="req-2")
    assert other["turn_id"] != first["turn_id"]
    you = await register("b")
    yours = await app.service.request_turn(you, 100, 10, request_id="req-1")
    assert yours["turn_id"] not in (first["turn_id"], other["turn_id"]) and yours["agent_id"] == you.agent_id


async def test_a_request_id_reused_for_a_different_request_is_a_conflict(app, register):
    me = await register()
    await app.service.request_turn(me, 100, 10, request_id="same")
    head = await app.store.head()
    with pytest.raises(Conflict, match="different turn request"):
        await app.service.request_turn(me, 200, 10, request_id="same")
    with pytest.raises(BadInput, match="requestId"):
        await app.service.request_turn(me, 100, 10, request_id="")
    with pytest.raises(BadInput, match="requestId"):
        await app.service.request_turn(me, 100, 10, request_id="x" * 129)
    assert await app.store.head() == head


async def test_a_retried_completion_returns_the_first_answer_and_appends_nothing(app, register):
    me = await register()
    turn = await app.service.request_turn(me, 100, 10)
    done = dict(await app.service.complete_turn(me, turn["turn_id"], ev.OK, 90, 5, request_id="done-1"))
    head = await app.store.head()
    again = await app.service.complete_turn(me, turn["turn_id"], ev.OK, 90, 5, request_id="done-1")
    assert again == done and again["status"] == ev.COMPLETED
    assert await app.store.head() == head
    assert await turn_inputs(app, turn["turn_id"]) == [ev.TURN_REQUESTED, ev.COMPLETION_REPORTED]
    with pytest.raises(Conflict, match="already completed"):   # a new id for a finished turn
        await app.service.complete_turn(me, turn["turn_id"], ev.OK, 90, 5, request_id="done-2")
    with pytest.raises(Conflict, match="already completed"):   # and no id at all, as before
        await app.service.complete_turn(me, turn["turn_id"], ev.OK, 90, 5)


async def test_a_retried_cancel_returns_the_first_answer(app, register):
    me = await register()
    turn = await app.service.request_turn(me, 100, 10)
    cancelled = dict(await app.service.cancel_turn(me, turn["turn_id"], request_id="stop"))
    head = await app.store.head()
    assert await app.service.cancel_turn(me, turn["turn_id"], request_id="stop") == cancelled
    assert cancelled["status"] == ev.CANCELLED and await app.store.head() == head


async def test_an_agent_that_floods_requests_is_capped_and_the_others_are_not(app, register):
    app.service.max_queued_per_agent = 3
    flooder, calm = await register("flooder"), await register("calm")
    holding = await app.service.request_turn(flooder, 10)   # the one lane: the rest must queue
    assert holding["status"] == ev.GRANTED
    queued = [await app.service.request_turn(flooder, 10, request_id=f"r{i}") for i in range(3)]
    assert [t["status"] for t in queued] == [ev.QUEUED] * 3
    head = await app.store.head()
    with pytest.raises(LimitExceeded, match="the most one agent may have waiting is 3"):
        await app.service.request_turn(flooder, 10)
    assert await app.store.head() == head                  # refused: nothing appended
    # A retry of an accepted request is not a new turn: the cap does not refuse it.
    assert (await app.service.request_turn(flooder, 10, request_id="r1"))["turn_id"] == queued[1]["turn_id"]
    mine = await app.service.request_turn(calm, 10)         # another agent still gets in line
    assert mine["status"] == ev.QUEUED
    await app.service.cancel_turn(flooder, queued[0]["turn_id"])
    assert (await app.service.request_turn(flooder, 10))["status"] == ev.QUEUED   # room again


async def test_absurd_estimates_are_refused_with_a_clear_error(app, register):
    me = await register()
    head = await app.store.head()
    tpm = app.service.pool_settings("default").tpm
    for est, out in [(-1, 0), (tpm, 1), (10**12, 0), (0, 10**12)]:
        with pytest.raises(BadInput):
            await app.service.request_turn(me, est, out)
    with pytest.raises(BadInput):
        await app.service.request_turn(me, 1.5)
    assert await app.store.head() == head


async def test_a_retried_heartbeat_appends_nothing_and_a_new_one_extends_again(app, register, clock):
    me = await register()
    turn = await app.service.request_turn(me, 100, 10)
    clock.advance(5_000)
    beat = dict(await app.service.heartbeat(me, turn["turn_id"], request_id="hb-1"))   # a copy: views are live
    head = await app.store.head()
    clock.advance(5_000)
    assert await app.service.heartbeat(me, turn["turn_id"], request_id="hb-1") == beat
    assert await app.store.head() == head
    later = await app.service.heartbeat(me, turn["turn_id"], request_id="hb-2")
    assert later["lease_expires_at"] == clock() + 30 > beat["lease_expires_at"]
    assert await turn_inputs(app, turn["turn_id"]) == [ev.TURN_REQUESTED, ev.HEARTBEAT_SENT, ev.HEARTBEAT_SENT]

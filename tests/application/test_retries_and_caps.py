"""Idempotent commands (a client requestId) and containment (a per-agent cap on queued
turns, absurd estimates), through the Service on the in-memory log."""
from __future__ import annotations

import asyncio

import pytest

from app.domain import events as ev
from app.domain.streams import turn_stream
from app.errors import BadInput, Conflict, LimitExceeded
from app.eventstore.model import NewEvent
from app.service import Service
from tests.application.conftest import SETTLE


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


async def test_the_scheduler_refuses_requests_over_the_cap_that_a_worker_let_through(app, register):
    """Each worker checks the cap against what it has seen; requests from two workers can
    pass both checks at once. The cap written in each request is decided again by the
    pool's scheduler, in log order, which sees them all."""
    flooder = await register("flooder")
    assert (await app.service.request_turn(flooder, 10))["status"] == ev.GRANTED   # holds the one lane
    # Two workers' requests, as the log receives them: appended straight, each carrying its cap.
    turn_ids = [f"t{i}" for i in range(5)]
    for turn_id in turn_ids:
        await app.store.append([NewEvent(turn_stream(turn_id), ev.TURN_REQUESTED,
                                         {"turn_id": turn_id, "agent_id": flooder.agent_id, "pool": "default",
                                          "estimated_tokens": 10, "max_output_tokens": 0, "at": 0.0,
                                          "queue_cap": 3}, {})])
    decided = await answers(app, turn_ids)
    assert [decided[t][0] for t in turn_ids] == [ev.TURN_QUEUED] * 3 + [ev.TURN_CANCELLED] * 2
    assert decided["t3"][1] == "queue full: the agent has 3 turns waiting, the most one agent may have is 3"
    # Without a cap in the request (older logs, the simulator) nothing is refused for it.
    await app.store.append([NewEvent(turn_stream("old"), ev.TURN_REQUESTED,
                                     {"turn_id": "old", "agent_id": flooder.agent_id, "pool": "default",
                                      "estimated_tokens": 10, "at": 0.0}, {})])
    assert (await answers(app, ["old"]))["old"][0] == ev.TURN_QUEUED


async def answers(app, turn_ids: list[str]) -> dict[str, tuple[str, str | None]]:
    """The scheduler's first answer to each of these turns, as it reaches the log."""
    decided: dict[str, tuple[str, str | None]] = {}
    async with asyncio.timeout(SETTLE):   # a bound on waiting for the answers, not a measurement
        async for event in app.store.subscribe(0, types=[ev.TURN_QUEUED, ev.TURN_CANCELLED]):
            if event.data["turn_id"] in turn_ids:
                decided.setdefault(event.data["turn_id"], (event.type, event.data.get("reason")))
            if len(decided) == len(turn_ids):
                return decided


async def test_two_workers_flooding_at_once_queue_no_more_than_the_cap(app, register):
    app.service.max_queued_per_agent = 3
    other_worker = Service(app.store, app.projector, clock=app.service.clock, max_queued_per_agent=3)
    flooder = await register("flooder")
    assert (await app.service.request_turn(flooder, 10))["status"] == ev.GRANTED
    results = await asyncio.gather(*(service.request_turn(flooder, 10) for _ in range(4)
                                     for service in (app.service, other_worker)), return_exceptions=True)
    assert sum(1 for r in results if isinstance(r, dict) and r["status"] == ev.QUEUED) == 3
    refused = [r for r in results if not isinstance(r, dict)]
    assert len(refused) == 5 and all(isinstance(r, LimitExceeded) for r in refused), refused
    state = app.projector.model.pools["default"]
    assert sum(1 for t in state.turns.values() if t.status == ev.QUEUED) == 3
    # At least one of them got past its worker's check and was refused by the scheduler.
    cancelled = await app.store.read(0, 1000, types=[ev.TURN_CANCELLED])
    assert any(e.data["reason"].startswith("queue full:") for e in cancelled)


class Rendezvous:
    """Holds each worker's first append of a turn input until every worker has reached
    its own: each has made its checks before anyone appended, the race at its widest."""

    def __init__(self, parties: int):
        self.parties, self.arrived, self.all_here = parties, 0, asyncio.Event()

    def store_for(self, store):
        rendezvous, first = self, [True]

        class Racing:
            def __getattr__(self, name):
                return getattr(store, name)

            async def append(self, events, expected=None):
                if first[0] and events[0].type in (ev.HEARTBEAT_SENT, ev.COMPLETION_REPORTED,
                                                   ev.CANCEL_REQUESTED):
                    first[0] = False
                    rendezvous.arrived += 1
                    if rendezvous.arrived == rendezvous.parties:
                        rendezvous.all_here.set()
                    await rendezvous.all_here.wait()
                return await store.append(events, expected)
        return Racing()


async def test_retries_racing_on_two_workers_append_one_input(app, register, clock):
    """The retry lock is per process: two workers each take their own. The turn stream's
    expected version makes the second attempt find the first instead of appending again."""
    me = await register()
    for command in ("heartbeat", "complete_turn", "cancel_turn"):
        turn = await app.service.request_turn(me, 100, 10)
        rendezvous = Rendezvous(2)
        workers = [Service(rendezvous.store_for(app.store), app.projector, clock=app.service.clock)
                   for _ in range(2)]
        args = (ev.OK, 90, 5) if command == "complete_turn" else ()
        answers = await asyncio.gather(*(getattr(w, command)(me, turn["turn_id"], *args, request_id="r")
                                         for w in workers))
        assert answers[0] == answers[1], command
        inputs = await turn_inputs(app, turn["turn_id"])
        assert inputs == [ev.TURN_REQUESTED, {"heartbeat": ev.HEARTBEAT_SENT, "complete_turn": ev.COMPLETION_REPORTED,
                                              "cancel_turn": ev.CANCEL_REQUESTED}[command]], command
        if command == "heartbeat":
            await app.service.complete_turn(me, turn["turn_id"], ev.OK, 1, 1)

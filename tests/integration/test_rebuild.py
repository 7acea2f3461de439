"""Rebuild equals live on a realistic run: thousands of events over several pools, with
queueing, heartbeats, 429 pauses, cancellations and reaps, with streaming turns whose start
deadlines come from the estimator the fold keeps."""
from __future__ import annotations

import asyncio
import contextlib
import random
from datetime import UTC

from app.auth import OPERATOR, Principal
from app.bootstrap import Runtime
from app.domain import events as ev
from app.domain.settings import PoolSettings
from app.errors import Conflict
from app.replay import pool_state_at, replay_check

# Long enough that a learned start deadline (a few times the first-chunk delay, which a
# loaded machine stretches) stays below it; short enough that hung calls are reaped in the run.
LEASE = 3.0


async def test_rebuild_from_zero_equals_live_over_several_busy_pools(fresh_database):
    rt = await Runtime(fresh_database).start()
    try:
        pools = []
        for i, lanes in enumerate((1, 2, 3)):
            name = f"busy{i}"
            await rt.service.create_pool(OPERATOR, PoolSettings(name=name, lanes=lanes, lease_seconds=LEASE,
                                                                rpm=100_000, tpm=10_000_000,
                                                                start_timeout_floor_seconds=0.3))
            pools.append(name)
        agents = []
        for i in range(12):
            view, _ = await rt.service.register_agent(OPERATOR, f"a{i}", pools[i % 3],
                                                      ev.PRIORITY_CLASSES[i % 3])
            agents.append(Principal("agent", view["agent_id"]))

        async def drive(k: int, me: Principal) -> None:
            rng = random.Random(k)
            streams = k % 2 == 1          # heartbeats at once after the grant (its first chunk)
            early = await rt.service.request_turn(me, 10, 10, wait_seconds=0)
            await rt.service.cancel_turn(me, early["turn_id"])        # cancelled, queued or granted
            for _ in range(40):
                turn = await rt.service.request_turn(me, rng.randint(10, 2000), 100, wait_seconds=5,
                                                     streams=streams)
                if turn["status"] != ev.GRANTED:
                    if turn["finished_at"] is None:
                        await rt.service.cancel_turn(me, turn["turn_id"])
                    continue
                roll = rng.random()
                if roll < 0.03:
                    continue                                   # a hung call: the lease reaps it
                # On a loaded machine a streaming turn may miss its start deadline before its
                # first heartbeat lands: then it is reaped, and the late calls are refused.
                with contextlib.suppress(Conflict):
                    if streams or roll < 0.3:
                        await rt.service.heartbeat(me, turn["turn_id"])
                    outcome = ev.RATE_LIMITED if roll > 0.97 else ev.OK
                    await rt.service.complete_turn(me, turn["turn_id"], outcome, rng.randint(10, 2000),
                                                   rng.randint(0, 300), 0.2 if outcome == ev.RATE_LIMITED else None)

        await asyncio.gather(*(drive(k, me) for k, me in enumerate(agents)))
        model = rt.projector.model
        # Hung calls at the end still hold lanes until their leases run out: wait for the reaps.
        assert await rt.projector.wait_until(
            lambda: all(lane is None for p in pools for lane in model.pools[p].lanes), 60)
        report = await replay_check(rt.store, rt.projector)
        assert report.events_replayed >= 2000, report.events_replayed
        assert report.matches, report.differences
        for pool in pools:
            per_pool = await replay_check(rt.store, rt.projector, pool)
            assert per_pool.matches
            # time travel to the head equals the live scheduler state
            at_head = await pool_state_at(rt.store, pool, report.position)
            assert at_head.canonical_json() == rt.projector.model.pools[pool].canonical_json()
        events = await rt.store.read(0, 100_000)
        types = {e.type for e in events}
        # (An agent's 429 pauses that agent; one corroborated by another agent's, the pool.)
        assert {ev.TURN_REAPED, ev.AGENT_PAUSED, ev.TURN_CANCELLED, ev.LEASE_EXTENDED} <= types
        # The estimator warmed up and shortened grants below the lease, and replay agreed.
        assert all(rt.projector.model.pools[p].start.samples >= 8 for p in pools)
        assert any(e.type == ev.TURN_GRANTED and e.data.get("start_deadline")
                   and e.data["lease_expires_at"] - e.data["at"] < LEASE for e in events)
    finally:
        await rt.stop()


async def test_projector_folds_its_own_appends_at_once_and_reads_the_rest(fresh_database):
    from datetime import datetime

    from app.eventstore.model import NewEvent, RecordedEvent
    rt = await Runtime(fresh_database).start()
    try:
        await rt.projector.catch_up()
        view, _ = await rt.service.register_agent(OPERATOR, "solo", "default", ev.INTERACTIVE)
        me = Principal("agent", view["agent_id"])
        # The scheduler answers a registration (AgentAdmitted): wait for it, so that no
        # decision of its lands between the positions this test pins down.
        assert await rt.projector.wait_until(
            lambda: view["agent_id"] in rt.projector.model.pools["default"].agents, 5.0)
        # Our own commit is folded before append() returns: no log read, no NOTIFY wait.
        recorded = await rt.store.append([NewEvent(f"turn-x{i}", ev.HEARTBEAT_SENT,
                                                   {"turn_id": f"x{i}", "pool": "default", "at": 0.0})
                                          for i in range(3)])
        assert rt.projector.model.position == recorded[-1].position
        # Events that do not follow the model's position directly are left to the follower.
        position = rt.projector.model.position
        stray = RecordedEvent(position + 2, "turn-y", 0, ev.HEARTBEAT_SENT, {"turn_id": "y"}, {},
                              datetime.now(UTC))
        rt.projector.offer([stray])
        assert rt.projector.model.position == position
        # An append inside a caller's own transaction is not folded before that commits: it
        # may still roll back (a pool created together with its secret, say).
        async with rt.store.pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            await rt.store.append([NewEvent("turn-z", ev.HEARTBEAT_SENT, {"turn_id": "z", "pool": "default",
                                                                           "at": 0.0})], conn=conn)
            assert rt.projector.model.position == position
            await tx.rollback()
        # The grant path still works end to end, and a rebuild agrees with the live model.
        turn = await rt.service.request_turn(me, 10, 10, wait_seconds=5)
        assert turn["status"] == ev.GRANTED
        await rt.service.complete_turn(me, turn["turn_id"], ev.OK, 10, 5)
        report = await replay_check(rt.store, rt.projector)
        assert report.matches, report.differences
    finally:
        await rt.stop()


async def test_waiters_wake_on_the_fold_that_satisfies_them_and_only_then(fresh_database):
    from app.eventstore.model import NewEvent
    rt = await Runtime(fresh_database).start()
    try:
        await rt.projector.catch_up()
        model = rt.projector.model
        start = model.position

        def appended(n: int) -> bool:
            return model.position >= start + n

        def broken() -> bool:
            if model.position > start:
                raise KeyError("a predicate's own bug")
            return False

        def two() -> bool:
            return appended(2)

        def thousand() -> bool:
            return appended(1000)

        second = asyncio.create_task(rt.projector.wait_until(two, 5.0))
        failing = asyncio.create_task(rt.projector.wait_until(broken, 5.0))
        never = asyncio.create_task(rt.projector.wait_until(thousand, 0.3))
        # Keyed by turn: re-checked only when an event of that turn is folded.
        on_w2 = asyncio.create_task(rt.projector.wait_until(two, 5.0, turn_id="w2"))
        elsewhere = asyncio.create_task(rt.projector.wait_until(two, 30.0, turn_id="w9"))
        await asyncio.sleep(0)                     # one pass of the loop: each task registers its waiter
        await rt.store.append([NewEvent("turn-w1", ev.HEARTBEAT_SENT, {"turn_id": "w1", "at": 0.0})])
        with contextlib.suppress(KeyError):
            await failing                          # the predicate's error reaches its waiter
        assert isinstance(failing.exception(), KeyError)
        # `failing` was woken by the pass over the waiters that followed the fold of w1, the
        # same pass that checked `second`: one event in, not yet satisfied.
        assert not second.done()
        await rt.store.append([NewEvent("turn-w2", ev.HEARTBEAT_SENT, {"turn_id": "w2", "at": 0.0})])
        assert await asyncio.wait_for(second, 2.0) is True
        assert await asyncio.wait_for(on_w2, 2.0) is True
        # The pass that woke on_w2 is over: had it re-checked w9's waiter, that would be done.
        assert not elsewhere.done()                # w2's event is not w9's: not re-checked
        await rt.store.append([NewEvent("turn-w9", ev.HEARTBEAT_SENT, {"turn_id": "w9", "at": 0.0})])
        assert await asyncio.wait_for(elsewhere, 2.0) is True   # ...until w9 changes
        assert await never is False                # timed out, and says so
        left = {predicate for predicate, _future in rt.projector._waiters}
        assert not left & {two, broken, thousand}  # none of ours left behind
        assert not rt.projector._turn_waiters
    finally:
        await rt.stop()

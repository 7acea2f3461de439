"""One writer per pool: a second scheduler waits on the advisory lock, takes over when
the leader dies (gracefully or with its session killed), and two writers that both
believe they lead can never both append to a pool stream."""
from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from datetime import timedelta
from types import SimpleNamespace

import asyncpg
import httpx
import pytest

from app import bootstrap
from app.adapters import advisory_lock
from app.adapters.advisory_lock import lock_key
from app.audit import load_records
from app.audit.verify import verify
from app.auth import OPERATOR, Principal
from app.bootstrap import Runtime
from app.domain import events as ev
from app.domain.settings import PoolSettings
from app.eventstore.model import ConcurrencyError, NewEvent
from app.replay import replay_check
from app.scheduler.loop import PoolScheduler
from app.scheduler.writer import LostLeadership
from tests.client import COMPLETE, REQUEST, GraphQLClient, register, start_serve
from tests.conftest import OPERATOR_TOKEN


async def test_standby_takes_over_when_the_leader_dies(fresh_database):
    a = await Runtime(fresh_database).start(PoolSettings(lanes=2))
    b = await Runtime(fresh_database).start()
    try:
        await asyncio.wait_for(a.supervisor.schedulers["default"].leading.wait(), 10)
        assert not b.supervisor.schedulers["default"].leading.is_set()
        agent, _token = await a.service.register_agent(OPERATOR, "survivor")
        me = Principal("agent", agent["agent_id"])
        turn = await b.service.request_turn(me, 10, 10, wait_seconds=5)   # any worker serves
        assert turn["status"] == ev.GRANTED
        await a.stop()                                                     # the leader dies
        await asyncio.wait_for(b.supervisor.schedulers["default"].leading.wait(), 10)
        done = await b.service.complete_turn(me, turn["turn_id"], ev.OK, 10, 10)
        assert done["status"] == ev.COMPLETED
        again = await b.service.request_turn(me, 10, 10, wait_seconds=5)
        assert again["status"] == ev.GRANTED
        from app.replay import replay_check
        report = await replay_check(b.store, b.projector)   # two writers' history, one truth
        assert report.matches, report.differences
    finally:
        await b.stop()


async def test_a_second_writer_cannot_append_at_the_same_version(fresh_database):
    rt = await Runtime(fresh_database, run_schedulers=False).start()
    try:
        version = await rt.store.stream_version("pool-default")
        first = NewEvent("pool-default", ev.POOL_RESUMED, {"at": 1.0})
        await rt.store.append([first], {"pool-default": version})
        with pytest.raises(ConcurrencyError):
            await rt.store.append([first], {"pool-default": version})
    finally:
        await rt.stop()


async def _until(check, timeout: float = 30.0) -> None:
    """Poll a condition (not a clock): return as soon as it holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.02)


def _lock_where(pool: str) -> str:
    """pg_locks shows a bigint advisory key as classid (high half) and objid (low half)."""
    key = lock_key(pool) & (2**64 - 1)
    return (f"locktype = 'advisory' AND classid = {key >> 32} AND objid = {key & 0xFFFFFFFF} "
            "AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")


async def _pool_checks_out(rt: Runtime, pool: str = "default") -> None:
    """Every input answered once, every turn granted at most once, the invariants hold on
    the log, and a rebuild from 0 equals the live model."""
    records = await load_records(rt.store)
    decisions = [r for r in records if r.stream == f"pool-{pool}"]
    grants = Counter(r.data["turn_id"] for r in decisions if r.type == ev.TURN_GRANTED)
    assert grants and max(grants.values()) == 1, grants.most_common(3)
    answers = Counter(r.data["cause"] for r in decisions if r.type in (ev.TURN_QUEUED, ev.AGENT_ADMITTED))
    assert answers and max(answers.values()) == 1, answers.most_common(3)
    report = verify(records)
    assert report.ok, report.first
    replay = await replay_check(rt.store, rt.projector)
    assert replay.matches, replay.differences


async def test_two_schedulers_deciding_on_the_same_state_one_append_wins(fresh_database):
    a = await Runtime(fresh_database, run_schedulers=False).start(PoolSettings(lanes=2))
    b = await Runtime(fresh_database, run_schedulers=False).start()
    try:
        await b.projector.catch_up()
        leaders = [PoolScheduler("default", rt.store, fresh_database) for rt in (a, b)]
        states = [rt.projector.model.pools["default"].copy() for rt in (a, b)]
        assert states[0].version == states[1].version
        view, _token = await a.service.register_agent(OPERATOR, "contested")
        [registered] = await a.store.read(0, 10, types=[ev.AGENT_REGISTERED])
        # Both decide the same answer from the same version; both append expecting it.
        results = await asyncio.gather(*(s._process(st, [registered]) for s, st in zip(leaders, states)),
                                       return_exceptions=True)
        assert sorted(type(r).__name__ for r in results) == ["ConcurrencyError", "NoneType"], results
        admitted = await a.store.read(0, 10, types=[ev.AGENT_ADMITTED])
        assert len(admitted) == 1 and admitted[0].data["agent_id"] == view["agent_id"]
        # The loser, shown the winner's decision as its inbox would, knows it no longer leads.
        loser = next(i for i, r in enumerate(results) if isinstance(r, ConcurrencyError))
        winner_state = states[1 - loser]
        assert winner_state.version == admitted[0].version
        fresh_copy = b.projector.model.pools["default"].copy()
        fresh_copy.version -= 1          # a state from before the winner's append
        with pytest.raises(LostLeadership):
            await leaders[loser]._process(fresh_copy, admitted)
    finally:
        await a.stop()
        await b.stop()


async def test_two_scheduler_loops_that_both_lead_never_double_grant(fresh_database, monkeypatch):
    """Both loops take a lock of their own (the advisory lock bypassed), so each believes it
    leads, races the other on every input, steps down when it loses and leads again."""
    keys = itertools.count(1)
    monkeypatch.setattr(advisory_lock, "lock_key", lambda _pool: next(keys))
    # The bare lock, without the lease: two leases of one pool would take the row from each
    # other, and this test is about what the expected version alone guarantees.
    monkeypatch.setattr(bootstrap, "LeaseLeadership",
                        lambda url, **_kw: advisory_lock.AdvisoryLockLeadership(url))
    a = await Runtime(fresh_database).start(PoolSettings(lanes=2, lease_seconds=30))
    b = await Runtime(fresh_database).start()
    try:
        for rt in (a, b):
            await asyncio.wait_for(rt.supervisor.schedulers["default"].leading.wait(), 10)
        services = itertools.cycle((a.service, b.service))
        agents = [Principal("agent", (await next(services).register_agent(OPERATOR, f"racer{i}"))[0]["agent_id"])
                  for i in range(4)]

        async def both_lead() -> bool:
            return all(rt.supervisor.schedulers["default"].leading.is_set() for rt in (a, b))

        async def one_turn(me: Principal) -> None:
            turn = await next(services).request_turn(me, 10, 10, wait_seconds=30)
            assert turn["status"] == ev.GRANTED, turn
            done = await next(services).complete_turn(me, turn["turn_id"], ev.OK, 10, 10)
            assert done["status"] == ev.COMPLETED, done

        def stepped_down() -> list[str]:
            return [m for rt in (a, b) for m in rt.supervisor.schedulers["default"].step_downs]

        # Rounds until three races were lost (a round in which one loop answered every
        # input before the other saw one has no loser), at most twenty.
        rounds = 0
        while len(stepped_down()) < 3:
            assert rounds < 20, f"the loops raced {rounds} rounds and stepped down {stepped_down()}"
            await _until(both_lead)       # the last round's loser leads again: a race is due
            await asyncio.gather(*(one_turn(me) for me in agents))
            rounds += 1
        # Each loser either failed its append on the expected version, or saw the winner's
        # decision in its inbox first (LostLeadership): no other way out.
        reasons = stepped_down()
        assert all("expected" in m or "foreign write" in m for m in reasons), reasons
        for rt in (a, b):
            await rt.projector.catch_up()
            await _pool_checks_out(rt)
    finally:
        await a.stop()
        await b.stop()


async def test_inputs_after_the_leaders_session_is_killed_are_answered_by_the_new_leader(fresh_database):
    a = await Runtime(fresh_database).start(PoolSettings(lanes=2, lease_seconds=30))
    b = await Runtime(fresh_database).start()
    old = a.supervisor.schedulers["default"]
    test_conn = await asyncpg.connect(fresh_database)
    gate = await asyncpg.connect(fresh_database)
    try:
        await asyncio.wait_for(old.leading.wait(), 10)
        view, _ = await a.service.register_agent(OPERATOR, "survivor")
        me = Principal("agent", view["agent_id"])
        held = await b.service.request_turn(me, 10, 10, wait_seconds=5)
        assert held["status"] == ev.GRANTED

        # The test queues for the pool's lock behind the leader, then kills the leader's
        # session (no graceful stop): the lock passes to the test's session, so nobody
        # leads while the next inputs arrive.
        [holder] = await test_conn.fetch(f"SELECT pid FROM pg_locks WHERE {_lock_where('default')} AND granted")
        queued_for_lock = asyncio.create_task(gate.execute("SELECT pg_advisory_lock($1)", lock_key("default")))

        async def gate_waits() -> bool:
            return bool(await test_conn.fetchval(f"SELECT count(*) FROM pg_locks WHERE {_lock_where('default')} "
                                                 "AND NOT granted"))
        await _until(gate_waits)
        assert await test_conn.fetchval("SELECT pg_terminate_backend($1)", holder["pid"])
        await asyncio.wait_for(queued_for_lock, 10)

        async def old_stepped_down() -> bool:
            return not old.leading.is_set()
        await _until(old_stepped_down)
        killed_at = await b.store.head()
        calls = [asyncio.create_task(b.service.complete_turn(me, held["turn_id"], ev.OK, 10, 10)),
                 asyncio.create_task(b.service.request_turn(me, 10, 10, wait_seconds=30)),
                 asyncio.create_task(a.service.request_turn(me, 10, 10, wait_seconds=30))]

        async def all_arrived() -> bool:
            return len(await b.store.read(killed_at, 10, types=[ev.COMPLETION_REPORTED, ev.TURN_REQUESTED])) == 3
        await _until(all_arrived)
        assert await b.store.read(killed_at, 10, streams=["pool-default"]) == [], "someone decided without the lock"
        await gate.close()                  # the lock is free: a standby (or a's restarted loop) takes it
        done, first, second = await asyncio.wait_for(asyncio.gather(*calls), 30)
        assert done["status"] == ev.COMPLETED
        assert first["status"] == second["status"] == ev.GRANTED
        assert {first["lane"], second["lane"]} == {0, 1}
        leaders = [rt.supervisor.schedulers["default"].leading.is_set() for rt in (a, b)]
        assert leaders.count(True) == 1
        for rt in (a, b):
            await rt.projector.catch_up()
            await _pool_checks_out(rt)
    finally:
        await test_conn.close()
        if not gate.is_closed():
            await gate.close()
        await b.stop()
        await a.stop()


async def test_serve_with_two_workers_grants_turns_and_delivers_events(fresh_database, tmp_path):
    """`agentrm serve --workers 2` as an operator runs it: two processes, one leader for the
    pool, requests and subscriptions landing on either worker."""
    proc, port = await start_serve(fresh_database, tmp_path, OPERATOR_TOKEN)
    base = f"127.0.0.1:{port}"
    server = SimpleNamespace(http=f"http://{base}/graphql", ws=f"ws://{base}/graphql")
    watcher = await asyncpg.connect(fresh_database)
    try:
        async def both_workers_up() -> bool:
            assert proc.returncode is None, "serve exited"
            listening = await watcher.fetchval("SELECT count(*) FROM pg_stat_activity WHERE "
                                               "datname = current_database() AND query LIKE 'LISTEN%'")
            if listening < 2:
                return False
            try:
                async with httpx.AsyncClient() as http:
                    return (await http.get(f"http://{base}/healthz")).json()["ok"]
            except httpx.HTTPError:
                return False
        await _until(both_workers_up, 120)
        async with GraphQLClient(server, OPERATOR_TOKEN) as operator:
            agents = [await register(operator, f"w{i}") for i in range(6)]
        subscription = "subscription { events(types: [\"TurnGranted\", \"TurnCompleted\"]) { type data } }"
        # Each client its own connection, so the workers share the requests between them.
        subs = [GraphQLClient(server, OPERATOR_TOKEN).subscribe(subscription) for _ in range(2)]
        for sub in subs:
            await sub.__aenter__()
        try:
            async def one_turn(token: str) -> str:
                async with GraphQLClient(server, token) as agent:
                    turn = (await agent(REQUEST, est=10, out=10, wait=30))["requestTurn"]
                    assert turn["status"] == "GRANTED", turn
                async with GraphQLClient(server, token) as agent:   # maybe the other worker
                    done = (await agent(COMPLETE, id=turn["id"], outcome="OK", p=10, c=10))["completeTurn"]
                    assert done["status"] == "COMPLETED", done
                return turn["id"]
            # A subscription without `after` starts at the head once it is set up: a marker
            # turn shows both are live before the turns that are counted.
            marker = await one_turn(agents[0][1])
            for sub in subs:
                while (await sub.next(timeout=30))["events"]["data"]["turn_id"] != marker:
                    pass
            turns = await asyncio.gather(*(one_turn(token) for _, token in agents))
            for sub in subs:
                seen: Counter = Counter()
                while any(seen[(t, kind)] == 0 for t in turns for kind in ("TurnGranted", "TurnCompleted")):
                    event = (await sub.next(timeout=30))["events"]
                    seen[(event["data"]["turn_id"], event["type"])] += 1
                assert max(seen.values()) == 1
        finally:
            for sub in subs:
                await sub.__aexit__(None, None, None)
        holders = await watcher.fetchval(f"SELECT count(*) FROM pg_locks WHERE {_lock_where('default')} AND granted")
        assert holders == 1, "one leader for the pool across both workers"
    finally:
        await watcher.close()
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def test_a_standby_watches_every_pool_with_one_session_and_takes_them_all_over(fresh_database):
    """A worker standing by for several pools polls them all with one query on one session;
    the pools' own lock sessions try once and then wait, silent, until the watch sees a lock
    free. When the leader goes, the standby takes every pool."""
    pools = ["default", "p1", "p2", "p3"]
    # A long lease: a leader slowed down by a busy machine must not lose a pool mid-test.
    a = await Runtime(fresh_database, leader_lease_seconds=60).start(PoolSettings(lanes=2))
    for name in pools[1:]:
        await a.service.create_pool(OPERATOR, PoolSettings(name=name, lanes=1))
    await _until(lambda: _has(a.supervisor.schedulers, pools))
    for name in pools:
        await asyncio.wait_for(_scheduler(a, name).leading.wait(), 10)
    b = await Runtime(fresh_database, leader_lease_seconds=60).start()
    watcher = await asyncpg.connect(fresh_database)
    try:
        await _until(lambda: _has(b.supervisor.schedulers, pools))
        watch = "query LIKE '%WITH held AS MATERIALIZED%'"
        tries = "query = 'SELECT pg_try_advisory_lock($1)' AND state = 'idle'"

        async def sessions(where: str) -> list:
            return await watcher.fetch(f"SELECT pid, query_start FROM pg_stat_activity WHERE {where} "
                                       "AND datname = current_database() AND application_name = $1", b.worker)
        await _until(lambda: _count(sessions(tries), len(pools)))   # b's lock sessions, one per pool
        # b's watch has polled once at least. Keep the row the wait saw: asked again a moment
        # later, the session may be between statements and match nothing.
        seen: list = []

        async def one_watch() -> bool:
            seen[:] = await sessions(watch)
            return len(seen) == 1
        await _until(one_watch)
        first = seen[0]
        before = {r["pid"]: r["query_start"] for r in await sessions(tries)}

        async def polled_three_times() -> bool:   # the same session, three polls later
            now = await watcher.fetchrow(f"SELECT query_start FROM pg_stat_activity WHERE pid = $1 AND {watch}",
                                         first["pid"])
            return now is not None and \
                now["query_start"] > first["query_start"] + timedelta(seconds=3 * a.leadership.poll_seconds)
        await _until(polled_three_times)
        await _until(one_watch)   # one watch session for all of b's pools (two would never pass)
        assert {r["pid"]: r["query_start"] for r in await sessions(tries)} == before, \
            "the lock sessions do not poll"
        assert not any(_scheduler(b, name).leading.is_set() for name in pools)
        await a.stop()
        for name in pools:
            await asyncio.wait_for(_scheduler(b, name).leading.wait(), 30)
        await _until(lambda: _count(sessions(watch), 0))   # nothing left to wait for: the watch ends
    finally:
        await watcher.close()
        await b.stop()


def _scheduler(rt: Runtime, pool: str):
    return rt.supervisor.schedulers[pool]


async def _has(schedulers: dict, pools: list[str]) -> bool:
    return all(p in schedulers for p in pools)


async def _count(rows, n: int) -> bool:
    return len(await rows) == n

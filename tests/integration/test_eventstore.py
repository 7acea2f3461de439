"""The event store against the real PostgreSQL: expected versions, gapless tailing."""
from __future__ import annotations

import asyncio
import json
import random

import asyncpg
import pytest

from app.eventstore.listener import LogListener, follow
from app.eventstore.model import NO_STREAM, ConcurrencyError, NewEvent
from app.eventstore.store import EventStore, create_pool


@pytest.fixture
async def store(fresh_database):
    db = await create_pool(fresh_database, min_size=2, max_size=12)
    yield EventStore(db), fresh_database
    await db.close()


async def test_expected_version_conflict_appends_nothing(store):
    es, _ = store
    await es.append([NewEvent("thing-1", "Made", {"n": 1})], {"thing-1": NO_STREAM})
    with pytest.raises(ConcurrencyError) as err:
        await es.append([NewEvent("thing-1", "Made", {"n": 2}), NewEvent("other-1", "X", {})],
                        {"thing-1": NO_STREAM})
    assert err.value.actual == 0
    events = await es.read(0)
    assert [(e.stream, e.version, e.data) for e in events] == [("thing-1", 0, {"n": 1})]
    await es.append([NewEvent("thing-1", "Changed", {"n": 2})], {"thing-1": 0})
    assert [e.version for e in await es.read_stream("thing-1")] == [0, 1]


async def test_events_cannot_be_updated_or_deleted(store):
    es, _ = store
    await es.append([NewEvent("thing-1", "Made", {})])
    async with es.pool.acquire() as conn:
        with pytest.raises(asyncpg.RaiseError):
            await conn.execute("UPDATE events SET type = 'Forged'")
        with pytest.raises(asyncpg.RaiseError):
            await conn.execute("DELETE FROM events")


async def test_analyze_skips_the_jsonb_payloads_and_keeps_the_columns_plans_use(store):
    """Migration 0007: ANALYZE (autovacuum's too) gathers no statistics on events.data,
    events.metadata or read_models.doc, whose sampling would be most of its cost, and still
    gathers them on the columns the log is read by
    (docs/architecture/decisions/read-model-saves.md)."""
    es, _ = store
    await es.append([NewEvent(f"thing-{i}", "Made", {"n": i, "text": "x" * 50}, {"correlation": str(i)})
                     for i in range(200)])
    async with es.pool.acquire() as conn:
        await conn.execute("INSERT INTO read_models (projection, key, doc) "
                           "SELECT 'turns', 'k' || g, jsonb_build_object('n', g) FROM generate_series(1, 200) g")
        await conn.execute("ANALYZE events")
        await conn.execute("ANALYZE read_models")
        gathered = {(r["tablename"], r["attname"]) for r in await conn.fetch(
            "SELECT tablename, attname FROM pg_stats WHERE tablename IN ('events', 'read_models')")}
    assert {("events", "position"), ("events", "stream"), ("events", "type"),
            ("read_models", "projection"), ("read_models", "key")} <= gathered
    assert not gathered & {("events", "data"), ("events", "metadata"), ("read_models", "doc")}


async def test_analyze_samples_3000_rows_of_the_log_and_the_read_models(store):
    """Migration 0008: a statistics target of 10 on every column ANALYZE still gathers there
    and on the expression indexes, so autovacuum's ANALYZE samples 3,000 rows, not 30,000:
    a histogram holds at most 11 bounds where the default target would keep 101."""
    es, _ = store
    await es.append([NewEvent(f"thing-{i}", f"Made{i % 40}", {"n": i}, {"correlation": str(i)})
                     for i in range(400)])
    async with es.pool.acquire() as conn:
        await conn.execute("INSERT INTO read_models (projection, key, doc) "
                           "SELECT CASE WHEN g % 2 = 0 THEN 'agents' ELSE 'p' || (g % 30) END, 'k' || g, "
                           "jsonb_build_object('token_hash', 'h' || g) "
                           "FROM generate_series(1, 400) g")
        await conn.execute("ANALYZE events")
        await conn.execute("ANALYZE read_models")
        stats = {(r["tablename"], r["attname"]): r for r in await conn.fetch(
            "SELECT tablename, attname, histogram_bounds::text::text[] AS bounds, "
            "most_common_vals::text::text[] AS common FROM pg_stats "
            "WHERE tablename IN ('events', 'read_models', 'events_correlation')")}
    for column in (("events", "position"), ("events", "stream"), ("events", "version"), ("events", "type"),
                   ("events", "recorded_at"), ("read_models", "key"), ("events_correlation", "expr")):
        row = stats[column]
        assert row["bounds"] is not None or row["common"] is not None, column
        assert len(row["bounds"] or []) <= 11 and len(row["common"] or []) <= 10, column


async def test_a_read_model_update_can_be_hot_and_large_documents_are_lz4(store):
    """Migration 0009: no index of `read_models` reads `doc` (such an index makes every save's
    update of a document a non-HOT update), and a large document is stored lz4-compressed
    where the server was built with lz4 (docs/architecture/decisions/read-model-saves.md)."""
    es, _ = store
    async with es.pool.acquire() as conn:
        definitions = [r["indexdef"] for r in await conn.fetch(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'read_models'")]
        assert definitions and not [d for d in definitions if "doc" in d], definitions
        big = {"agents": {f"agent-{i}": {"level": i % 4, "used": i * 1.5} for i in range(5000)}}
        await conn.execute("INSERT INTO read_models (projection, key, doc) VALUES ('scheduler', 'p', $1::text::jsonb)",
                           json.dumps(big))
        lz4 = await conn.fetchval("SELECT 'lz4' = ANY (enumvals) FROM pg_settings "
                                  "WHERE name = 'default_toast_compression'")
        method = await conn.fetchval(
            "SELECT pg_column_compression(doc) FROM read_models WHERE projection = 'scheduler'")
    assert method == ("lz4" if lz4 else "pglz")


async def test_numbers_past_64_bits_read_back_as_json_loads_reads_postgresqls_text(store):
    """The jsonb codec decodes by orjson where that cannot differ (app/eventstore/json_codec.py):
    an integer past 64 bits, or a float jsonb prints as twenty digits, must still read as
    json.loads reads the text PostgreSQL prints."""
    es, _ = store
    data = {"big": 2 ** 70, "low": -2 ** 63 - 1, "top": 2 ** 64 - 1, "f": 1e19, "x": 0.1,
            "nested": [1, {"deep": 18446744073709551616, "small": 2 ** 62}]}
    await es.append([NewEvent("thing-1", "Made", data, {"seq": 2 ** 65})])
    [event] = await es.read(0)
    async with es.pool.acquire() as conn:
        text, meta = await conn.fetchrow("SELECT data::text, metadata::text FROM events")
    assert event.data == json.loads(text) and event.metadata == json.loads(meta)
    assert type(event.data["f"]) is int and event.data["big"] == 2 ** 70 and event.metadata["seq"] == 2 ** 65
    assert event.data["nested"][1]["deep"] == 2 ** 64 and type(event.data["x"]) is float

    # Plain values, written by orjson and read by it: what the append hands back, what a
    # read gives and what json.loads makes of PostgreSQL's text agree, type and sign too.
    plain = {"a": 1e16, "b": 1e23, "c": 1e-7, "d": 0.00001, "e": -0.0, "f": 5e-324, "g": -2.5e17,
             "h": [0.1, {"i": 1.7976931348623157e308, "j": -0.0}], "k": 9007199254740993, "l": "ü\u2028"}
    [appended] = await es.append([NewEvent("thing-2", "Made", plain, {"m": 1e23})])
    [read] = await es.read(appended.position - 1)
    async with es.pool.acquire() as conn:
        text, meta = await conn.fetchrow("SELECT data::text, metadata::text FROM events WHERE position = $1",
                                         appended.position)
    for got in (appended, read):
        assert repr(got.data) == repr(json.loads(text)) and repr(got.metadata) == repr(json.loads(meta))
    assert read.data["b"] == 10 ** 23 and repr(read.data["e"]) == "0.0"


async def test_concurrent_appenders_and_a_tailing_reader_miss_nothing(store):
    """Many writers, some holding their transaction open for a while after drawing a
    position, one reader tailing by position: it must see every event exactly once."""
    es, url = store
    listener = LogListener(url, poll_interval=0.2)
    await listener.start()
    es.on_append(listener.poke)
    writers, per_writer = 8, 40
    expected = {(w, i) for w in range(writers) for i in range(per_writer)}
    seen: list[tuple[int, int]] = []
    positions: list[int] = []

    async def writer(w: int) -> None:
        rng = random.Random(w)
        for i in range(per_writer):
            if rng.random() < 0.2:
                # a slow transaction: appends, then lingers before COMMIT
                async with es.pool.acquire() as conn:
                    async with conn.transaction():
                        await es.append([NewEvent(f"w-{w}", "Wrote", {"w": w, "i": i})], conn=conn)
                        await asyncio.sleep(rng.uniform(0.001, 0.02))
            else:
                await es.append([NewEvent(f"w-{w}", "Wrote", {"w": w, "i": i})])

    async def reader() -> None:
        async for event in follow(es, listener, 0):
            seen.append((event.data["w"], event.data["i"]))
            positions.append(event.position)
            if len(seen) == len(expected):
                return

    read_task = asyncio.create_task(reader())
    await asyncio.gather(*(writer(w) for w in range(writers)))
    await asyncio.wait_for(read_task, 60)
    await listener.stop()
    assert len(seen) == len(set(seen)) == len(expected)
    assert set(seen) == expected
    assert positions == sorted(positions)
    # per stream, versions are dense and in order
    for w in range(writers):
        assert [e.version for e in await es.read_stream(f"w-{w}")] == list(range(per_writer))


async def test_listener_reconnects_after_its_connection_is_killed(store):
    """Nothing but the listener can wake the reader here: the poll fallback is an hour
    away, and the appends come from a store without in-process pokes (as another
    process's would). So each event arrives only if the listener reconnected."""
    es, url = store
    listener = LogListener(url, poll_interval=3600.0)
    await listener.start()
    silent = EventStore(es.pool)            # no on_append hooks: no pokes
    got: list[str] = []
    arrived = {n: asyncio.Event() for n in (1, 2, 3)}

    async def reader():
        async for event in follow(es, listener, 0):
            got.append(event.type)
            arrived[len(got)].set()
            if len(got) == 3:
                return

    task = asyncio.create_task(reader())
    await silent.append([NewEvent("a-1", "One", {})])
    await asyncio.wait_for(arrived[1].wait(), 15)        # NOTIFY on the first connection
    async with es.pool.acquire() as conn:   # kill this database's LISTEN session from the server side
        killed = await conn.fetch("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE datname = current_database() AND query LIKE 'LISTEN%' "
                                  "AND pid <> pg_backend_pid()")
    assert len(killed) == 1
    # Committed while the listener is down or reconnecting: its NOTIFY may be lost, and the
    # re-read the listener does on reconnecting must pick it up.
    await silent.append([NewEvent("a-1", "Two", {})])
    await asyncio.wait_for(arrived[2].wait(), 15)
    # Committed after the reconnect: only the new LISTEN session's NOTIFY wakes the reader.
    await silent.append([NewEvent("a-1", "Three", {})])
    await asyncio.wait_for(task, 15)
    assert got == ["One", "Two", "Three"]
    await listener.stop()


async def _hold_append_lock(url: str):
    """Another session holding the append lock, so the next appends queue into one group."""
    from app.eventstore.store import APPEND_LOCK_KEY
    conn = await asyncpg.connect(url)
    tx = conn.transaction()
    await tx.start()
    await conn.execute("SELECT pg_advisory_xact_lock($1)", APPEND_LOCK_KEY)
    return conn, tx


async def _until(check, timeout: float = 15.0) -> None:
    """Poll a condition (not a clock): return as soon as it holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def _flusher_waits_for_the_lock(conn) -> None:
    """The store's flusher has taken its group and blocks on the append lock: PostgreSQL
    shows its session waiting for an advisory lock in this database."""
    async def waiting() -> bool:
        return bool(await conn.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()"))
    await _until(waiting)


async def _queued_behind(es: EventStore, n: int) -> None:
    """n appends wait in the store for the next group (the flusher is busy with the first)."""
    async def queued() -> bool:
        return len(es._pending) == n
    await _until(queued)


async def test_a_cancelled_caller_does_not_strand_the_rest_of_its_group(store):
    es, url = store
    await es.append([NewEvent("warm-1", "Warm", {})])
    conn, tx = await _hold_append_lock(url)
    first = asyncio.create_task(es.append([NewEvent("c-1", "First", {})]))
    await _flusher_waits_for_the_lock(conn)
    others = [asyncio.create_task(es.append([NewEvent(f"c-{i}", "Other", {})])) for i in (2, 3)]
    await _queued_behind(es, 2)
    first.cancel()
    await tx.rollback()
    await conn.close()
    done = await asyncio.wait_for(asyncio.gather(*others), 10)
    assert [r[0].type for r in done] == ["Other", "Other"]
    assert {e.type for e in await es.read(0)} == {"Warm", "First", "Other"}   # the cancelled append stands


async def test_one_bad_request_fails_alone_not_its_whole_group(store):
    es, url = store
    conn, tx = await _hold_append_lock(url)
    bad = asyncio.create_task(es.append([NewEvent("bad-1", "Bad", {"text": "nul \x00 here"})]))
    await _flusher_waits_for_the_lock(conn)
    good = asyncio.create_task(es.append([NewEvent("good-1", "Good", {"n": 1})]))
    nan = asyncio.create_task(es.append([NewEvent("nan-1", "Nan", {"x": float("nan")})]))
    await _queued_behind(es, 2)
    await tx.rollback()
    await conn.close()
    results = await asyncio.wait_for(asyncio.gather(bad, good, nan, return_exceptions=True), 10)
    assert isinstance(results[0], Exception) and isinstance(results[2], Exception)
    assert results[1][0].type == "Good"
    assert [e.type for e in await es.read(0)] == ["Good"]

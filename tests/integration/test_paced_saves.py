"""The periodic save of the read models is paced (app/projections/runner.py,
save_checkpointed): its documents go in chunks with a pause between them, in one
transaction. Every document still arrives, and nobody sees a save half done."""
from __future__ import annotations

import json

import asyncpg

from app.auth import OPERATOR
from app.bootstrap import Runtime
from app.domain.settings import PoolSettings
from app.projections import runner
from app.projections.runner import PostgresDocuments, Projector, save_checkpointed

NAME = "paced-test"


async def _seen(url: str) -> tuple[int | None, int]:
    """The checkpoint and the number of documents another connection sees."""
    conn = await asyncpg.connect(url)
    try:
        return (await conn.fetchval("SELECT position FROM projection_checkpoints WHERE name = $1", NAME),
                await conn.fetchval("SELECT count(*) FROM read_models WHERE projection = 'turns'"))
    finally:
        await conn.close()


async def _save(url: str, docs: dict, position: int, *, paced: bool) -> bool:
    conn = await asyncpg.connect(url)
    try:
        return await save_checkpointed(conn, NAME, position, docs, paced=paced)
    finally:
        await conn.close()


async def test_a_paced_save_writes_every_chunk_in_one_transaction(fresh_database, monkeypatch):
    monkeypatch.setattr(runner, "SAVE_CHUNK_ROWS", 100)
    seen_in_pauses = []

    async def pause() -> None:   # what a reader sees while the save waits between chunks
        seen_in_pauses.append(await _seen(fresh_database))
    monkeypatch.setattr(runner, "_between_chunks", pause)

    docs = {("turns", f"t{i:03d}"): json.dumps({"n": i}) for i in range(250)}
    assert await _save(fresh_database, docs, 7, paced=True)
    assert seen_in_pauses == [(None, 0), (None, 0)]   # 100 + 100 + 50 rows: two pauses, nothing visible
    assert await _seen(fresh_database) == (7, 250)
    conn = await asyncpg.connect(fresh_database)
    try:
        stored = {r["key"]: r["doc"] for r in await conn.fetch(
            "SELECT key, doc::text AS doc FROM read_models WHERE projection = 'turns'")}
    finally:
        await conn.close()
    assert {k: json.loads(v) for k, v in stored.items()} == {k: json.loads(v) for (_, k), v in docs.items()}

    # A later save overwrites in place; an unpaced one (a save someone waits for) never pauses.
    seen_in_pauses.clear()
    docs = {("turns", f"t{i:03d}"): json.dumps({"n": -i}) for i in range(0, 250, 2)}
    assert await _save(fresh_database, docs, 9, paced=False)
    assert seen_in_pauses == [] and await _seen(fresh_database) == (9, 250)
    # Not forward: nothing is written, paced or not.
    assert not await _save(fresh_database, {("turns", "late"): "{}"}, 8, paced=True)
    assert await _seen(fresh_database) == (9, 250)


async def test_a_paced_save_that_fails_midway_leaves_nothing(fresh_database, monkeypatch):
    monkeypatch.setattr(runner, "SAVE_CHUNK_ROWS", 10)

    async def pause() -> None:
        return None
    monkeypatch.setattr(runner, "_between_chunks", pause)
    docs = {("turns", f"t{i:02d}"): json.dumps({"n": i}) for i in range(25)}
    docs[("turns", "t24")] = "not json"   # the third chunk fails
    try:
        await _save(fresh_database, docs, 5, paced=True)
    except asyncpg.PostgresError:
        pass
    else:
        raise AssertionError("the bad document was accepted")
    assert await _seen(fresh_database) == (None, 0)


async def test_the_periodic_save_is_paced_and_a_save_someone_awaits_is_not(fresh_database, monkeypatch):
    async def no_periodic_saves(self) -> None:
        return None
    monkeypatch.setattr(Projector, "_persist_loop", no_periodic_saves)
    calls = []
    real_save = PostgresDocuments.save

    projector = None

    async def save(self, position, docs, *, paced=False):
        if projector is not None and self is projector.documents:   # not a save of another test's runtime
            calls.append(paced)
        return await real_save(self, position, docs, paced=paced)
    monkeypatch.setattr(PostgresDocuments, "save", save)
    rt = await Runtime(fresh_database).start(PoolSettings(lanes=2))
    try:
        projector = Projector(rt.store, rt.listener)
        await projector.load()
        await rt.service.register_agent(OPERATOR, "first")
        await projector.catch_up()
        assert await projector._periodic_persist()
        await rt.service.register_agent(OPERATOR, "second")
        await projector.catch_up()
        assert await projector.persist()
        assert calls == [True, False]
    finally:
        await rt.stop()

"""Append and read the event log (PostgreSQL through asyncpg)."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence

import asyncpg

from .model import ConcurrencyError, NewEvent, RecordedEvent

NOTIFY_CHANNEL = "agentrm_events"

# Gapless reading, the subtle spot of every SQL event store.
#
# `position` comes from an identity sequence. Sequences are not transactional: if two
# transactions draw 7 and 8 and the one holding 8 commits first, a reader polling
# "position > 6" sees 8, moves its cursor past 7, and loses 7 forever when it commits.
#
# We make positions become visible in the order they are drawn: every append first takes
# one transaction-scoped advisory lock, and only then draws positions; the lock is
# released by COMMIT, after the transaction is already visible (PostgreSQL marks the
# transaction committed in the proc array before it releases its locks). So when
# position N is visible, every position below N is visible or rolled back for good, and
# a reader may simply ask for "position > cursor".
#
# Alternatives weighed: `LOCK TABLE events IN EXCLUSIVE MODE` (pyeventsourcing) does the
# same but also blocks writers of unrelated tables touching `events` by FK and shows up in
# pg_locks as a table lock; Marten's high-water mark adds a daemon and a settle delay to
# every read; xid8 snapshots (pg_snapshot_xmin) need readers to order by transaction
# id, not position, which breaks the public `after: position` contract. The price of the
# lock is serialised appends: about 1k single-event commits/s on this class of machine,
# ~20k/s when batched. The scheduler loop batches its decisions; `agentrm bench system`
# measures the ratio against raw inserts and COPY.
APPEND_LOCK_KEY = 0x4147454E54524D  # "AGENTRM"

_INSERT = """
INSERT INTO events (stream, version, type, data, metadata)
SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::jsonb[], $5::jsonb[])
RETURNING position, stream, version, type, data, metadata, recorded_at
"""

_SELECT = "SELECT position, stream, version, type, data, metadata, recorded_at FROM events"


def _dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def init_connection(conn: asyncpg.Connection) -> None:
    """jsonb <-> Python values on every pooled connection."""
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=_dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(url: str, *, min_size: int = 2, max_size: int = 10) -> asyncpg.Pool:
    return await asyncpg.create_pool(url, min_size=min_size, max_size=max_size, init=init_connection)


def _record(row) -> RecordedEvent:
    return RecordedEvent(position=row["position"], stream=row["stream"], version=row["version"],
                         type=row["type"], data=row["data"], metadata=row["metadata"],
                         recorded_at=row["recorded_at"])


class EventStore:
    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool
        # In-process listeners are poked right after a commit, so a reader in the same
        # process need not wait for the NOTIFY round trip (NOTIFY still wakes the others).
        self._after_append: list[Callable[[int], None]] = []

    def on_append(self, callback: Callable[[int], None]) -> None:
        self._after_append.append(callback)

    async def append(self, events: Sequence[NewEvent],
                     expected_versions: Mapping[str, int] | None = None,
                     conn: asyncpg.Connection | None = None) -> list[RecordedEvent]:
        """Append `events` atomically. `expected_versions[stream]` is the version the stream
        must be at (NO_STREAM = -1 for "must not exist"); a mismatch raises
        ConcurrencyError and appends nothing."""
        if not events:
            return []
        expected_versions = expected_versions or {}
        if conn is None:
            async with self.pool.acquire() as own:
                recorded = await self._append(own, events, expected_versions)
        else:
            recorded = await self._append(conn, events, expected_versions)
        for callback in self._after_append:
            callback(recorded[-1].position)
        return recorded

    async def _append(self, conn, events, expected_versions) -> list[RecordedEvent]:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", APPEND_LOCK_KEY)
            streams = sorted({e.stream for e in events})
            rows = await conn.fetch(
                "SELECT stream, max(version) AS v FROM events WHERE stream = ANY($1::text[]) "
                "GROUP BY stream", streams)
            current = {s: -1 for s in streams}
            current.update({r["stream"]: r["v"] for r in rows})
            for stream, expected in expected_versions.items():
                actual = current.get(stream)
                if actual is None:
                    actual = await conn.fetchval(
                        "SELECT coalesce(max(version), -1) FROM events WHERE stream = $1", stream)
                if expected is not None and actual != expected:
                    raise ConcurrencyError(stream, expected, actual)
            versions = []
            for e in events:
                current[e.stream] += 1
                versions.append(current[e.stream])
            rows = await conn.fetch(_INSERT, [e.stream for e in events], versions,
                                    [e.type for e in events], [e.data for e in events],
                                    [e.metadata for e in events])
            last = rows[-1]["position"]
            await conn.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, str(last))
        return [_record(r) for r in rows]

    async def read(self, after: int = 0, limit: int = 1000, *, types: Iterable[str] | None = None,
                   streams: Iterable[str] | None = None, correlation: str | None = None,
                   agent_id: str | None = None,
                   up_to: int | None = None, conn: asyncpg.Connection | None = None
                   ) -> list[RecordedEvent]:
        """Events with position > after (and <= up_to), in position order."""
        clauses, args = ["position > $1"], [after]
        if types:
            args.append(list(types))
            clauses.append(f"type = ANY(${len(args)}::text[])")
        if streams:
            args.append(list(streams))
            clauses.append(f"stream = ANY(${len(args)}::text[])")
        if correlation:
            args.append(correlation)
            clauses.append(f"metadata->>'correlation' = ${len(args)}")
        if agent_id:
            args.append(agent_id)
            clauses.append(f"data->>'agent_id' = ${len(args)}")
        if up_to is not None:
            args.append(up_to)
            clauses.append(f"position <= ${len(args)}")
        args.append(limit)
        sql = f"{_SELECT} WHERE {' AND '.join(clauses)} ORDER BY position LIMIT ${len(args)}"
        if conn is not None:
            rows = await conn.fetch(sql, *args)
        else:
            async with self.pool.acquire() as own:
                rows = await own.fetch(sql, *args)
        return [_record(r) for r in rows]

    async def read_stream(self, stream: str) -> list[RecordedEvent]:
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(f"{_SELECT} WHERE stream = $1 ORDER BY version", stream)
        return [_record(r) for r in rows]

    async def stream_version(self, stream: str) -> int:
        async with self.pool.acquire() as conn:
            return await conn.fetchval(
                "SELECT coalesce(max(version), -1) FROM events WHERE stream = $1", stream)

    async def head(self) -> int:
        async with self.pool.acquire() as conn:
            return await conn.fetchval("SELECT coalesce(max(position), 0) FROM events")

"""Append and read the event log (PostgreSQL through asyncpg)."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import asyncpg

from .json_codec import dumps as _json_dumps
from .json_codec import loads as _loads
from .model import ConcurrencyError, NewEvent, RecordedEvent
from .subscription import subscribe as _subscribe
from .tail_cache import TailCache

log = logging.getLogger(__name__)

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
# lock is serialised appends: one group commit at a time. So the group is one statement
# (the `agentrm_append` function, migration 0004): everything done under the lock is one
# round trip, and concurrent requests share it (group commit, below). `agentrm bench
# system` measures the ratio against raw inserts and COPY. The decision and its
# measurements: docs/architecture/decisions/gapless-log.md.
APPEND_LOCK_KEY = 0x4147454E54524D  # "AGENTRM"

MAX_GROUP = 500  # requests per group-commit transaction

TAIL_BATCH = 1000     # events per read that extends the tail cache
TAIL_READS = 3        # reads a follower may wait for before it reads the log itself

_APPEND = ("SELECT req, out_position, out_version, out_recorded_at, conflict_stream "
           "FROM agentrm_append($1, $2, $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], "
           "$8::int[], $9::text[], $10::int[], $11)")

_SELECT = "SELECT position, stream, version, type, data, metadata, recorded_at FROM events"

_READ_TO_HEAD = (
    "WITH h AS (SELECT coalesce(max(position), 0) AS head FROM events) "
    "SELECT h.head, e.position, e.stream, e.version, e.type, e.data, e.metadata, e.recorded_at "
    "FROM h LEFT JOIN LATERAL (SELECT * FROM events WHERE position > $1 AND position <= h.head "
    "AND type = ANY($2::text[]) ORDER BY position LIMIT $3) e ON true ORDER BY e.position")


# jsonb has no NaN or Infinity: the codec refuses them here, in the caller, not in a shared commit.
_dumps = _json_dumps


json_text = _dumps   # what the jsonb codec sends: for callers that send the text themselves

_SCALARS = frozenset({str, int, float, bool, type(None)})


def _jsonb_key(key: str) -> tuple[int, bytes]:
    encoded = key.encode()
    return len(encoded), encoded


def _as_read(value):
    """A scalar as a read of the table returns it. jsonb writes numbers without an
    exponent, so a float whose JSON has one of 16 or more (1e+20: every float of that
    size, all of them whole) comes back as an integer: the integer of the decimal text it
    was written as (1e+23 is 10**23), not of the double (int(1e23) is 99999999999999991611392).
    And jsonb's numeric has no negative zero: -0.0 comes back as 0.0."""
    if type(value) is float:
        if abs(value) >= 1e16:
            return int(Decimal(repr(value)))
        if value == 0:
            return 0.0
    return value


def jsonb_ordered(value):
    """`value` as a read of the log returns it: every object's keys in the order jsonb
    stores them (shorter keys first, then by their bytes), large floats as integers."""
    if type(value) is dict:
        return {k: jsonb_ordered(value[k]) for k in sorted(value, key=_jsonb_key)}
    if type(value) is list:
        return [jsonb_ordered(v) for v in value]
    return _as_read(value)


def read_back(value, text: str):
    """What a reader of the log gets for `value` stored as `text` (`_dumps(value)`): the
    decoded JSON, with its keys in jsonb's order and its large floats as integers, so that
    an event handed over from its commit is the same, key order and types included, as the
    event read back from the table. A
    flat dict of str keys to plain scalars (most events' data, every event's metadata)
    is copied in that order without decoding the text (floats round-trip through their
    repr): decoding it would add a decode per appended event, a few percent of a worker's
    CPU under load. Anything else (nested values, tuples, subclasses such as enums, non-str
    keys) is decoded."""
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str or type(item) not in _SCALARS:
                break
        else:
            return {k: _as_read(value[k]) for k in _jsonb_order(tuple(value))}
    return jsonb_ordered(_loads(text))


_ORDERS: dict[tuple[str, ...], tuple[str, ...]] = {}
_ORDERS_MAX = 4096


def _jsonb_order(keys: tuple[str, ...]) -> tuple[str, ...]:
    """`keys` in jsonb's order. The events of one type come with the same keys in the same
    order, so the order is sorted once per key tuple and remembered (sorting by encoded
    keys each time would be most of read_back's cost); a log with more shapes than the
    bound starts over."""
    order = _ORDERS.get(keys)
    if order is None:
        if len(_ORDERS) >= _ORDERS_MAX:
            _ORDERS.clear()
        order = _ORDERS[keys] = tuple(sorted(keys, key=_jsonb_key))
    return order


async def init_connection(conn: asyncpg.Connection) -> None:
    """jsonb <-> Python values on every pooled connection (decoded as json.loads would:
    json_codec.py)."""
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=_dumps, decoder=_loads, schema="pg_catalog")


async def _no_session_state(_conn: asyncpg.Connection) -> None:
    """Pool release hook. asyncpg still rolls back a transaction left open; its default
    reset would add a round trip per release (RESET ALL, UNLISTEN *, CLOSE ALL, advisory
    unlock) for state that pooled connections never take: LISTEN and session advisory
    locks live on dedicated connections (listener, scheduler, demo), and nothing SETs."""


# A session left idle inside a transaction (its process stopped or stuck mid-append) would
# hold the append lock and stall every writer: PostgreSQL ends such a session after this.
# No transaction of ours waits on anything but the database between its statements.
IDLE_IN_TRANSACTION_TIMEOUT_MS = 5000


async def create_pool(url: str, *, min_size: int = 2, max_size: int = 10,
                      application_name: str | None = None) -> asyncpg.Pool:
    settings = {"idle_in_transaction_session_timeout": str(IDLE_IN_TRANSACTION_TIMEOUT_MS)}
    if application_name:
        settings["application_name"] = application_name  # lets a standby end a silent worker's sessions
    return await asyncpg.create_pool(url, min_size=min_size, max_size=max_size, init=init_connection,
                                     reset=_no_session_state, server_settings=settings)


def _retrieved(task: asyncio.Task) -> None:
    """A shared read's failure is each waiter's to handle; retrieve it here too, so that
    a read nobody waits for any more is not reported as an exception never retrieved."""
    if not task.cancelled():
        task.exception()


def _record(row) -> RecordedEvent:
    return RecordedEvent(position=row["position"], stream=row["stream"], version=row["version"],
                         type=row["type"], data=row["data"], metadata=row["metadata"],
                         recorded_at=row["recorded_at"])


class _Pending:
    __slots__ = ("events", "expected", "future")

    def __init__(self, events, expected, future):
        self.events, self.expected, self.future = events, expected, future


class EventStore:
    """The PostgreSQL adapter of the EventLog port (app/ports.py)."""

    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool
        self.wakeups = None  # a LogListener, once use_wakeups() is called: subscribe() needs it
        # Group commit: appends that arrive while a transaction is in flight wait and go
        # together in the next one. The append lock serialises transactions, so without
        # this every concurrent request would pay its own lock + fsync in turn.
        self._pending: list[_Pending] = []
        self._flusher: asyncio.Task | None = None
        # In-process listeners get the recorded events right after their commit, so a reader
        # in the same process need not wait for the NOTIFY round trip or even read them back
        # (NOTIFY still wakes the other processes).
        # The log's newest events, shared by this process's followers (tail_cache.py); it
        # hears of each commit first, before any follower it could serve.
        self.tail = TailCache()
        self._tail_read: asyncio.Task | None = None
        self._after_append: list[Callable[[list[RecordedEvent]], None]] = [self.tail.commit]

    def on_append(self, callback: Callable[[list[RecordedEvent]], None]) -> None:
        self._after_append.append(callback)

    def use_wakeups(self, wakeups) -> None:
        """Subscriptions wait on `wakeups` (the process's LogListener: NOTIFY from other
        processes), which this store also pokes after each of its own appends."""
        self.wakeups = wakeups
        self.on_append(wakeups.poke)
        if hasattr(wakeups, "on_commit"):   # other processes' commits, carried by their NOTIFY
            wakeups.on_commit(self.tail.commit)

    def subscribe(self, after: int = 0, *, types: Iterable[str] | None = None,
                  streams: Iterable[str] | None = None, categories: Iterable[str] | None = None,
                  data: Mapping[str, Any] | None = None) -> AsyncIterator[RecordedEvent]:
        if self.wakeups is None:
            raise RuntimeError("EventStore.subscribe needs wake-ups: call use_wakeups(listener) first")
        return _subscribe(self, self.wakeups, after, types=types, streams=streams,
                          categories=categories, data=data)

    async def append(self, events: Sequence[NewEvent],
                     expected_versions: Mapping[str, int] | None = None,
                     conn: asyncpg.Connection | None = None) -> list[RecordedEvent]:
        """Append `events` atomically. `expected_versions[stream]` is the version the stream
        must be at (NO_STREAM = -1 for "must not exist"); a mismatch raises
        ConcurrencyError and appends nothing."""
        if not events:
            return []
        expected_versions = dict(expected_versions or {})
        if conn is not None:
            # Part of the caller's own transaction: cannot be grouped with others.
            results = await self._append_group(conn, [_Pending(list(events), expected_versions, None)])
            recorded = results[0]
            if isinstance(recorded, Exception):
                raise recorded
        else:
            future = asyncio.get_running_loop().create_future()
            self._pending.append(_Pending(list(events), expected_versions, future))
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.create_task(self._flush())
            recorded = await future   # committed; _flush has told the in-process listeners
        return recorded

    async def _flush(self) -> None:
        while self._pending:
            group, self._pending = self._pending[:MAX_GROUP], self._pending[MAX_GROUP:]
            try:
                results = await self._commit(group)
            except Exception:
                if len(group) == 1:
                    raise
                # One request's bad data must not fail the others it happened to share a
                # transaction with: retry each alone, so only the culprit fails.
                results = []
                for pending in group:
                    try:
                        results += await self._commit([pending])
                    except Exception as exc:
                        results.append(exc)
            for pending, result in zip(group, results):
                if not isinstance(result, Exception):
                    self._committed(result)
                if pending.future.done():
                    continue  # its caller went away (cancelled); the append stands
                if isinstance(result, Exception):
                    pending.future.set_exception(result)
                else:
                    pending.future.set_result(result)

    def _committed(self, recorded: list[RecordedEvent]) -> None:
        """Hand a commit to the in-process listeners (offers, wake-ups), in position order,
        right here in the flusher rather than in each caller once it resumes: the NOTIFY of
        the same commit reaches this process's listener about as soon as the commit's answer
        does, and a follower woken by it before the offer would read the log for events it
        is about to be handed. Also told when the caller was cancelled: its append stands.
        Only the grouped path: on the `conn` path the caller's own transaction may still roll
        back, and local readers learn of it by NOTIFY at commit."""
        for callback in self._after_append:
            try:
                callback(recorded)
            except Exception:  # a listener's failure is its own; the append has committed
                log.exception("a listener of the event store failed on position %d", recorded[0].position)

    async def _commit(self, group: list[_Pending]) -> list:
        try:
            async with self.pool.acquire() as conn:
                return await self._append_group(conn, group)  # its own transaction
        except Exception as exc:
            if len(group) == 1:
                return [exc]
            raise

    async def _append_group(self, conn, group: list[_Pending]) -> list[list[RecordedEvent] | Exception]:
        """Append several independent requests in one transaction (the caller's, or the
        statement's own) and one round trip: `agentrm_append` (migration 0004) takes the
        append lock, checks each request's expected versions against the versions left by
        the requests before it in the group, leaves a request that fails its check out,
        alone, inserts the rest and notifies."""
        ev_req, ev_stream, ev_type, ev_data, ev_meta = [], [], [], [], []
        ex_req, ex_stream, ex_version = [], [], []
        for index, pending in enumerate(group):
            for stream, want in pending.expected.items():
                if want is not None:
                    ex_req.append(index)
                    ex_stream.append(stream)
                    ex_version.append(want)
            for e in pending.events:
                ev_req.append(index)
                ev_stream.append(e.stream)
                ev_type.append(e.type)
                ev_data.append(_dumps(e.data))
                ev_meta.append(_dumps(e.metadata))
        rows = await conn.fetch(_APPEND, APPEND_LOCK_KEY, len(group), ev_req, ev_stream, ev_type, ev_data,
                                ev_meta, ex_req, ex_stream, ex_version, NOTIFY_CHANNEL)
        outcome: list = [[] for _ in group]
        expected_of = {(r, s): v for r, s, v in zip(ex_req, ex_stream, ex_version)}
        # The recorded data is the stored JSON read back, as a reader of the log will see
        # it (tuples as lists, keys as strings), not the caller's objects.
        offsets, taken = [0], [0] * len(group)
        for p in group:
            offsets.append(offsets[-1] + len(p.events))
        for row in rows:
            index = row["req"]
            if row["conflict_stream"] is not None:
                stream = row["conflict_stream"]
                outcome[index] = ConcurrencyError(stream, expected_of[(index, stream)], row["out_version"])
                continue
            e = group[index].events[taken[index]]
            at = offsets[index] + taken[index]
            taken[index] += 1
            outcome[index].append(RecordedEvent(position=row["out_position"], stream=e.stream,
                                                version=row["out_version"], type=e.type,
                                                data=read_back(e.data, ev_data[at]),
                                                metadata=read_back(e.metadata, ev_meta[at]),
                                                recorded_at=row["out_recorded_at"]))
        return outcome

    async def read(self, after: int = 0, limit: int = 1000, *, types: Iterable[str] | None = None,
                   streams: Iterable[str] | None = None, categories: Iterable[str] | None = None,
                   data: Mapping[str, Any] | None = None, correlation: str | None = None,
                   agent_id: str | None = None,
                   up_to: int | None = None, conn: asyncpg.Connection | None = None
                   ) -> list[RecordedEvent]:
        """Events with position > after (and <= up_to), in position order."""
        if up_to is not None and conn is None and not (data or correlation):
            shared = await self._read_tail(after, limit, up_to, types, streams, categories, agent_id)
            if shared is not None:
                return shared
        return await self._read_log(after, limit, types=types, streams=streams, categories=categories, data=data,
                                    correlation=correlation, agent_id=agent_id, up_to=up_to, conn=conn)

    async def _read_tail(self, after: int, limit: int, up_to: int, types, streams, categories,
                         agent_id: str | None = None) -> list[RecordedEvent] | None:
        """The answer from the tail cache, once it covers (after, up_to]: extended by one
        read of the log shared by every follower that needs it (a read in flight is joined,
        not repeated). None: this reader is too far behind, or the log does not have what
        it asks for (an `up_to` beyond the head); it reads the log itself."""
        if up_to - after > TAIL_BATCH:
            # Far behind (a leader folding its pool's stream from 0, a replay): the log's
            # own filtered read is cheaper than pulling every event through the cache.
            return None
        for _ in range(TAIL_READS + 1):
            if self.tail.covers(after, up_to):
                return self.tail.serve(after, limit, up_to, types=types, streams=streams, categories=categories,
                                       agent_id=agent_id)
            if self._tail_read is None or self._tail_read.done():
                start = self.tail.read_start(after)
                if start is None:
                    return None
                self._tail_read = asyncio.create_task(self._extend_tail(start))
                self._tail_read.add_done_callback(_retrieved)
            # Shielded: a follower that goes away must not cancel the others' read.
            if not await asyncio.shield(self._tail_read):
                return None
        return None

    async def _extend_tail(self, start: int) -> bool:
        events = await self._read_log(start, TAIL_BATCH)
        self.tail.read(start, events)
        return bool(events)

    async def _read_log(self, after: int = 0, limit: int = 1000, *, types: Iterable[str] | None = None,
                        streams: Iterable[str] | None = None, categories: Iterable[str] | None = None,
                        data: Mapping[str, Any] | None = None, correlation: str | None = None,
                        agent_id: str | None = None, up_to: int | None = None,
                        conn: asyncpg.Connection | None = None) -> list[RecordedEvent]:
        clauses: list[str] = ["position > $1"]
        args: list[Any] = [after]
        if types:
            args.append(list(types))
            clauses.append(f"type = ANY(${len(args)}::text[])")
        if streams:
            args.append(list(streams))
            clauses.append(f"stream = ANY(${len(args)}::text[])")
        if categories:
            args.append(list(categories))
            clauses.append(f"split_part(stream, '-', 1) = ANY(${len(args)}::text[])")
        if data:
            args.append(dict(data))
            clauses.append(f"data @> ${len(args)}::jsonb")
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

    async def read_to_head(self, after: int, limit: int, *, types: Iterable[str]
                           ) -> tuple[int, list[RecordedEvent]]:
        """The log's head and the events of `types` with after < position <= head (at most
        `limit`), in one statement and so one snapshot: when the head is visible, every
        position below it is visible or rolled back for good (the append lock, above), so a
        reader that got fewer than `limit` has seen everything up to the head. One round
        trip where head() then read(up_to=head) took two, on a follower's every wake-up."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(_READ_TO_HEAD, after, list(types), limit)
        head = rows[0]["head"] if rows else 0
        return head, [_record(r) for r in rows if r["position"] is not None]

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

"""Audit and replay over the event log: invariant checks, turn stories, export, what-if.

Every analysis here is a pure function over `Record`s (position, stream, version, type,
data), so it runs the same on the live log, on an exported JSON Lines file or on a
deliberately corrupted copy; `load_records` is the one thin read from PostgreSQL.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from app.domain import events as ev
from app.domain import pool_access
from app.domain.streams import pool_stream
from app.eventstore.store import EventStore

PAGE = 5000


class Record(NamedTuple):
    position: int
    stream: str
    version: int
    type: str
    data: dict


def as_records(events: Iterable) -> list[Record]:
    """RecordedEvents (or anything with those attributes) as Records."""
    return [Record(e.position, e.stream, e.version, e.type, e.data) for e in events]


def pool_of(record: Record) -> str | None:
    """The pool a record concerns: its stream's for decisions, `data.pool` for inputs."""
    if record.stream.startswith("pool-"):
        return record.stream[len("pool-"):]
    return record.data.get("pool") if isinstance(record.data, dict) else None


def is_pool_record(record: Record, pool: str | None) -> bool:
    if pool is None:
        return record.stream.startswith("pool-") or record.type in ev.INPUTS
    return pool_of(record) == pool


async def load_records(store: EventStore, after: int = 0, up_to: int | None = None, *,
                       streams: list[str] | None = None, types: Iterable[str] | None = None) -> list[Record]:
    """All matching events with after < position <= up_to, paged so memory stays per page
    of asyncpg rows, not per query."""
    out: list[Record] = []
    while True:
        page = await store.read(after, PAGE, streams=streams, types=types, up_to=up_to)
        out += as_records(page)
        if len(page) < PAGE:
            return out
        after = page[-1].position


async def workload_records(store: EventStore, pool: str) -> list[Record]:
    """What a what-if needs: the pool's decisions, the inputs addressed to it, and the access
    grants and revocations (global: a pattern may name any pool), which the scheduler folds
    in log order with the requests."""
    decisions = await load_records(store, streams=[pool_stream(pool)])
    inputs = [r for r in await load_records(store, types=ev.INPUTS) if r.data.get("pool") == pool]
    access = await load_records(store, types=pool_access.CHANGES)
    return sorted(decisions + inputs + access, key=lambda r: r.position)

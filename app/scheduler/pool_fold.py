"""A pool's scheduler state read straight from the log: the fold of its own stream.

The scheduler starts from this (not from a read model), and the replay reads past states
with it, so the writer and the audit see one fold."""
from __future__ import annotations

import asyncio

from app.domain import events as ev
from app.domain.apply import fold_pool
from app.domain.state import PoolState
from app.domain.streams import pool_stream
from app.eventstore.model import RecordedEvent
from app.ports import EventLog

PAGE = 5000
_POOL_TYPES = ev.DECISIONS | {ev.POOL_CREATED}


async def fold_pool_stream(log: EventLog, pool: str, up_to: int, *, off_loop: bool = False) -> PoolState | None:
    """The state of `pool` as of global position `up_to`, with the version and position of
    the last event of its stream there; None if the pool did not exist yet. `off_loop`:
    each page is folded in a worker thread, for a caller (an API read) that must not hold
    the event loop for the whole of a long stream."""
    state: PoolState | None = None
    after = 0
    while True:
        events = await log.read(after, PAGE, streams=[pool_stream(pool)], up_to=up_to)
        if off_loop and events:
            state = await asyncio.to_thread(fold_page, state, events)
        else:
            state = fold_page(state, events)
        if len(events) < PAGE:
            return state
        after = events[-1].position


def fold_page(state: PoolState | None, events: list[RecordedEvent]) -> PoolState | None:
    for event in events:
        typed = ev.parse(event.type, event.data) if event.type in _POOL_TYPES else None
        state = fold_pool(state, typed, event.version, event.position)
    return state

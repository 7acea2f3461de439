"""Replay: rebuild read models from position 0 and compare them with the live ones;
scheduler state as of any past position."""
from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from dataclasses import dataclass

from app.domain.state import PoolState
from app.eventstore.store import EventStore
from app.ports import EventLog
from app.projections.context_archive import archived_context, restore_if_parked
from app.projections.core import PROJECTIONS, CoreModel, canonical_hash
from app.projections.runner import CHECKPOINT, Projector, load_docs
from app.scheduler.pool_fold import fold_pool_stream

PAGE = 5000


@dataclass
class ReplayReport:
    events_replayed: int
    live_hash: str
    replay_hash: str
    matches: bool
    position: int
    differences: list[str]


def _fold_until_parked(model: CoreModel, events, start: int) -> int | None:
    """Fold events[start:]; stop before the first one that needs a parked context and return
    its index (None when all are folded)."""
    for i in range(start, len(events)):
        if model.parked_context_needed_by(events[i]) is not None:
            return i
        model.fold(events[i])
    return None


async def rebuild(store: EventStore, up_to: int | None = None) -> tuple[CoreModel, int]:
    """Fold the log from position 0 into a fresh model. The folding runs in a worker thread,
    page by page: an operator's replay must not hold the API's event loop (and with it the
    scheduler's timers and every request) for the seconds a long log takes."""
    model, count, after = CoreModel(), 0, 0
    while True:
        events = await store.read(after, PAGE, up_to=up_to)
        # Fold in a worker thread; an event that needs a context hibernation parked stops
        # the run, has that context read back from the log here, and the fold goes on.
        start: int | None = 0
        while start is not None:
            start = await asyncio.to_thread(_fold_until_parked, model, events, start)
            if start is not None:
                await restore_if_parked(model, events[start], store)
                model.fold(events[start])
                start += 1
        count += len(events)
        if len(events) < PAGE:
            return model, count
        after = events[-1].position


def _scope(docs: dict, pool: str | None) -> dict:
    if pool is None:
        return docs
    agents = {k for (p, k), d in docs.items() if p == "agents" and d.get("pool") == pool}
    return {(p, k): d for (p, k), d in docs.items()
            if (p in ("pools", "scheduler") and k == pool) or (p in ("agents", "context") and k in agents)
            or (p == "turns" and d.get("pool") == pool)}


async def replay_check(store: EventStore, projector: Projector, pool: str | None = None) -> ReplayReport:
    """Persist the live model, then fold the log from 0 to the persisted checkpoint and
    compare canonical hashes of the persisted documents and the rebuilt ones."""
    await projector.catch_up()
    await projector.persist()
    async with store.pool.acquire() as conn:
        async with conn.transaction(isolation="repeatable_read"):
            position = await conn.fetchval(
                "SELECT position FROM projection_checkpoints WHERE name = $1", CHECKPOINT) or 0
            live_docs = await load_docs(conn, PROJECTIONS)
    rebuilt, count = await rebuild(store, up_to=position)
    return await asyncio.to_thread(_compare, live_docs, rebuilt, pool, count, position)


def _compare(live_docs: dict, rebuilt: CoreModel, pool: str | None, count: int, position: int) -> ReplayReport:
    live, replayed = _scope(live_docs, pool), _scope(rebuilt.all_docs(), pool)
    # jsonb round trip: compare both through the same JSON normalisation
    replayed = {k: json.loads(json.dumps(v)) for k, v in replayed.items()}
    differences = sorted(f"{p}/{k}" for (p, k) in set(live) | set(replayed)
                         if live.get((p, k)) != replayed.get((p, k)))
    live_hash, replay_hash = canonical_hash(live), canonical_hash(replayed)
    return ReplayReport(count, live_hash, replay_hash, live_hash == replay_hash, position, differences[:20])


async def pool_state_at(store: EventLog, pool: str, position: int) -> PoolState | None:
    """A pool's scheduler state as of global `position`: the fold of its own stream (the
    same fold the scheduler starts from), folded off the event loop."""
    return await fold_pool_stream(store, pool, position, off_loop=True)


class PastPoolStates:
    """The API's past scheduler states (schedulerAt), the most recently asked `entries` of
    them kept by (pool, position). A past state never changes, and a console scrubbing
    through history asks for the same positions again; each answer is a fold of the pool's
    whole stream up to there. Askers of one moment at the same time share its one fold.
    Only a position the log had reached when asked is kept: one beyond the head may still
    gain events."""

    def __init__(self, store: EventLog, entries: int = 64):
        self.store, self.entries = store, entries
        self._kept: OrderedDict[tuple[str, int], asyncio.Future[PoolState | None]] = OrderedDict()

    async def at(self, pool: str, position: int) -> PoolState | None:
        key = (pool, position)
        found = self._kept.get(key)
        if found is None:
            found = self._kept[key] = asyncio.ensure_future(self._fold(key))
            found.add_done_callback(_retrieved)
            if len(self._kept) > self.entries:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(key)
        # Shielded: an asker that goes away must not cancel the others' fold.
        return await asyncio.shield(found)

    async def _fold(self, key: tuple[str, int]) -> PoolState | None:
        pool, position = key
        try:
            head = await self.store.head()
            state = await pool_state_at(self.store, pool, position)
        except BaseException:
            self._forget(key)
            raise
        if position > head:
            self._forget(key)
        return state

    def _forget(self, key: tuple[str, int]) -> None:
        self._kept.pop(key, None)


def _retrieved(fold: asyncio.Future) -> None:
    """A fold's failure is its askers' to handle; retrieved here too, for a fold whose
    askers all went away."""
    if not fold.cancelled():
        fold.exception()


async def context_state_at(store: EventStore, agent_id: str, position: int):
    """An agent's context tiers as of global `position`: the fold of its context stream up
    to there. Whether the agent was hibernated then does not matter: hibernation only
    takes the context out of memory."""
    return await archived_context(store, agent_id, position)

"""Keeps a CoreModel caught up with the log and persists it with a forward-only checkpoint."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from app.eventstore.model import RecordedEvent
from app.eventstore.store import EventStore
from app.ports import EventLog, Wakeups
from app.tasks import cancel_all

from .context_archive import restore_if_parked
from .core import PROJECTIONS, CoreModel
from .doc_text import doc_text
from .documents import TurnDoc

log = logging.getLogger(__name__)

# Bump when the shape of a persisted document or the fold changes: a new name has no
# checkpoint, so every worker folds the log from position 0 and rewrites every document
# instead of resuming from documents an older version wrote.
PROJECTION_VERSION = 11
CHECKPOINT = f"core-v{PROJECTION_VERSION}"


async def load_docs(conn, projections: tuple[str, ...], *,
                    open_turns_only: bool = False) -> dict[tuple[str, str], dict]:
    sql = "SELECT projection, key, doc FROM read_models WHERE projection = ANY($1::text[])"
    if open_turns_only:  # a worker's start: finished turns stay on disk (bounded memory)
        sql += " AND NOT (projection = 'turns' AND doc->>'finished_at' IS NOT NULL)"
    rows = await conn.fetch(sql, list(projections))
    return {(r["projection"], r["key"]): r["doc"] for r in rows}


# A paced save writes its documents SAVE_CHUNK_ROWS at a time, with SAVE_CHUNK_PAUSE_S
# between the chunks, still in its one transaction. Written in one go, a save under load
# keeps a database backend busy on one core for tens of milliseconds, and the slowest
# grants fall in those windows. Paced, the same work is spread over about half a second
# and leaves the cores to the grants; it is the pause that does it, not the chunks alone.
# The measurements behind the two values: docs/architecture/decisions/read-model-saves.md.
SAVE_CHUNK_ROWS = 100
SAVE_CHUNK_PAUSE_S = 0.01


async def _between_chunks() -> None:
    await asyncio.sleep(SAVE_CHUNK_PAUSE_S)


async def save_checkpointed(conn, name: str, position: int, docs: dict[tuple[str, str], str], *,
                            paced: bool = False) -> bool:
    """Write `docs` (JSON texts, see doc_text) and move checkpoint `name` to `position`, in one transaction, only
    forward: the checkpoint row is locked first, and a runner that finds it already at
    or past `position` writes nothing (a faster worker got there first). `paced`: the
    documents go in chunks with a pause between them (above); readers still see all of
    them or none, at commit."""
    async with conn.transaction():
        created = await conn.fetchval("INSERT INTO projection_checkpoints (name, position) VALUES ($1, 0) "
                                      "ON CONFLICT (name) DO NOTHING RETURNING true", name)
        if created:
            # A new projection version starts over: documents an older version wrote go, and
            # this first write holds every document the fold has touched so far.
            await conn.execute("DELETE FROM read_models WHERE projection = ANY($1::text[])", list(PROJECTIONS))
        current = await conn.fetchval(
            "SELECT position FROM projection_checkpoints WHERE name = $1 FOR UPDATE", name)
        if current >= position:
            return False
        rows = [(p, k, d) for (p, k), d in docs.items()]
        chunk = SAVE_CHUNK_ROWS if paced else max(len(rows), 1)
        for start in range(0, len(rows), chunk):
            if start:
                await _between_chunks()
            await conn.executemany(
                "INSERT INTO read_models (projection, key, doc) VALUES ($1, $2, $3::text::jsonb) "
                "ON CONFLICT (projection, key) DO UPDATE SET doc = EXCLUDED.doc",
                rows[start:start + chunk])
        await conn.execute("UPDATE projection_checkpoints SET position = $2 WHERE name = $1",
                           name, position)
        return True


class PostgresDocuments:
    """Where a Projector keeps its documents and checkpoint: `read_models` in PostgreSQL."""

    def __init__(self, pool):
        self.pool = pool

    async def load(self) -> tuple[int, dict[tuple[str, str], dict]]:
        async with self.pool.acquire() as conn:
            # One snapshot for both reads: documents newer than the checkpoint we pair them
            # with would have events folded into them twice.
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                position = await conn.fetchval(
                    "SELECT position FROM projection_checkpoints WHERE name = $1", CHECKPOINT)
                return (position or 0), (await load_docs(conn, PROJECTIONS, open_turns_only=True)
                                         if position else {})

    async def save(self, position: int, docs: dict[tuple[str, str], str], *, paced: bool = False) -> bool:
        async with self.pool.acquire() as conn:
            return await save_checkpointed(conn, CHECKPOINT, position, docs, paced=paced)

    async def checkpoint(self) -> int:
        async with self.pool.acquire() as conn:
            return await conn.fetchval("SELECT position FROM projection_checkpoints WHERE name = $1",
                                       CHECKPOINT) or 0

    async def turn(self, turn_id: str) -> TurnDoc | None:   # as the turns projection persisted it
        async with self.pool.acquire() as conn:
            return await conn.fetchval("SELECT doc FROM read_models WHERE projection = 'turns' AND key = $1",
                                       turn_id)


class Projector:
    # The persisted documents only make a restart faster (it folds the log from their
    # checkpoint), yet each write serialises every dirty document - a busy pool's whole
    # scheduler state. A shorter interval costs a burst a large share of its CPU
    # (docs/architecture/decisions/read-model-saves.md); a restart folding one more second
    # of log costs nothing noticeable.
    PERSIST_INTERVAL_S = 1.0
    # Finished turns kept in memory beyond the persisted ones: a reply that reads a turn
    # right after its end finds it, and memory stays flat however many turns went by.
    KEEP_FINISHED = 2000
    # Every worker folds the same log into the same documents, so one writer is enough.
    # The periodic save writes when the checkpoint is our own last save (or there is
    # none); it leaves the writing to another worker whose checkpoint moved since our
    # last look (it is alive and saving), and takes over once that checkpoint has stood
    # still for TAKEOVER_ROUNDS looks in a row (one is not enough: a save can take longer
    # than an interval on a busy machine). The documents we left unwritten wait, tagged
    # with our position at the time, until the checkpoint passes that position: then the
    # other worker's save holds them (as of its later position), and until then eviction
    # leaves their turns in memory. Without this, two workers would both save every
    # second: twice the encoding and twice the writes.
    SHARED_SAVES = True
    TAKEOVER_ROUNDS = 2
    # Events folded between two looks at the event loop in a catch-up (_fold_in_slices).
    FOLD_SLICE = 100

    def __init__(self, store: EventLog, listener: Wakeups, *,
                 persist_interval: float = PERSIST_INTERVAL_S, documents: PostgresDocuments | None = None):
        self.store = store
        self.listener = listener
        # No documents (an in-memory log): every start folds the log from 0, persist is a no-op.
        if documents is None and isinstance(store, EventStore):
            documents = PostgresDocuments(store.pool)
        self.documents = documents
        self.model = CoreModel()
        self.persist_interval = persist_interval
        self._lock = asyncio.Lock()
        # One save at a time: a caller that finds nothing dirty while another save is still
        # writing must wait for it, or it returns before what it asked to persist is stored.
        self._persist_lock = asyncio.Lock()
        # Documents another worker's save is trusted with: (our position then, their keys).
        self._left: list[tuple[int, set[tuple[str, str]]]] = []
        self._checkpoint_seen: int | None = None   # the checkpoint at our last periodic save
        self._saved_at = 0        # the position of our own last save
        self._still = 0           # looks in a row that found another worker's checkpoint unmoved
        # Callers waiting for the model to reach some state: (predicate, future), checked
        # once per turn of the event loop after folds, so a fold wakes only the waiters it
        # satisfies. (A Condition woke every waiter on every fold - with a hundred agents
        # queued for a lane, a hundred task switches per event.) A waiter on one turn is
        # checked only when an event of that turn was folded: a turn's document changes
        # only by events that carry its turn_id (core.py), and a burst of a thousand
        # requests would otherwise run a thousand predicates per pass.
        self._waiters: set[tuple[Callable[[], bool], asyncio.Future]] = set()
        self._turn_waiters: dict[str, set[tuple[Callable[[], bool], asyncio.Future]]] = {}
        self._touched_turns: set[str] = set()
        self._wake_scheduled = False
        self._subscribers: list[Callable[[RecordedEvent], None]] = []
        self._tasks: list[asyncio.Task] = []

    def subscribe(self, callback: Callable[[RecordedEvent], None]) -> Callable[[], None]:
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    async def load(self) -> None:
        """Start from the persisted documents (fast restart), then fold the rest of the log."""
        if self.documents is not None:
            position, docs = await self.documents.load()
            if position:
                self.model = CoreModel.from_docs(position, docs)
        await self.catch_up()

    def _fold(self, events: list[RecordedEvent]) -> int:
        folded = 0
        try:
            for event in events:
                if event.position <= self.model.position:
                    continue  # already folded from offer(): subscribers must not see it twice
                self.model.fold(event)
                turn_id = event.data.get("turn_id") if isinstance(event.data, dict) else None
                if isinstance(turn_id, str):
                    self._touched_turns.add(turn_id)
                for callback in list(self._subscribers):
                    callback(event)
                folded += 1
        finally:
            if folded:  # even when a later event's fold raised: these ones happened
                self._wake()
        return folded

    def _wake(self) -> None:
        """Check the waiters once the current burst of folds is over: folds that happen in
        the same turn of the event loop (a group commit, then the scheduler's answer) share
        one pass over the waiters."""
        if not self._wake_scheduled:
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._check_waiters)

    def _check_waiters(self) -> None:
        self._wake_scheduled = False
        touched, self._touched_turns = self._touched_turns, set()
        due = list(self._waiters)
        for turn_id in touched:
            due += self._turn_waiters.get(turn_id, ())
        for waiter in due:
            predicate, future = waiter
            if future.done():
                continue
            try:
                if predicate():
                    future.set_result(True)
            except Exception as exc:  # the waiter's own predicate failed: it gets the error
                # (a future refuses StopIteration itself, which would end this pass early)
                future.set_exception(RuntimeError(repr(exc)) if isinstance(exc, StopIteration) else exc)

    async def catch_up(self, until: int | None = None, *, known_head: int | None = None) -> int:
        """Fold what the log has after the model's position: up to `until`, or else
        everything visible now. `known_head`: a position the wake-ups named, which the
        caller only needs to reach; then the read may be answered by the events this
        process's other followers have just read (the store's tail cache)."""
        folded = 0
        async with self._lock:
            while until is None or self.model.position < until:
                if known_head is not None and self.model.position >= known_head:
                    break
                events = await self.store.read(self.model.position, 1000, up_to=known_head)
                folded += await self._fold_restoring(events)
                if len(events) < 1000:
                    break
        return folded

    async def _fold_restoring(self, events: list[RecordedEvent]) -> int:
        """Fold, first bringing back from the log any hibernated context that an event
        wakes. Runs of events that need no restore are folded in one go; the check is made
        with every earlier event folded (a hibernation and its wake may share a batch)."""
        folded, start = 0, 0
        for i, event in enumerate(events):
            if self.model.parked_context_needed_by(event) is None:
                continue
            folded += await self._fold_in_slices(events[start:i])
            start = i
            await restore_if_parked(self.model, event, self.store)
        return folded + await self._fold_in_slices(events[start:])

    async def _fold_in_slices(self, events: list[RecordedEvent]) -> int:
        """Fold, letting the event loop run between slices of FOLD_SLICE events. A read of
        a thousand events folded in one go would hold a worker's loop for tens of
        milliseconds under load (a catch-up behind the other worker's appends), and every
        request in flight would wait. Between two events the model is whole (its position
        is the last event folded), so whatever runs meanwhile - a save, a reply, a waiter's check -
        sees a state the log had; offer() folds nothing meanwhile, since the rest of this
        read holds the next positions."""
        folded = 0
        for at in range(0, len(events), self.FOLD_SLICE):
            if at:
                await asyncio.sleep(0)
            folded += self._fold(events[at:at + self.FOLD_SLICE])
        return folded

    def offer(self, appended: list[RecordedEvent]) -> None:
        """Fold events this process has just committed without reading them back, when they
        are exactly the next positions. Appends draw positions under one lock held to commit
        (see the event store), so when a commit returns, every lower position is committed
        or rolled back: if ours follow the model's position directly, nothing can appear
        before them. Otherwise (another writer, a rolled-back gap) the follower reads them as
        usual. A catch_up whose read is in flight meanwhile skips what this folded (`_fold`
        ignores positions at or below the model's). Saves one log read per hop on the grant
        path."""
        if (not appended or appended[0].position != self.model.position + 1
                or appended[-1].position - appended[0].position != len(appended) - 1):
            return
        try:
            for event in appended:
                if self.model.parked_context_needed_by(event) is not None:
                    # A wake needs its context read back from the log, which cannot happen
                    # here (synchronous): the follower folds this event and the rest.
                    break
                self._fold([event])
        except Exception:
            # The append has committed; its caller must not see a read-side failure. As in
            # catch_up, an event whose fold raised is left half-applied: this is logged, and
            # `agentrm replay check` shows the damage.
            log.exception("projector could not fold its own append at position %d", appended[0].position)

    async def wait_position(self, position: int) -> None:
        """Read-your-writes: return once the model includes `position`. Concurrent callers
        share one read: whoever gets the lock first reads for everybody."""
        if self.model.position < position:
            await self.catch_up(until=position)

    async def wait_until(self, predicate: Callable[[], bool], timeout: float, *,
                         turn_id: str | None = None) -> bool:
        """Wait until predicate() holds on the model, or timeout; True if it held, else
        predicate() at the timeout. With `turn_id` the predicate must depend only on that
        turn's document: it is re-checked only when an event of that turn is folded."""
        if predicate():
            return True
        waiter = (predicate, asyncio.get_running_loop().create_future())
        group = self._waiters if turn_id is None else self._turn_waiters.setdefault(turn_id, set())
        group.add(waiter)
        future = waiter[1]
        try:
            await asyncio.wait((future,), timeout=timeout)
        finally:
            group.discard(waiter)
            if turn_id is not None and not group and self._turn_waiters.get(turn_id) is group:
                del self._turn_waiters[turn_id]
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()  # retrieved even if we were cancelled: no "never retrieved" log
        if future.cancelled():
            return predicate()     # timed out
        future.result()            # re-raise what the predicate raised
        return True

    async def persist(self) -> bool:
        """Store the documents changed since the last save; when it returns, the model as it
        was at the call is stored (a save already under way is waited for)."""
        async with self._persist_lock:
            return await self._persist()

    async def _periodic_persist(self) -> bool:
        """The save of the persist loop: ours, or left to a worker that is saving."""
        async with self._persist_lock:
            if not self.SHARED_SAVES or self.documents is None or not (self.model.dirty or self._left):
                return await self._persist(paced=True)
            checkpoint = await self.documents.checkpoint()
            self._left = [(at, keys) for at, keys in self._left if at > checkpoint]
            seen, self._checkpoint_seen = self._checkpoint_seen, checkpoint
            self._still = self._still + 1 if checkpoint == seen else 0
            if seen is None or checkpoint in (0, self._saved_at) or self._still >= self.TAKEOVER_ROUNDS:
                self._still = 0
                return await self._persist(paced=True)   # ours to save: nobody else is saving
            model = self.model
            if model.dirty and model.position > checkpoint:
                self._left.append((model.position, model.dirty))
            model.dirty = set()   # (at or below the checkpoint: stored already)
            model.evict_finished(checkpoint, self.KEEP_FINISHED, also_dirty=[keys for _, keys in self._left])
            return False

    async def _persist(self, *, paced: bool = False) -> bool:
        """Paced: the periodic save, which nobody waits for (save_checkpointed says why);
        a save someone awaits (persist(), a stop) goes in one go."""
        model = self.model
        if not (model.dirty or self._left) or self.documents is None:
            return False
        position = model.position
        keys, model.dirty = model.dirty, set()
        left, self._left = self._left, []
        for _, more in left:
            keys |= more
        # Snapshots taken now: the live documents keep changing while we await the write,
        # and what we write must be the state at `position`, no later. The snapshot is the
        # JSON text the database stores (a deep copy, then encoding that copy, would do the
        # work twice), encoded by orjson (doc_text.py says why).
        docs = {k: doc_text(doc) for k in keys if (doc := model.doc_to_save(*k)) is not None}
        try:
            saved = await self.documents.save(position, docs, paced=paced)
        except BaseException:
            model.dirty |= keys
            raise
        if saved:
            self._checkpoint_seen = self._saved_at = position
        # Saved, or another worker had already checkpointed at or past `position`: either
        # way every document as of `position` is on disk.
        model.evict_finished(position, self.KEEP_FINISHED)
        return saved

    async def recall_turn(self, turn_id: str) -> bool:
        """Make sure `model.turns` has `turn_id` if the log has it: catch up, and if it is
        a finished turn that left memory, read its document back. False: no such turn."""
        if turn_id in self.model.turns:
            return True
        await self.catch_up()
        if turn_id in self.model.turns:
            return True
        doc = await self.documents.turn(turn_id) if self.documents is not None else None
        if doc is None:
            return False
        self.model.recall(doc)
        return True

    async def start(self) -> None:
        await self.load()
        self._tasks = [asyncio.create_task(self._follow(), name="projector-follow"),
                       asyncio.create_task(self._persist_loop(), name="projector-persist")]

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        with contextlib.suppress(Exception):
            await self.catch_up()
            await self.persist()

    async def _follow(self) -> None:
        blind_seen = None
        while True:
            generation = self.listener.generation
            known = self.listener.known_head(blind_seen)
            if known is not None and known <= self.model.position:
                # Every wake-up since the last read named a position we have folded (our
                # own appends, offered; their NOTIFYs): nothing to read.
                await self.listener.wait(generation)
                continue
            blind_seen = self.listener.blind
            try:
                folded = await self.catch_up(known_head=known)
            except Exception as exc:  # the database may be restarting; keep our position
                log.warning("projector could not read the log: %s", exc)
                await asyncio.sleep(0.5)
                continue
            if not folded:
                await self.listener.wait(generation)

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(self.persist_interval)
            try:
                await self._periodic_persist()
            except Exception as exc:
                log.warning("projector could not persist: %s", exc)

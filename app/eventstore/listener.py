"""Live delivery: NOTIFY is only a wake-up; every reader re-reads from its own position.

So a missed notification, a reconnect or an event too large for a NOTIFY payload loses
nothing: the worst case is a reader waking up late (the poll interval), never a gap.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import asyncpg

from app.db.outage import is_outage

from .json_codec import loads
from .model import RecordedEvent
from .store import NOTIFY_CHANNEL, EventStore
from .wakeups import GenerationWakeups

log = logging.getLogger(__name__)

OUTAGE_RETRY_SECONDS = 0.5
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_payload(payload: str) -> tuple[int | None, list[RecordedEvent]]:
    """A NOTIFY payload of the append function: (the commit's last position, its events
    when carried). A payload of any other shape names nothing."""
    try:
        if not payload.startswith("{"):
            return int(payload), []
        body = loads(payload)   # json.loads's values, integers past 64 bits included
        events = [RecordedEvent(position=p, stream=stream, version=version, type=type_, data=data,
                                metadata=metadata, recorded_at=_EPOCH + timedelta(microseconds=at))
                  for p, stream, version, type_, data, metadata, at in body["e"]]
        return int(body["p"]), events
    except (TypeError, ValueError, KeyError, AttributeError):   # (a JSON decode error is a ValueError)
        return None, []


class LogListener:
    """One dedicated LISTEN connection per process that reconnects, plus in-process pokes.

    Waiters use a generation counter: read `generation`, read the log, and if nothing new
    arrived `await wait(generation)`, which returns at once when anything woke in between;
    that closes the race between "read found nothing" and "start waiting"."""

    def __init__(self, url: str, *, poll_interval: float = 1.0):
        self.url = url
        self.poll_interval = poll_interval
        self._wakeups = GenerationWakeups()
        self.poke = self._wakeups.poke
        self.connected = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._conn: asyncpg.Connection | None = None
        self._on_commit: list[Callable[[list[RecordedEvent]], None]] = []

    @property
    def generation(self) -> int:
        return self._wakeups.generation

    @property
    def blind(self) -> int:
        return self._wakeups.blind

    def known_head(self, blind_seen: int | None) -> int | None:
        return self._wakeups.known_head(blind_seen)

    def on_commit(self, callback: Callable[[list[RecordedEvent]], None]) -> None:
        """`callback(events)` for each commit whose NOTIFY carried its events, in commit
        order (which is position order: the store's append lock)."""
        self._on_commit.append(callback)

    def _notified(self, _conn, _pid, _channel, payload: str) -> None:
        # The append function sends the last position of its transaction, with the events
        # themselves when they fit (migration 0006); anything else on the channel wakes
        # everyone without a position.
        position, events = parse_payload(payload)
        if events:
            for callback in self._on_commit:
                try:
                    callback(events)
                except Exception:   # a listener's failure is its own; the others still hear
                    log.exception("a listener of the log's commits failed on position %d", position)
        self.poke(position=position)

    async def wait(self, seen_generation: int, timeout: float | None = None) -> None:
        """Until something new may be in the log, or `timeout` (the poll interval by default:
        it covers a NOTIFY lost while the listener reconnects)."""
        await self._wakeups.wait(seen_generation, timeout or self.poll_interval)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="log-listener")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.connected.wait(), 10)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._conn is not None and not self._conn.is_closed():
            with contextlib.suppress(Exception):
                await self._conn.close()

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            lost = asyncio.Event()
            try:
                self._conn = await asyncpg.connect(self.url)
                self._conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await self._conn.add_listener(NOTIFY_CHANNEL, self._notified)
                self.connected.set()
                backoff = 0.1
                self.poke()  # anything committed while we were away is re-read now
                while not lost.is_set():
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(lost.wait(), self.poll_interval)
                    self.poke()  # safety net: periodic wake-up even if a NOTIFY was missed
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # reconnect with backoff; readers keep their positions
                log.warning("log listener lost its connection (%s); reconnecting", exc)
            finally:
                self.connected.clear()
                if self._conn is not None and not self._conn.is_closed():
                    with contextlib.suppress(Exception):
                        await self._conn.close()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)


async def follow(store: EventStore, listener: LogListener, after: int = 0, *,
                 types: list[str] | None = None, agent_id: str | None = None,
                 accept: Callable[[RecordedEvent], bool] | None = None,
                 batch: int = 500) -> AsyncIterator[RecordedEvent]:
    """Every event with position > after, in order, then live; never a gap, never a repeat.
    Through a database outage it keeps its position and reads again once it can.
    `types` and `agent_id` (the events whose data names the agent) filter in the log's
    read, by its indexes, so a follower of one agent reads that agent's rows only (or takes
    them from the store's shared tail of the log, tail_cache.py, when that holds the range).

    When every wake-up since the last read named its position (the listener's known head),
    the read goes up to that head and the cursor moves to it even if nothing there matched:
    every position below a named one is visible or gone for good (the store), so nothing
    can appear behind the cursor. A filtered follower then costs nothing per commit of
    other agents beyond a look at the shared tail, where it used to cost a query each: with
    an agent's eight subscriptions open, a pool's every commit was eight round trips to
    the database on the worker's event loop. After a wake-up that named no position the
    read is open-ended and the cursor stays on the last match."""
    position, blind_seen = after, None
    while True:
        generation = listener.generation
        known = listener.known_head(blind_seen)
        if known is not None and known <= position:
            await listener.wait(generation)
            continue
        blind_seen = listener.blind
        try:
            events = await store.read(position, batch, types=types, agent_id=agent_id, up_to=known)
        except Exception as exc:
            if not is_outage(exc):
                raise
            await asyncio.sleep(OUTAGE_RETRY_SECONDS)  # a backoff, not a wait for news
            continue
        for event in events:
            position = event.position
            if accept is None or accept(event):
                yield event
        if len(events) < batch:
            if known is not None:
                position = max(position, known)   # everything up to it was read
            await listener.wait(generation)

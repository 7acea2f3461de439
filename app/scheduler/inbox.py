"""The scheduler's inbox, read straight from the log (not from a read model).

Two ways in, one cursor. What this process appends is taken synchronously from the log's
on_append, when it directly follows what was already seen (appends draw positions under
one lock held to commit, see the event store, so nothing can still appear before them);
that keeps an input one hop from its decision. Everything else (another process's
appends, a gap) is read from the log after a wake-up. `seen` is the position up to which
every event has been looked at, so neither way hands an event over twice."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from app.eventstore.model import RecordedEvent
from app.ports import EventLog, Wakeups

log = logging.getLogger(__name__)

BATCH = 500


class LogInbox:
    def __init__(self, store: EventLog, wakeups: Wakeups, after: int, *,
                 types: Iterable[str], relevant: Callable[[RecordedEvent], bool]):
        self.store, self.wakeups, self.seen = store, wakeups, after
        self.types, self.relevant = list(types), relevant
        self.queue: asyncio.Queue[RecordedEvent | None] = asyncio.Queue()

    def offer(self, appended: list[RecordedEvent]) -> None:
        """Events this process has just committed, if they are exactly the next positions."""
        if (appended and appended[0].position == self.seen + 1
                and appended[-1].position - appended[0].position == len(appended) - 1):
            self._take(appended)

    def _take(self, events: list[RecordedEvent]) -> None:
        for event in events:
            if event.position > self.seen:
                self.seen = event.position
                if self.relevant(event):
                    self.queue.put_nowait(event)

    async def follow(self) -> None:
        blind_seen = None
        while True:
            generation = self.wakeups.generation
            try:
                # The head the wake-ups named, when each one since our last look named one
                # (our own appends, NOTIFYs): read up to it, or nothing if we have it all.
                # Else the head and what follows our position in one round trip.
                head = self.wakeups.known_head(blind_seen)
                if head is None:
                    blind_seen = self.wakeups.blind
                    head, events = await self.store.read_to_head(self.seen, BATCH, types=self.types)
                elif head > self.seen:
                    events = await self.store.read(self.seen, BATCH, types=self.types, up_to=head)
                if head <= self.seen:
                    await self.wakeups.wait(generation)
                    continue
            except Exception as exc:  # the database may be restarting; keep our position
                log.warning("scheduler inbox could not read the log: %s", exc)
                await asyncio.sleep(0.5)
                continue
            # An offer() may have moved `seen` during the read: _take skips what it took.
            self._take(events)
            if len(events) < BATCH:  # every matching event up to the head was read
                self.seen = max(self.seen, head)

"""The Wakeups port's one mechanism, shared by the PostgreSQL listener and the in-memory log.

A generation counter and an event: a reader notes `generation`, reads the log, and if it
found nothing new awaits `wait(generation)`, which returns at once when anything woke in
between, so a wake-up between the read and the wait is never lost.

Most wake-ups also say how far the log has grown: an append of this process pokes with what
it recorded, and a NOTIFY carries the last position of its transaction. Positions become
visible in the order they are drawn (see the event store), so a poke naming position P
means every position up to P is visible or gone for good. A follower that has already taken
everything up to P (an in-process append it was handed directly) need not read the log
again; one that has not may read up to P without asking for the head first. Only a poke
that names no position (the listener's periodic safety net, a reconnect) makes every
follower read the log to learn what it missed. Without the positions, each follower of a
worker (the projector, each leading scheduler's inbox, the pool watch, every live
subscription) would make one or two round trips per append of its own process and again
per NOTIFY of it."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from .model import RecordedEvent


class GenerationWakeups:
    def __init__(self) -> None:
        self.generation = 0
        self.head = 0    # the highest position a wake-up has named
        self.blind = 0   # how many wake-ups named no position
        self._changed = asyncio.Event()

    def poke(self, appended: Sequence[RecordedEvent] | None = None, *, position: int | None = None) -> None:
        """Wake every waiter. `appended` (the RecordedEvents of a commit, in position order)
        or `position` names how far the log has grown; with neither, followers must read to
        find out."""
        if position is None and appended:
            position = appended[-1].position
        if position is None:
            self.blind += 1
        elif position > self.head:
            self.head = position
        self.generation += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def known_head(self, blind_seen: int | None) -> int | None:
        """The log's head as the wake-ups tell it, if every wake-up since the follower's
        last read (when `blind` was `blind_seen`) named its position; else None: read the
        head from the log."""
        return self.head if blind_seen is not None and blind_seen == self.blind else None

    async def wait(self, seen_generation: int, timeout: float | None = None) -> None:
        if self.generation != seen_generation:
            return
        # asyncio.timeout, not wait_for: 3.11's wait_for swallows a cancel that lands in the
        # loop pass in which the event is set, and a follower being stopped (a scheduler
        # stepping down) then runs on until the next cancel, still counted as leading.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()

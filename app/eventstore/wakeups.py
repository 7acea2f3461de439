"""The Wakeups port's one mechanism, shared by the PostgreSQL listener and the in-memory log.

A generation counter and an event: a reader notes `generation`, reads the log, and if it
found nothing new awaits `wait(generation)`, which returns at once when anything woke in
between, so a wake-up between the read and the wait is never lost."""
from __future__ import annotations

import asyncio
import contextlib


class GenerationWakeups:
    def __init__(self) -> None:
        self.generation = 0
        self._changed = asyncio.Event()

    def poke(self, _appended: object = None) -> None:
        self.generation += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait(self, seen_generation: int, timeout: float | None = None) -> None:
        if self.generation != seen_generation:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

"""A clock that moves only when told to, in whole milliseconds (the Clock port).

Whole milliseconds keep its readings exact: a test that advances by 30_000 ms lands on the
lease deadline, not a float's breadth beside it. Whoever sleeps on real time while the
clock stands still (the scheduler waiting for its next timer) registers `on_advance` to be
woken when it moves."""
from __future__ import annotations

from collections.abc import Callable


class ManualClock:
    def __init__(self, start_ms: int = 1_700_000_000_000):
        if not isinstance(start_ms, int):
            raise TypeError("ManualClock counts whole milliseconds")
        self.ms = start_ms
        self._listeners: list[Callable[[], None]] = []

    def __call__(self) -> float:
        return self.ms / 1000

    def on_advance(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def advance(self, ms: int) -> None:
        if not isinstance(ms, int) or ms < 0:
            raise ValueError("a clock advances by a whole, non-negative number of milliseconds")
        self.ms += ms
        for callback in list(self._listeners):
            callback()

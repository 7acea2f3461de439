"""A pool leader's decisions, appended while it goes on deciding.

Before this, a leader appended each batch's decisions and waited for their commit before
it looked at its inbox again; what arrived meanwhile was decided only then, and its
append queued behind whatever group commit had started in the meantime: two commits
between a request's commit and its grant's. Now the leader decides as inputs arrive, on
its state with its own pending decisions applied, and one appender sends them to the log.

Safety is the expected version, as before, because the appends stay strictly sequential:
the appender sends the next append (every decision made since the last one was sent,
merged, at the version that one left) only once that one has committed. A stream version
only grows, so an append finds the version it expects only if nobody else wrote to the
stream since our previous append committed; if anybody did, it is refused, nothing after
it is sent, and the leader steps down (its state, which holds decisions the log refused,
is dropped and folded again from the log). What the log holds is therefore always a
prefix of the decisions one leader made in order, as when a leader stops between two
batches.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from app.eventstore.model import NewEvent
from app.ports import EventLog
from app.scheduler.writer import LostLeadership, WriterState

# Decided events waiting for the append in flight, beyond which the leader waits for it
# (the log is slow or down: deciding further ahead only grows the speculative state).
MAX_WAITING = 5000
# How long stepping down waits for the append in flight to settle, so that the next term's
# fold starts after it (else that term sees it as a foreign write and steps down once more).
SETTLE_SECONDS = 5.0


class DecisionPipeline:
    def __init__(self, store: EventLog, stream: str, state: WriterState, *,
                 on_failure: Callable[[], None] = lambda: None, leading: Callable[[], bool] = lambda: True):
        self.store, self.stream, self.state = store, stream, state
        self.on_failure = on_failure   # wakes the leader, which then raises `error`
        # Checked before each append, as the leader checks it before each batch: a leader
        # that finds its lease over sends nothing more (its appends would be fenced off by
        # the expected version anyway if the next leader has written).
        self.leading = leading
        self.error: BaseException | None = None
        self._waiting: list[NewEvent] = []
        self._waiting_expected = state.version
        self._task: asyncio.Task | None = None
        self._room = asyncio.Event()
        self._room.set()

    def check(self) -> None:
        """Raise what made an append fail (the leader steps down)."""
        if self.error is not None:
            raise self.error

    async def submit(self, new: list[NewEvent], expected: int) -> None:
        """Queue `new`, decided at stream version `expected` (the version every decision
        before it leaves). The caller has already advanced state.version past them."""
        self.check()
        if not self._waiting:
            self._waiting_expected = expected
        self._waiting += new
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._send(), name=f"decisions-{self.stream}")
        if len(self._waiting) > MAX_WAITING:
            self._room.clear()
            await self._room.wait()
            self.check()

    async def _send(self) -> None:
        while self._waiting and self.error is None:
            events, expected, self._waiting = self._waiting, self._waiting_expected, []
            self._room.set()
            try:
                if not self.leading():
                    raise LostLeadership("lease over with decisions still to append")
                # Awaited here, in this task, so that the moment it commits this task runs
                # and sends what was decided meanwhile before the store's next group commit
                # starts (the store lets the loop run once between groups).
                recorded = await self.store.append(events, {self.stream: expected})
            except Exception as exc:
                self.error, self._waiting = exc, []
                self._room.set()
                self.on_failure()
                return
            if recorded:
                self.state.position = recorded[-1].position

    async def flushed(self) -> None:
        """Until every decision submitted so far is appended; raises what made one fail."""
        while self._task is not None and not self._task.done():
            await asyncio.wait((self._task,))
        self.check()

    async def close(self) -> None:
        """Drop what is not sent yet, and let the append in flight settle."""
        self._waiting = []
        self._room.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            with contextlib.suppress(BaseException):
                await asyncio.wait((task,), timeout=SETTLE_SECONDS)
            task.cancel()

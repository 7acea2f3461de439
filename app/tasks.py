"""Small asyncio helpers shared by the background loops."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

log = logging.getLogger("agentrm.tasks")

# A cancel can be lost: on Python 3.11, `asyncio.wait_for` whose inner future finishes in the
# same turn of the loop as the cancel returns the result and drops the CancelledError, so a
# `while True` loop around it runs on. One cancel and an unbounded `await task` then hang a
# shutdown for ever. So: cancel again until the task ends, and give up (loudly) after a bound.
_RECANCEL_EVERY_S = 0.25
_GIVE_UP_AFTER_S = 10.0


async def cancel_all(tasks: Iterable[asyncio.Task | None]) -> None:
    """Cancel background tasks and wait for each to finish; their errors are not ours now.
    A task that swallows its cancel is cancelled again; one still running after
    _GIVE_UP_AFTER_S is left behind with a warning, so a stop always returns."""
    present = [t for t in tasks if t is not None]
    pending = {t for t in present if not t.done()}
    rounds = int(_GIVE_UP_AFTER_S / _RECANCEL_EVERY_S)
    for _ in range(rounds):
        if not pending:
            break
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=_RECANCEL_EVERY_S)
    for task in pending:
        log.warning("background task %s did not stop within %.0f s of being cancelled; left behind",
                    task.get_name(), _GIVE_UP_AFTER_S)
    for task in present:
        if task.done() and not task.cancelled():
            task.exception()   # retrieved: no "exception was never retrieved" at exit

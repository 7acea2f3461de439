"""Small asyncio helpers shared by the background loops."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable


async def cancel_all(tasks: Iterable[asyncio.Task | None]) -> None:
    """Cancel background tasks and wait for each to finish; their errors are not ours now."""
    tasks = [t for t in tasks if t is not None]
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

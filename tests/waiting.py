"""Waiting in a test for something that happens in the background: a bound, never a measured
duration."""
from __future__ import annotations

import asyncio

SETTLE = 20.0


async def until(predicate, bound: float = SETTLE) -> None:
    """Until `predicate()` holds; TimeoutError after `bound` seconds."""
    async with asyncio.timeout(bound):
        while not predicate():
            await asyncio.sleep(0.01)

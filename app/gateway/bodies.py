"""A gateway request's body: refused over the cap before it is read whole, and decoded and
counted off the event loop when it is large.

The cap is AGENTRM_GATEWAY_MAX_BODY_BYTES (app/config.py). A body that declares a larger
Content-Length is refused before a byte of it is read; one sent without a length (chunked)
as soon as what arrived passes the cap. Either way nothing of it is decoded or counted.
Below the cap, the JSON decode and the prompt's token count of a body of some megabytes
take tens of milliseconds of CPU, during which every other request of the worker would
wait: above OFF_LOOP_BYTES they run in a worker thread."""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TypeVar

from .wire import BadRequest

OFF_LOOP_BYTES = 64 * 1024   # a decode and count of this much take about a millisecond

T = TypeVar("T")


class BodyTooLarge(BadRequest):
    """The body is over the cap: 413, in the wire's own error shape."""

    status = 413

    def __init__(self, cap: int):
        super().__init__(f"the request body is over {cap} bytes")


def refuse_declared(headers: Mapping[str, str], cap: int) -> None:
    """BodyTooLarge when the request's Content-Length says it is over the cap."""
    declared = headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > cap:
        raise BodyTooLarge(cap)


async def off_loop_if_large(size: int, work: Callable[..., T], *args) -> T:
    """`work(*args)`, in a worker thread when it is about a body of `size` bytes or more."""
    if size >= OFF_LOOP_BYTES:
        return await asyncio.to_thread(work, *args)
    return work(*args)

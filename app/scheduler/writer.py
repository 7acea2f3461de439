"""The single-writer step shared by the two leaders that write decisions to the log: a
pool's scheduler (app/scheduler/loop.py, stream `pool-<name>`) and the resource manager
(app/resources/manager.py, stream `resources-decisions`).

Both keep a stream they alone append to, guarded by its expected version, and both follow
the log through an inbox that also hands them back their own decisions. The rules for
reading a batch are the safety argument of both (no double decision, a second writer
steps down), so they live here once rather than in two copies that could drift apart:
- an event of our stream at or below the version we expect is our own decision coming
  back through the log: skip it;
- one above it was written by someone else: we no longer lead (LostLeadership);
- an input at or below `inputs_through` has been answered already: skip it.
What differs between the two (their core's decide, the events it returns, the metadata
they stamp) is the `decide` callback's business."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from app.eventstore.model import NewEvent, RecordedEvent
from app.ports import EventLog

Input = tuple[str, dict, int]   # (type, data, position), what both cores' decide take


class LostLeadership(Exception):
    """Another writer appended to our stream, or our lease or inbox is gone: step down."""


class WriterState(Protocol):
    version: int          # our stream's version as of our last append (or the fold)
    inputs_through: int   # the position of the last input a decision has answered


# Given the new inputs (in log order) and the events they came from by position, the
# decisions to append, as NewEvents of the writer's stream.
Decide = Callable[[list[Input], dict[int, RecordedEvent]], list[NewEvent]]


async def next_batch(inbox: asyncio.Queue, deadline: float | None, now: float) -> list[RecordedEvent]:
    """Everything in the inbox, waiting for the first item until the next timer's
    `deadline` (a due timer must fire now) and at most 1 s, the liveness poll (is the lease
    still held, is the inbox still following). Empty on a timeout: only timers to look at."""
    wait = 1.0 if deadline is None else min(max(0.0, deadline - now), 1.0)
    batch: list[RecordedEvent | None] = []
    try:
        # asyncio.timeout, not wait_for: 3.11's wait_for returns the item and swallows a
        # cancellation that lands as the item arrives, and the loop would then never stop.
        async with asyncio.timeout(wait):
            batch.append(await inbox.get())
    except TimeoutError:
        return []
    while not inbox.empty():
        batch.append(inbox.get_nowait())
    return [e for e in batch if e is not None]  # None: a tick(), only timers to look at


def new_inputs(state: WriterState, stream: str, batch: list[RecordedEvent]) -> list[RecordedEvent]:
    """The inputs of `batch` no decision has answered yet; LostLeadership on a foreign
    write to `stream`."""
    inputs: list[RecordedEvent] = []
    for event in batch:
        if event.stream == stream:
            if event.version <= state.version:
                continue  # our own decision coming back through the log
            raise LostLeadership(f"foreign write at {stream} v{event.version}")
        if event.position > state.inputs_through:
            inputs.append(event)
    return inputs


async def write_step(store: EventLog, stream: str, state: WriterState, batch: list[RecordedEvent],
                     decide: Decide) -> list[RecordedEvent]:
    """Decide on the batch's new inputs (with none, the timers due) and append the
    decisions at the version we expect, so a second writer's append fails (ConcurrencyError)
    and it steps down. Advances state.version; returns what was recorded (empty when there
    was nothing to decide)."""
    expected = state.version
    inputs = new_inputs(state, stream, batch)
    by_position = {e.position: e for e in inputs}
    new = decide([(e.type, e.data, e.position) for e in inputs], by_position)
    if not new:
        return []
    recorded = await store.append(new, {stream: expected})
    state.version = recorded[-1].version
    return recorded


"""One subscription loop for every EventLog adapter: read, then wait for a wake-up."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from .model import RecordedEvent


async def subscribe(log, wakeups, after: int = 0, *, types: Iterable[str] | None = None,
                    streams: Iterable[str] | None = None, categories: Iterable[str] | None = None,
                    data: Mapping[str, Any] | None = None, batch: int = 500
                    ) -> AsyncIterator[RecordedEvent]:
    """Every matching event with position > after, in order, then live; never a gap, never a
    repeat. With a filter, most positions match nothing: each pass first takes the log's
    head and reads only up to it, so the cursor may jump to the head (every position below a
    visible one is visible or gone for good, see the store) instead of rescanning from the
    last match on every wake-up. The head is the one the wake-ups named when they all named
    one since the last look (app/eventstore/wakeups.py), else the log's."""
    types, streams, categories = (None if x is None else list(x) for x in (types, streams, categories))
    position, blind_seen = after, None
    while True:
        generation = wakeups.generation
        head = wakeups.known_head(blind_seen)   # the head the wake-ups named, or ask the log
        if head is None:
            blind_seen = wakeups.blind
            head = await log.head()
        if head <= position:
            await wakeups.wait(generation)
            continue
        events = await log.read(position, batch, types=types, streams=streams, categories=categories,
                                data=data, up_to=head)
        for event in events:
            position = event.position
            yield event
        if len(events) < batch:
            position = max(position, head)

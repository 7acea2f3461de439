"""Audit export: a position range of the log as JSON Lines, one event per line.

The lines carry exactly what the log stores (position, stream, version, type, data,
metadata, recorded_at), so an export is itself a replayable log: `verify` and `explain`
run on its records as they run on the database.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO

from app.eventstore.model import RecordedEvent
from app.eventstore.store import EventStore

PAGE = 2000


def to_line(event: RecordedEvent) -> str:
    return json.dumps(event.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_lines(lines: Iterator[str]) -> list[dict]:
    return [json.loads(line) for line in lines if line.strip()]


async def export(store: EventStore, out: IO[str], first: int = 1, last: int | None = None) -> int:
    """Write events with first <= position <= last to `out`; returns how many. Read page by
    page so a long range never sits in memory whole."""
    after, written = max(0, first - 1), 0
    while True:
        page = await store.read(after, PAGE, up_to=last)
        for event in page:
            out.write(to_line(event) + "\n")
        written += len(page)
        if len(page) < PAGE:
            return written
        after = page[-1].position

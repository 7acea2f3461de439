"""The in-memory adapter of the EventLog port: for application tests, no database.

Gapless by construction: one list, appended to only inside one synchronous step (no await
between the version check and the write), so positions are dense and a reader never sees
position N before N-1. Expected versions are checked exactly as the PostgreSQL store checks
them, with the same ConcurrencyError. Data and metadata go through a JSON round trip, as
through jsonb: the log keeps a copy the caller cannot mutate, and NaN is refused."""
from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from app.domain.streams import category_of
from app.eventstore.model import ConcurrencyError, NewEvent, RecordedEvent
from app.eventstore.subscription import subscribe as _subscribe
from app.eventstore.wakeups import GenerationWakeups


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value, allow_nan=False))


class MemoryLog:
    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self._events: list[RecordedEvent] = []
        self._versions: dict[str, int] = {}
        self._after_append: list[Callable[[list[RecordedEvent]], None]] = []
        # Wake-ups (the Wakeups port) for subscribers and for a Projector on this log.
        self._wakeups = GenerationWakeups()
        self.poke, self.wait = self._wakeups.poke, self._wakeups.wait

    @property
    def generation(self) -> int:
        return self._wakeups.generation

    @property
    def blind(self) -> int:
        return self._wakeups.blind

    def known_head(self, blind_seen: int | None) -> int | None:
        return self._wakeups.known_head(blind_seen)

    # -- EventLog ------------------------------------------------------------------------
    def on_append(self, callback: Callable[[list[RecordedEvent]], None]) -> None:
        self._after_append.append(callback)

    async def append(self, events: Sequence[NewEvent],
                     expected_versions: Mapping[str, int] | None = None) -> list[RecordedEvent]:
        if not events:
            return []
        expected = dict(expected_versions or {})
        for stream, want in expected.items():
            actual = self._versions.get(stream, -1)
            if want is not None and actual != want:
                raise ConcurrencyError(stream, want, actual)
        # Copy (and so validate) everything before writing anything: all or nothing.
        prepared = [(e, _copy(e.data), _copy(e.metadata)) for e in events]
        recorded_at = datetime.fromtimestamp(self.clock(), UTC)
        versions = dict(self._versions)
        recorded: list[RecordedEvent] = []
        for event, data, metadata in prepared:
            versions[event.stream] = versions.get(event.stream, -1) + 1
            recorded.append(RecordedEvent(position=len(self._events) + len(recorded) + 1,
                                          stream=event.stream, version=versions[event.stream],
                                          type=event.type, data=data, metadata=metadata,
                                          recorded_at=recorded_at))
        self._events += recorded
        self._versions = versions
        for callback in self._after_append:
            callback(recorded)
        self.poke(recorded)
        return recorded

    async def read(self, after: int = 0, limit: int = 1000, *, types: Iterable[str] | None = None,
                   streams: Iterable[str] | None = None, categories: Iterable[str] | None = None,
                   data: Mapping[str, Any] | None = None, correlation: str | None = None,
                   agent_id: str | None = None, up_to: int | None = None) -> list[RecordedEvent]:
        types, streams, categories = (set(x) if x else None for x in (types, streams, categories))
        wanted = dict(data or {})
        if agent_id:
            wanted["agent_id"] = agent_id
        found = []
        # Positions are dense from 1: the event at position p is self._events[p - 1].
        for event in self._events[max(after, 0):up_to]:
            if ((types is None or event.type in types) and (streams is None or event.stream in streams)
                    and (categories is None or category_of(event.stream) in categories)
                    and all(event.data.get(k) == v for k, v in wanted.items())
                    and (not correlation or event.metadata.get("correlation") == correlation)):
                found.append(event)
                if len(found) == limit:
                    break
        return found

    async def read_stream(self, stream: str) -> list[RecordedEvent]:
        return [e for e in self._events if e.stream == stream]

    async def stream_version(self, stream: str) -> int:
        return self._versions.get(stream, -1)

    async def head(self) -> int:
        return len(self._events)

    async def read_to_head(self, after: int, limit: int, *, types: Iterable[str]
                           ) -> tuple[int, list[RecordedEvent]]:
        head = len(self._events)
        return head, await self.read(after, limit, types=types, up_to=head)

    def subscribe(self, after: int = 0, *, types: Iterable[str] | None = None,
                  streams: Iterable[str] | None = None, categories: Iterable[str] | None = None,
                  data: Mapping[str, Any] | None = None) -> AsyncIterator[RecordedEvent]:
        return _subscribe(self, self, after, types=types, streams=streams, categories=categories,
                          data=data)

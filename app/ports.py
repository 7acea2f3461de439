"""The seams between the application and the world: what the shell needs, not how.

Each port has a PostgreSQL adapter for production and an in-memory one for tests of the
application layer. One abstract contract test (tests/eventlog_contract.py) runs against
every EventLog adapter, so the two cannot drift apart."""
from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from app.eventstore.model import NewEvent, RecordedEvent


@runtime_checkable
class Wakeups(Protocol):
    """A generation counter that moves whenever the log may have grown. Read `generation`,
    read the log, and if nothing new was found `await wait(generation)`: it returns at once
    when anything arrived in between, so no append falls between the read and the wait."""

    @property
    def generation(self) -> int: ...

    @property
    def blind(self) -> int:
        """Wake-ups that named no position; a follower notes it at each read."""
        ...

    def known_head(self, blind_seen: int | None) -> int | None:
        """How far the log has grown, if every wake-up since the read at which the follower
        noted `blind` named its position (app/eventstore/wakeups.py); else None."""
        ...

    async def wait(self, seen_generation: int, timeout: float | None = None) -> None: ...


@runtime_checkable
class EventLog(Protocol):
    """An append-only log of streams with one global, gapless order.

    append: atomically, or not at all; `expected_versions[stream]` is the version the stream
    must be at (NO_STREAM = -1: must not exist), else ConcurrencyError and nothing is written.
    read: events with after < position <= up_to, in position order, optionally only of some
    types, streams, categories, or whose data holds the given key/value pairs.
    subscribe: every matching event after `after`, in order, exactly once, then live."""

    async def append(self, events: Sequence[NewEvent],
                     expected_versions: Mapping[str, int] | None = None) -> list[RecordedEvent]: ...

    async def read(self, after: int = 0, limit: int = 1000, *, types: Iterable[str] | None = None,
                   streams: Iterable[str] | None = None, categories: Iterable[str] | None = None,
                   data: Mapping[str, Any] | None = None,
                   up_to: int | None = None) -> list[RecordedEvent]: ...

    async def read_stream(self, stream: str) -> list[RecordedEvent]: ...

    async def stream_version(self, stream: str) -> int: ...

    async def head(self) -> int: ...

    async def read_to_head(self, after: int, limit: int, *, types: Iterable[str]
                           ) -> tuple[int, list[RecordedEvent]]:
        """(head, read(after, limit, types=types, up_to=head)), as of one moment."""
        ...

    def subscribe(self, after: int = 0, *, types: Iterable[str] | None = None,
                  streams: Iterable[str] | None = None, categories: Iterable[str] | None = None,
                  data: Mapping[str, Any] | None = None) -> AsyncIterator[RecordedEvent]: ...

    def on_append(self, callback: Callable[[list[RecordedEvent]], None]) -> None: ...


class Clock(Protocol):
    """Now, in seconds since the epoch. `time.time` is one; tests use a fake in milliseconds."""

    def __call__(self) -> float: ...


class Ids(Protocol):
    """A new unique id (`lambda: str(uuid.uuid4())` in production)."""

    def __call__(self) -> str: ...


class Lease(Protocol):
    """Leadership of one pool, for as long as `held` is true."""

    @property
    def held(self) -> bool: ...


class Leadership(Protocol):
    """Elects one writer per pool. `lead(pool)` yields a Lease when this process leads the
    pool, None when another one does; leaving the context gives the leadership up."""

    def lead(self, pool: str) -> AbstractAsyncContextManager[Lease | None]: ...

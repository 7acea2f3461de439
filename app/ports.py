"""The seams between the application and the world: what the shell needs, not how.

Each port has a PostgreSQL adapter for production and an in-memory one for tests of the
application layer. One abstract contract test per port (tests/eventlog_contract.py,
tests/gateway_replies_contract.py) runs against every adapter, so they cannot drift apart."""
from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
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


# -- the gateway's stored replies (Idempotency-Key) ------------------------------------------

CLAIMED, STORED, RUNNING, REUSED = "claimed", "stored", "running", "reused"
# A first call renews its claim every few seconds (app/gateway/idempotency.py); a claim
# not renewed for this long belongs to a worker that is gone, and a retry takes it over.
CLAIM_STALE_SECONDS = 30.0
# A reply larger than this is not stored: its retry runs again (a megabyte is several
# hundred thousand tokens of answer, far beyond what a chat reply or its stream holds).
MAX_STORED_REPLY_BYTES = 1 << 20


@dataclass(frozen=True)
class StoredReply:
    """A finished answer of the gateway, as a retry with the same key gets it again."""
    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Begun:
    """What `GatewayReplies.begin` found for a key.

    CLAIMED: nothing live; the caller now runs the call and must `finish` or `abandon`
    with `owner`. STORED: the first call's `reply`, for the same body. RUNNING: the first
    call, for the same body, is still running. REUSED: the key is live for another body."""
    state: str
    owner: str | None = None
    reply: StoredReply | None = None


@runtime_checkable
class GatewayReplies(Protocol):
    """The gateway's answers by (agent, Idempotency-Key), each with the hash of the body
    it answered, kept for a window (AGENTRM_IDEMPOTENCY_WINDOW_SECONDS) after the first call.

    `now` is the caller's wall clock in seconds, so that tests can move it; workers' clocks
    agree far closer than the window and the stale-claim age.
    begin: atomically claim the key, or report what holds it. A stored reply is live until
    the window passes; a running claim until it goes CLAIM_STALE_SECONDS without `touch`.
    touch: renew a running claim; False if `owner` no longer holds it.
    finish: store the reply (False, and the claim dropped, if `owner` no longer holds it or
    the body is over the adapter's size cap). abandon: drop the claim, so a retry runs anew.
    settled: return once the key is no longer running (finished, abandoned or gone) or after
    `timeout` seconds, whichever comes first; the caller then begins again (which is where a
    stale claim is taken over).
    purge: delete what has expired as of `now`; how many went."""

    async def begin(self, agent_id: str, key: str, body_hash: str, now: float) -> Begun: ...

    async def touch(self, agent_id: str, key: str, owner: str, now: float) -> bool: ...

    async def finish(self, agent_id: str, key: str, owner: str, reply: StoredReply, now: float) -> bool: ...

    async def abandon(self, agent_id: str, key: str, owner: str) -> None: ...

    async def settled(self, agent_id: str, key: str, timeout: float) -> None: ...

    async def purge(self, now: float) -> int: ...

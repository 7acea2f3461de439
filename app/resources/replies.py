"""The resource manager's replies to a lease command, as typed decisions, handed to whoever
waits for them: an acquire waits for the decision that takes the request in (and, if the
caller waits, for the one that ends its wait), a heartbeat for its extension, a release
for the release.

Replies come from the projector's subscription, after the projector has folded them, so
when a wait returns the read model already shows the decision. A wait is registered
before its command is appended, so a reply cannot slip between the append and the wait."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from app.domain import resource_events as rev
from app.domain.events import parse
from app.domain.streams import RESOURCE_DECISIONS_STREAM
from app.eventstore.model import RecordedEvent

Accept = Callable[[object], bool]


@dataclass
class LeaseReply:
    lease_id: str
    accept: Accept
    future: asyncio.Future = field(repr=False)

    async def wait(self, timeout: float):
        """The decision, or None if none came within `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                return await asyncio.shield(self.future)
        return None


class LeaseReplies:
    def __init__(self, subscribe: Callable[[Callable[[RecordedEvent], None]], object]):
        self._waiting: dict[str, list[LeaseReply]] = {}
        subscribe(self._on_event)

    def _on_event(self, event: RecordedEvent) -> None:
        if not self._waiting or event.stream != RESOURCE_DECISIONS_STREAM:
            return
        lease_id = event.data.get("lease_id") if isinstance(event.data, dict) else None
        replies = self._waiting.get(lease_id) if isinstance(lease_id, str) else None
        if not replies or event.type not in rev.RESOURCE_DECISIONS:
            return
        decision = parse(event.type, event.data)
        for reply in replies:
            if not reply.future.done() and reply.accept(decision):
                reply.future.set_result(decision)

    @contextlib.asynccontextmanager
    async def expect(self, lease_id: str, accept: Accept) -> AsyncIterator[LeaseReply]:
        reply = LeaseReply(lease_id, accept, asyncio.get_running_loop().create_future())
        self._waiting.setdefault(lease_id, []).append(reply)
        try:
            yield reply
        finally:
            replies = self._waiting.get(lease_id, [])
            if reply in replies:
                replies.remove(reply)
            if not replies:
                self._waiting.pop(lease_id, None)
            if not reply.future.done():
                reply.future.cancel()


# Which decisions answer which command.
def answers_acquire(d) -> bool:
    """The manager took the request in: granted, queued, or refused."""
    return isinstance(d, (rev.ResourceGranted, rev.ResourceWaiting, rev.ResourceRefused))


def ends_wait(d) -> bool:
    """A waiting request is no longer waiting: granted, withdrawn or reaped."""
    return isinstance(d, (rev.ResourceGranted, rev.ResourceReleased, rev.ResourceReaped))


def answers_heartbeat(d) -> bool:
    return isinstance(d, (rev.ResourceLeaseExtended, rev.ResourceReleased, rev.ResourceReaped))


def ends_lease(d) -> bool:
    return isinstance(d, (rev.ResourceReleased, rev.ResourceReaped))

"""The scheduler's replies to a command, as typed decisions, handed to whoever waits for them.

A command (request a turn, heartbeat, complete, cancel, release a quarantine) is answered
by its pool's scheduler with decisions in the log. The Service waits for the reply it needs,
named by what it is about (a turn's id, or an agent's for a quarantine) and by which
decisions answer it, and gets the decision itself as its events.py dataclass.

Replies come from the projector's subscription, that is after the projector has folded
them: when a wait returns, the read model already shows the decision, so the view the
Service answers with is the state the decision made (whichever worker wrote it: the
projector follows the whole log). A wait is registered before its command is appended,
so a reply cannot slip between the append and the wait.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import cast

from app.domain import events as ev
from app.domain.turn_history import RECORD_CHANGES
from app.eventstore.model import RecordedEvent

Accept = Callable[[ev.Decided], bool]


@dataclass
class Reply:
    """One registered wait: the first decision about `subject` that `accept` takes."""
    subject: str
    accept: Accept
    future: asyncio.Future = field(repr=False)

    async def wait(self, timeout: float) -> ev.Decided | None:
        """The reply, or None if none came within `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                return await asyncio.shield(self.future)
        return None


class Replies:
    def __init__(self, subscribe: Callable[[Callable[[RecordedEvent], None]], object]):
        self._waiting: dict[str, list[Reply]] = {}
        subscribe(self._on_event)

    def _on_event(self, event: RecordedEvent) -> None:
        if event.type not in ev.DECISIONS or not self._waiting:
            return
        data = event.data if isinstance(event.data, dict) else {}
        # What a decision answers: its turn, else its agent (admission, quarantine).
        subject = data.get("turn_id") or data.get("agent_id")
        replies = self._waiting.get(subject) if isinstance(subject, str) else None
        if not replies:
            return  # parse only what somebody waits for
        decision = cast(ev.Decided, ev.parse(event.type, data))   # a type in ev.DECISIONS, checked above
        for reply in replies:
            if not reply.future.done() and reply.accept(decision):
                reply.future.set_result(decision)

    @contextlib.asynccontextmanager
    async def expect(self, subject: str, accept: Accept) -> AsyncIterator[Reply]:
        """Register a wait for a reply about `subject` (before appending the command)."""
        reply = Reply(subject, accept, asyncio.get_running_loop().create_future())
        self._waiting.setdefault(subject, []).append(reply)
        try:
            yield reply
        finally:
            replies = self._waiting.get(subject, [])
            if reply in replies:
                replies.remove(reply)
            if not replies:
                self._waiting.pop(subject, None)
            if not reply.future.done():
                reply.future.cancel()


# Which decisions answer which command.
def answers_request(d: ev.Decided) -> bool:
    """The scheduler took the request in: queued, or refused (cancelled) at once."""
    return isinstance(d, (ev.TurnQueued, ev.TurnCancelled))


def leaves_queue(d: ev.Decided) -> bool:
    """The turn is no longer waiting: granted, or ended while queued."""
    return isinstance(d, (ev.TurnGranted, ev.TurnCancelled, ev.TurnReaped, ev.TurnCompleted))


def ends_turn(d: ev.Decided) -> bool:
    return isinstance(d, (ev.TurnCompleted, ev.TurnCancelled, ev.TurnReaped))


def changes_turn(d: ev.Decided) -> bool:
    """Any decision that changes the turn's record (a heartbeat's answer is one)."""
    return isinstance(d, RECORD_CHANGES)


def lifts_quarantine(d: ev.Decided) -> bool:
    return isinstance(d, ev.QuarantineLifted)

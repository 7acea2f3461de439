"""A subscriber that stops reading is cut off, told why, and resumes from its position.

Subscriptions pull from the log (app/eventstore/listener.py `follow`): nothing is queued
for a subscriber beyond what is on its socket, so a slow one never holds up the scheduler
or anyone else. What it does hold is its socket's buffer (the server's transport pauses
at its high-water mark, so that is bounded too) and a reader parked in `send`. Past
`send_timeout` seconds of a blocked send the connection's operations are ended (their log
readers closed), and the connection is closed with code 4429 and a reason that says what
to do: the close frame reaches the client behind the events already buffered, so the
client knows the last position it received and resubscribes with `after` set to it."""
from __future__ import annotations

import asyncio
import contextlib
import logging

from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    _OperationStreamClosed,
)

log = logging.getLogger(__name__)

SLOW_SUBSCRIBER_CLOSE_CODE = 4429
SLOW_SUBSCRIBER_REASON = "subscriber fell behind: resubscribe with `after` = the last position you received"


class SlowSubscriberCut(_OperationStreamClosed):
    """Ends the operation quietly: strawberry's operation task returns on this one."""


class BoundedSendHandler(BaseGraphQLTransportWSHandler):
    send_timeout: float = 30.0   # set per app by `bounded_send_handler`

    async def send_message(self, message) -> None:
        if getattr(self, "_cut", False):
            if "id" in message:
                raise SlowSubscriberCut(SLOW_SUBSCRIBER_REASON)
            return  # a pong or an ack to a closing connection: dropped
        try:
            # uvicorn's send waits for the transport to be writable, then writes the whole
            # frame at once: a send cancelled here has written nothing.
            await asyncio.wait_for(self.websocket.send_json(message), self.send_timeout)
        except TimeoutError:
            self._cut_off()
            if "id" in message:
                raise SlowSubscriberCut(SLOW_SUBSCRIBER_REASON) from None

    def _cut_off(self) -> None:
        if getattr(self, "_cut", False):
            return
        self._cut = True
        log.warning("cutting off a subscriber that read nothing for %.0f s", self.send_timeout)
        for operation_id in list(self.operations):
            task = self.operations.pop(operation_id).task
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        # Sent when (if ever) the client reads what is buffered; the handler's receive loop
        # ends once it is.
        self._closer = asyncio.create_task(self._close())

    async def _close(self) -> None:
        with contextlib.suppress(Exception):
            await self.websocket.close(SLOW_SUBSCRIBER_CLOSE_CODE, SLOW_SUBSCRIBER_REASON)

    async def handle_message(self, message) -> None:
        if getattr(self, "_cut", False):
            return  # a cut-off connection starts nothing new; it is closing
        await super().handle_message(message)


def bounded_send_handler(send_timeout: float) -> type[BoundedSendHandler]:
    return type("BoundedSendHandler", (BoundedSendHandler,), {"send_timeout": send_timeout})

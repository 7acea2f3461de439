"""uvicorn's httptools protocol, with a response's head and body sent in one write.

uvicorn writes a response's status line and headers when the app sends
`http.response.start`, and the body when it sends `http.response.body`: two writes, so two
`send` system calls and two TCP segments for every answer, and a client that wakes up
twice to read one. On loopback the sender's system call also runs the receiver's side of
TCP, which is why those two writes were 7.6% of a worker's CPU at saturation (py-spy,
`bench load`, both workers).

`CoalescingTransport` holds a write when nothing is held and hands it over at the next
write, joined to it, or at the end of the current turn of the event loop, whichever comes
first. A plain response's head and body are sent within one turn of the loop (nothing
between them awaits anything that suspends), so they leave in one write; a streamed
response's head leaves at the end of the turn it was sent in, before anything else can
be written. Order is kept: every write, close and end-of-stream goes through the held
bytes first. WebSocket connections get the socket's own transport at the upgrade, so
their frames are written as before.
"""
from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    """A transport that joins a write to the next one made in the same turn of the loop."""

    __slots__ = ("raw", "_loop", "_held", "_flush_scheduled")

    def __init__(self, raw: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.raw = raw
        self._loop = loop
        self._held: bytes | None = None
        self._flush_scheduled = False

    def write(self, data) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self.raw.write(held + data if data else held)
        elif data:
            self._held = bytes(data)
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._scheduled_flush)

    def writelines(self, lines) -> None:
        self.write(b"".join(lines))

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self.raw.write(held)

    def close(self) -> None:
        self.flush()
        self.raw.close()

    def write_eof(self) -> None:
        self.flush()
        self.raw.write_eof()

    def abort(self) -> None:
        self._held = None
        self.raw.abort()

    def get_write_buffer_size(self) -> int:
        return self.raw.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str):
        # Everything else (extra info, reading flow control, is_closing, set_protocol) is the
        # socket transport's own.
        return getattr(self.raw, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing through a `CoalescingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, asyncio.get_running_loop()))

    def handle_websocket_upgrade(self) -> None:
        # The WebSocket protocol takes the connection over from here; it writes to the socket's
        # transport directly, as it would without this class.
        transport = self.transport
        if isinstance(transport, CoalescingTransport):
            transport.flush()
            self.transport = transport.raw
        super().handle_websocket_upgrade()

"""uvicorn's httptools protocol, with a response's head and body sent as one write.

Why: uvicorn writes a response's status line and headers when the app sends
`http.response.start`, and its body at `http.response.body`: two `send` calls per response,
and on loopback each one also runs the receiver's side of TCP and wakes it (twice, when the
two segments do not arrive together). Under `bench load` the socket writes were 6-12% of a
worker's CPU (py-spy, `RequestResponseCycle.send`), for two small writes that the app makes
back to back, in one step of its task. So the connection's transport is wrapped: a write of
a response head (it starts with the status line and ends with the blank line) is held, and
goes out joined with the next write, the body, at once. A head that nothing follows (a HEAD
request's answer, a 100 Continue, a WebSocket handshake) goes out on the loop's next turn
(`call_soon`), before any timer or I/O wait.

What it keeps as it was:
- order: held bytes always go out before, and with, whatever is written next;
- close: `close()` and `write_eof()` send what is held first, as a transport's close flushes
  its buffer; `abort()` drops it, as a transport's abort does;
- flow control: uvicorn pauses on the real transport's buffer, which every flush fills;
- everything else (`is_closing`, `get_extra_info`, `pause_reading`, `set_protocol`, ...) is
  the transport's own. A WebSocket upgrade hands the same wrapper on: its frames are not
  heads, and are written at once."""
from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport, self._loop = transport, loop
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self._held:   # the body after its head: both at once
            self._held.append(data)
            self._flush()
        elif data[:5] == b"HTTP/" and data[-4:] == b"\r\n\r\n":
            self._held.append(bytes(data))   # a copy: a caller may reuse a bytearray
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def _flush(self) -> None:
        if not self._held:
            return
        held, self._held = self._held, []
        if not self._transport.is_closing():   # as a closed transport drops a write
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held.clear()
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._held))

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

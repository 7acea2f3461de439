"""A minimal HTTP/1.1 keep-alive client for the load driver: one connection per agent,
requests written as pre-encoded bytes, responses framed by Content-Length.

Why not httpx (or aiohttp): the driver shares two cores with the server and PostgreSQL,
and every millisecond of CPU it spends per turn is taken from the server it measures.
httpx costs the driver about as much CPU per turn as the whole server spends. A turn here is
two POSTs whose bytes are known in advance but for the turn id, so the request is a
`transport.write` of a prepared buffer and the response a search for the end of the head
and a Content-Length: no header objects, no URL parsing, no connection pool. It speaks
exactly what uvicorn answers a JSON POST with (a Content-Length body, keep-alive), and
treats anything else (chunked, a closed connection, a timeout) as a failed request, after
which the connection is replaced.
"""
from __future__ import annotations

import asyncio
import time
from typing import cast

import orjson

# uvicorn closes a keep-alive connection after 5 s without a request; one that has been
# idle longer than this is replaced before it is used, rather than racing that close (a
# request written as the server closes is lost, and a POST is not safe to send again).
KEEPALIVE_EXPIRY_S = 4.0


class HTTPError(Exception):
    """The request got no usable response (the connection failed, timed out or framed it
    in a way this client does not read)."""


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future | None = None
        self.head_end = -1
        self.length = -1
        self.status = 0
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(HTTPError(f"connection lost: {exc!r}"))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is not None:
            self._parse()

    def _parse(self) -> None:
        # only while a request waits (data_received and request() see to it)
        waiting = cast(asyncio.Future, self.waiter)
        buf = self.buffer
        if self.head_end < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).lower()
            try:
                self.status = int(head[9:12])
                start = head.index(b"\r\ncontent-length:") + 17
                stop = head.find(b"\r\n", start)
                self.length = int(head[start:stop if stop >= 0 else len(head)])
            except ValueError:
                waiting.set_exception(HTTPError("a response without a Content-Length"))
                return
            self.head_end = end + 4
        total = self.head_end + self.length
        if len(buf) < total:
            return
        body = bytes(buf[self.head_end:total])
        del buf[:total]
        self.head_end = self.length = -1
        self.waiter = None
        waiting.set_result((self.status, body))

    def request(self, payload: bytes) -> asyncio.Future:
        self.waiter = asyncio.get_running_loop().create_future()
        cast(asyncio.Transport, self.transport).write(payload)   # connected before a request
        if self.buffer:
            self._parse()
        return self.waiter


class GraphQLConnection:
    """One agent's keep-alive connection to POST /graphql, with its bearer token."""

    def __init__(self, host: str, port: int, token: str, timeout: float = 60.0):
        self.host, self.port, self.timeout = host, port, timeout
        self.head = (f"POST /graphql HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
                     "Content-Type: application/json\r\nContent-Length: ").encode()
        self._protocol: _Protocol | None = None
        self._last_used = 0.0

    def prepare(self, body: bytes) -> bytes:
        """The whole request for a JSON body, to be sent as it is, any number of times."""
        return b"%b%d\r\n\r\n%b" % (self.head, len(body), body)

    async def _connected(self) -> _Protocol:
        if self._protocol is not None and time.monotonic() - self._last_used > KEEPALIVE_EXPIRY_S:
            self.close()
        if self._protocol is None or self._protocol.closed:
            _transport, self._protocol = await asyncio.get_running_loop().create_connection(
                _Protocol, self.host, self.port)
        return self._protocol

    async def post(self, request: bytes) -> dict:
        """Send a prepared request; the decoded JSON response body (any status)."""
        try:
            protocol = await self._connected()
            async with asyncio.timeout(self.timeout):
                _status, body = await protocol.request(request)
            self._last_used = time.monotonic()
            return orjson.loads(body)
        except (OSError, TimeoutError, HTTPError, orjson.JSONDecodeError) as exc:
            self.close()
            raise HTTPError(repr(exc)) from exc

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None

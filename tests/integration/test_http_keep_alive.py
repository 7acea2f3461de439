"""An idle client connection outlives the clients' own idle expiry (httpx, and so the
OpenAI and Anthropic SDKs, drop theirs after 5 s). Were the server's keep-alive 5 s too,
a request sent on a connection the server is closing at that instant fails with a read
error, and SDKs do not retry a POST on that error. Here one raw connection sends a
request, idles past 5 s, and must still answer the second one."""
from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: agentrm\r\n\r\n"


async def _response(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    await asyncio.wait_for(reader.readexactly(length), 10)
    return head


async def test_an_idle_connection_is_still_open_after_the_clients_own_expiry(server):
    address = urlsplit(server.base)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    try:
        writer.write(HEALTH)
        assert (await _response(reader)).startswith(b"HTTP/1.1 200")
        await asyncio.sleep(6.5)
        writer.write(HEALTH)
        await writer.drain()
        assert (await _response(reader)).startswith(b"HTTP/1.1 200")
    finally:
        writer.close()

"""The coalescing transport under uvicorn's HTTP protocol (app/api/http_protocol.py): a
response's head leaves joined with the write after it, its body, at once; a head nothing
follows leaves on the loop's next turn; anything else is written at once; close and write_eof
send what is held first; abort drops it. Run on a real loop over a real socket pair."""
from __future__ import annotations

import asyncio
import socket

from app.api.http_protocol import CoalescingTransport


class Recording(asyncio.Protocol):
    def __init__(self):
        self.eof = asyncio.Event()

    def eof_received(self):
        self.eof.set()


async def _pair():
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    transport, _ = await loop.create_connection(Recording, sock=ours)
    writes: list[bytes] = []
    real_write = transport.write

    def counted(data):
        writes.append(bytes(data))
        real_write(data)
    transport.write = counted   # the instance attribute: every write the wrapper makes
    return loop, CoalescingTransport(transport, loop), transport, theirs, writes


async def _read(loop, sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        out += await loop.sock_recv(sock, n - len(out))
    return out


HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


async def test_a_head_leaves_with_its_body_at_once():
    loop, wrapped, transport, peer, writes = await _pair()
    wrapped.write(HEAD)
    assert writes == [] and wrapped.get_write_buffer_size() == len(HEAD)
    wrapped.write(bytearray(b"ok"))
    assert writes == [HEAD + b"ok"]   # not a turn later: the body's write sends both
    await asyncio.sleep(0)
    assert writes == [HEAD + b"ok"]   # and the head's fallback finds nothing left
    wrapped.write(b"frame")   # not a head: at once
    assert writes[1:] == [b"frame"]
    assert await _read(loop, peer, len(HEAD) + 7) == HEAD + b"okframe"
    wrapped.close()
    peer.close()


async def test_a_head_that_nothing_follows_leaves_on_the_next_turn():
    loop, wrapped, transport, peer, writes = await _pair()
    head = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n"
    wrapped.write(head)
    assert writes == []
    await asyncio.sleep(0)
    assert writes == [head]
    wrapped.write(b"HTTP/1.1 is not a head without its blank line")
    assert len(writes) == 2
    wrapped.close()
    peer.close()


async def test_close_and_write_eof_send_what_is_held_first():
    loop, wrapped, transport, peer, writes = await _pair()
    wrapped.write(HEAD)
    wrapped.write_eof()
    assert writes == [HEAD]
    assert await _read(loop, peer, len(HEAD)) == HEAD
    assert await loop.sock_recv(peer, 10) == b""   # then the end of the stream
    wrapped.close()
    peer.close()

    loop, wrapped, transport, peer, writes = await _pair()
    wrapped.write(HEAD)
    wrapped.close()
    assert writes == [HEAD] and transport.is_closing() and wrapped.is_closing()
    assert await _read(loop, peer, len(HEAD)) == HEAD
    await asyncio.sleep(0)   # the flush scheduled by the write finds nothing left to send
    assert writes == [HEAD]
    peer.close()


async def test_abort_drops_what_is_held_and_a_closed_transport_takes_nothing():
    loop, wrapped, transport, peer, writes = await _pair()
    wrapped.write(HEAD)
    wrapped.abort()
    await asyncio.sleep(0)
    assert writes == [] and transport.is_closing()
    peer.close()

    loop, wrapped, transport, peer, writes = await _pair()
    wrapped.write(HEAD)
    transport.close()   # closed underneath, as a lost connection closes it
    await asyncio.sleep(0)
    assert writes == []
    peer.close()


async def test_everything_else_is_the_transports_own():
    loop, wrapped, transport, peer, writes = await _pair()
    assert wrapped.get_extra_info("sockname") == transport.get_extra_info("sockname")
    wrapped.pause_reading()
    assert not transport.is_reading()
    wrapped.resume_reading()
    assert transport.is_reading()
    wrapped.writelines([HEAD, b"", b"ok", b"more"])
    assert writes == [HEAD + b"ok", b"more"]
    wrapped.close()
    peer.close()

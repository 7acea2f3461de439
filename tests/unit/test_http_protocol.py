"""The coalescing transport under uvicorn's HTTP protocol (app/api/http_protocol.py): what is
written in one turn of the event loop leaves as one write, in order; close and write_eof send
what is held first; abort drops it. Run on a real loop over a real socket pair."""
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


async def test_writes_of_one_turn_leave_as_one_in_order():
    loop, wrapped, transport, peer, writes = await _pair()
    wrapped.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    wrapped.write(bytearray(b"ok"))
    assert writes == [] and wrapped.get_write_buffer_size() == 40
    await asyncio.sleep(0)
    assert writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
    wrapped.write(b"next")   # a later turn: its own write
    await asyncio.sleep(0)
    assert writes[1:] == [b"next"]
    assert await _read(loop, peer, 44) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\noknext"
    wrapped.close()
    peer.close()


async def test_close_and_write_eof_send_what_is_held_first():
    loop, wrapped, transport, peer, writes = await _pair()
    wrapped.write(b"last words")
    wrapped.write_eof()
    assert writes == [b"last words"]
    assert await _read(loop, peer, 10) == b"last words"
    assert await loop.sock_recv(peer, 10) == b""   # then the end of the stream
    wrapped.close()
    peer.close()

    loop, wrapped, transport, peer, writes = await _pair()
    wrapped.write(b"bye")
    wrapped.close()
    assert writes == [b"bye"] and transport.is_closing() and wrapped.is_closing()
    assert await _read(loop, peer, 3) == b"bye"
    await asyncio.sleep(0)   # the flush scheduled by the write finds nothing left to send
    assert writes == [b"bye"]
    peer.close()


async def test_abort_drops_what_is_held_and_a_closed_transport_takes_nothing():
    loop, wrapped, transport, peer, writes = await _pair()
    wrapped.write(b"never")
    wrapped.abort()
    await asyncio.sleep(0)
    assert writes == [] and transport.is_closing()
    peer.close()

    loop, wrapped, transport, peer, writes = await _pair()
    wrapped.write(b"too late")
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
    wrapped.writelines([b"a", b"", b"b"])
    await asyncio.sleep(0)
    assert writes == [b"ab"]
    wrapped.close()
    peer.close()

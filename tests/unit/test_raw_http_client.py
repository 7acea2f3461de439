"""The load driver's HTTP/1.1 client against real sockets on loopback: a server that
answers in the framings it must read (and the ones it must refuse), byte by byte where the
framing is the point."""
from __future__ import annotations

import asyncio

import orjson
import pytest

from agentrm_bench.raw_http import GraphQLConnection, HTTPError


def _response(body: bytes, *, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%bcontent-length: %d\r\n\r\n%b" % (
        extra, len(body), body)


async def _server(answer):
    """A server that reads each request's head and body and writes `answer(request)` back."""
    requests: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                request = head + await reader.readexactly(length)
                requests.append(request)
                reply = answer(request)
                if reply is None:
                    writer.close()
                    return
                for chunk in reply:   # a list of chunks, each written and drained alone
                    writer.write(chunk)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], requests


async def test_keep_alive_requests_with_bodies_split_across_writes():
    body = orjson.dumps({"data": {"requestTurn": {"id": "t1", "status": "GRANTED"}}})
    whole = _response(body)
    # The response arrives one byte at a time: head and body framed by Content-Length alone.
    server, port, requests = await _server(lambda _r: [whole[i:i + 1] for i in range(len(whole))])
    async with server:
        connection = GraphQLConnection("127.0.0.1", port, "agt_secret")
        request = connection.prepare(b'{"query":"{ me { id } }"}')
        first = await connection.post(request)
        second = await connection.post(request)
        connection.close()
    assert first == second == {"data": {"requestTurn": {"id": "t1", "status": "GRANTED"}}}
    assert len(requests) == 2 and requests[0] == requests[1] == request
    head, _, sent_body = requests[0].partition(b"\r\n\r\n")
    assert b"Authorization: Bearer agt_secret" in head and b"Content-Length: 25" in head
    assert sent_body == b'{"query":"{ me { id } }"}'


async def test_a_response_and_the_next_one_in_the_same_packet_are_told_apart():
    one, two = orjson.dumps({"n": 1}), orjson.dumps({"n": 2})
    answers = iter([[_response(one) + _response(two)[:10]], [_response(two)[10:]]])
    server, port, _ = await _server(lambda _r: next(answers))
    async with server:
        connection = GraphQLConnection("127.0.0.1", port, "t")
        request = connection.prepare(b"{}")
        assert await connection.post(request) == {"n": 1}
        assert await connection.post(request) == {"n": 2}
        connection.close()


async def test_chunked_or_closed_responses_fail_and_the_next_request_reconnects():
    replies = iter([
        [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
        None,   # the server closes the connection instead of answering
        [_response(b'{"ok": true}')],
    ])
    server, port, requests = await _server(lambda _r: next(replies))
    async with server:
        connection = GraphQLConnection("127.0.0.1", port, "t")
        request = connection.prepare(b"{}")
        with pytest.raises(HTTPError, match="Content-Length"):
            await connection.post(request)
        with pytest.raises(HTTPError, match="connection lost"):
            await connection.post(request)
        assert await connection.post(request) == {"ok": True}
        connection.close()
    assert len(requests) == 3


async def test_a_server_that_does_not_answer_times_out():
    gate = asyncio.Event()

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await gate.wait()   # never answers until the test is over
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        connection = GraphQLConnection("127.0.0.1", server.sockets[0].getsockname()[1], "t", timeout=0.2)
        with pytest.raises(HTTPError, match="TimeoutError"):
            await connection.post(connection.prepare(b"{}"))
        gate.set()

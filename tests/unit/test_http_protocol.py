"""The coalescing transport: what reaches the socket, and in which writes."""
import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.http_protocol import CoalescingHttpToolsProtocol, CoalescingTransport


class Recording:
    """A socket transport that records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.extra = {"peername": ("127.0.0.1", 5), "sockname": ("127.0.0.1", 6)}

    def write(self, data) -> None:
        self.calls.append(("write", bytes(data)))

    def close(self) -> None:
        self.calls.append(("close",))

    def write_eof(self) -> None:
        self.calls.append(("eof",))

    def abort(self) -> None:
        self.calls.append(("abort",))

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name, default=None):
        return self.extra.get(name, default)

    def is_closing(self) -> bool:
        return False

    @property
    def written(self) -> bytes:
        return b"".join(c[1] for c in self.calls if c[0] == "write")


async def next_turn() -> None:
    await asyncio.sleep(0)


async def test_writes_within_one_turn_of_the_loop_leave_as_one():
    raw = Recording()
    t = CoalescingTransport(raw, asyncio.get_running_loop())
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    t.write(b"{}")
    assert raw.calls == [("write", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")]
    await next_turn()
    assert len(raw.calls) == 1, "the scheduled flush found nothing held and wrote nothing"


async def test_a_lone_write_leaves_at_the_end_of_the_turn():
    raw = Recording()
    t = CoalescingTransport(raw, asyncio.get_running_loop())
    t.write(b"head")
    assert raw.calls == []
    await next_turn()
    assert raw.calls == [("write", b"head")]
    t.write(b"chunk")    # a streamed body, a turn later: held again, then flushed
    await next_turn()
    assert raw.calls == [("write", b"head"), ("write", b"chunk")]


async def test_an_empty_write_hands_over_what_is_held_and_adds_nothing():
    raw = Recording()
    t = CoalescingTransport(raw, asyncio.get_running_loop())
    t.write(b"")
    await next_turn()
    assert raw.calls == []
    t.write(b"head")
    t.write(b"")
    assert raw.calls == [("write", b"head")]


@pytest.mark.parametrize("end, last", [("close", ("close",)), ("write_eof", ("eof",))])
async def test_close_and_end_of_stream_send_what_is_held_first(end, last):
    raw = Recording()
    t = CoalescingTransport(raw, asyncio.get_running_loop())
    t.write(b"bye")
    getattr(t, end)()
    assert raw.calls == [("write", b"bye"), last]
    await next_turn()
    assert raw.calls == [("write", b"bye"), last], "nothing written after the end"


async def test_abort_drops_what_is_held():
    raw = Recording()
    t = CoalescingTransport(raw, asyncio.get_running_loop())
    t.write(b"lost")
    t.abort()
    await next_turn()
    assert raw.calls == [("abort",)]


async def test_buffer_size_counts_what_is_held_and_the_rest_is_the_sockets():
    raw = Recording()
    t = CoalescingTransport(raw, asyncio.get_running_loop())
    t.write(b"12345")
    assert t.get_write_buffer_size() == 7 + 5
    assert t.get_extra_info("peername") == ("127.0.0.1", 5)
    assert t.is_closing() is False
    t.writelines([b"a", b"b"])
    assert raw.calls == [("write", b"12345ab")]


@given(st.lists(st.tuples(st.binary(max_size=8), st.booleans()), max_size=20))
def test_bytes_arrive_in_order_whatever_the_turns(writes):
    """Any sequence of writes, with or without a turn of the loop between them, reaches the
    socket as the same bytes in the same order, and no write to the socket is empty."""
    async def run() -> Recording:
        raw = Recording()
        t = CoalescingTransport(raw, asyncio.get_running_loop())
        for data, turn in writes:
            t.write(data)
            if turn:
                await next_turn()
        t.close()
        return raw
    raw = asyncio.run(run())
    assert raw.written == b"".join(d for d, _ in writes)
    assert all(c[1] for c in raw.calls if c[0] == "write")
    assert raw.calls[-1] == ("close",)


def test_the_protocol_writes_through_a_coalescing_transport():
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    async def run():
        async def app(scope, receive, send):
            pass
        config = Config(app=app, ws="websockets-sansio")
        config.load()
        protocol = CoalescingHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
        raw = Recording()
        protocol.connection_made(raw)
        assert isinstance(protocol.transport, CoalescingTransport) and protocol.transport.raw is raw
        return protocol, raw
    protocol, raw = asyncio.run(run())
    assert protocol.client == ("127.0.0.1", 5)

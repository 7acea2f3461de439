"""Threat-model row: work done before the caller was judged.
- `turn(id)` and the turn subscription read the database (a recall of a finished turn)
  before checking the caller, and answered FORBIDDEN for another agent's turn but null (or
  NOT_FOUND) for a missing one, telling a stranger which turn ids exist;
- an invalid token made the worker catch up with the log, a database read per request;
- the gateway read and decoded up to its cap of a body that declared more, and answered a
  body over the cap with 400.

An agent asking for a turn not its own gets FORBIDDEN whether it exists or not; an invalid
token costs no read of the log; a body over AGENTRM_GATEWAY_MAX_BODY_BYTES is refused with
413 in the wire's own error shape, by its declared length before a byte of it is read, and
a large body is decoded off the event loop."""
from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import uuid

import httpx
import pytest

from app.gateway.wire import ANTHROPIC, OPENAI
from tests.client import REQUEST, GraphQLClient, GraphQLError, admitted, register

TURN = "query($id: ID!) { turn(id: $id) { id agentId status } }"
FOLLOW_TURN = "subscription($id: ID!) { turn(turnId: $id) { id status } }"
CAP = 16 * 1024 * 1024   # AGENTRM_GATEWAY_MAX_BODY_BYTES's default, which the test server keeps


async def a_granted_turn(server, operator) -> tuple[str, str, str]:
    """(A's turn, A's token, B's token): A holds a turn, B is another agent."""
    a_id, a_token = await register(operator, "turn-owner")
    _, b_token = await register(operator, "turn-prober")
    await admitted(operator, a_id)
    async with GraphQLClient(server, a_token) as a:
        turn = (await a(REQUEST, est=5, out=None, wait=10.0))["requestTurn"]
    return turn["id"], a_token, b_token


async def subscription_outcome(server, token: str | None, turn_id: str) -> tuple[str | None, str]:
    async with GraphQLClient(server, token) as client, client.subscribe(FOLLOW_TURN, id=turn_id) as sub:
        try:
            await sub.next()
        except GraphQLError as exc:
            return exc.code, exc.errors[0]["message"]
    return None, "answered"


async def test_another_agents_turn_and_a_missing_one_get_the_same_answer(server, operator):
    turn_id, _, b_token = await a_granted_turn(server, operator)
    missing = str(uuid.uuid4())
    async with GraphQLClient(server, b_token) as b:
        foreign, absent = await b.raw(TURN, {"id": turn_id}), await b.raw(TURN, {"id": missing})
    assert foreign["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    assert absent.get("errors"), f"a missing turn answered differently: {absent}"
    assert [(e["message"], e["extensions"]) for e in foreign["errors"]] == \
        [(e["message"], e["extensions"]) for e in absent["errors"]]
    assert foreign["data"] == absent["data"]
    # The subscription too.
    assert await subscription_outcome(server, b_token, turn_id) == \
        await subscription_outcome(server, b_token, missing)
    # The operator may tell them apart: it sees every turn.
    assert (await operator(TURN, id=missing))["turn"] is None


COMMANDS_ON_A_TURN = (
    "mutation($id: ID!) { completeTurn(input: {turnId: $id, outcome: OK, promptTokens: 1, "
    "completionTokens: 1}) { id } }",
    "mutation($id: ID!) { heartbeat(turnId: $id) { id } }",
    "mutation($id: ID!) { cancelTurn(turnId: $id) { id } }",
)


async def test_commands_on_another_agents_turn_and_a_missing_one_get_the_same_answer(server, operator):
    # The commands were an existence oracle too: NOT_FOUND for an id that names no turn,
    # FORBIDDEN for another agent's.
    turn_id, _, b_token = await a_granted_turn(server, operator)
    missing = str(uuid.uuid4())
    async with GraphQLClient(server, b_token) as b:
        for command in COMMANDS_ON_A_TURN:
            foreign, absent = await b.raw(command, {"id": turn_id}), await b.raw(command, {"id": missing})
            assert foreign["errors"][0]["extensions"]["code"] == "FORBIDDEN", (command, foreign)
            assert [(e["message"], e["extensions"]) for e in foreign["errors"]] == \
                [(e["message"], e["extensions"]) for e in absent["errors"]], (command, foreign, absent)
    assert server.runtime.service.turn_view(turn_id)["status"] == "GRANTED"   # nothing changed


@contextlib.contextmanager
def counted(obj, name: str, only_from: tuple[str, ...] = ()):
    """Calls of obj.name (from a module whose path holds one of `only_from`, if given)."""
    calls: list = []
    real = getattr(obj, name)

    async def counting(*args, **kwargs):
        caller = sys._getframe(1).f_code.co_filename
        if not only_from or any(part in caller for part in only_from):
            calls.append((caller, args))
        return await real(*args, **kwargs)
    setattr(obj, name, counting)
    try:
        yield calls
    finally:
        delattr(obj, name)


async def test_an_anonymous_turn_lookup_reads_nothing(server, operator):
    turn_id, _, _ = await a_granted_turn(server, operator)
    gone = str(uuid.uuid4())   # not in memory: asking for it would look in the log
    with counted(server.runtime.projector, "recall_turn") as recalls:
        async with GraphQLClient(server, None) as anonymous:
            for turn in (turn_id, gone):
                assert (await anonymous.raw(TURN, {"id": turn}))["errors"][0]["extensions"]["code"] \
                    == "UNAUTHENTICATED"
                assert (await subscription_outcome(server, None, turn))[0] == "UNAUTHENTICATED"
    assert not recalls, f"an unauthenticated caller made the service look for turns: {recalls}"


async def test_an_invalid_token_costs_no_read_of_the_log(server, operator):
    gone = str(uuid.uuid4())
    invalid = ("Bearer not-a-token", "Bearer agt_short", "Basic abc")
    with counted(server.runtime.projector, "catch_up", ("/app/api/", "/app/gateway/")) as catch_ups:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
            for header in invalid:
                body = await http.post("/graphql", json={"query": TURN, "variables": {"id": gone}},
                                       headers={"authorization": header})
                assert body.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
                chat = await http.post("/v1/chat/completions", headers={"authorization": header},
                                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
                assert chat.status_code == 401
                models = await http.get("/v1/models", headers={"authorization": header})
                assert models.status_code == 401
    assert not catch_ups, f"an invalid token made the worker read the log {len(catch_ups)} times"


async def raw_post(server, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, dict]:
    """A request whose Content-Length we choose (it may promise more than is sent)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    head = "".join(f"{k}: {v}\r\n" for k, v in {"host": "127.0.0.1", **headers}.items())
    writer.write(f"POST {path} HTTP/1.1\r\n{head}\r\n".encode() + body)
    await writer.drain()
    try:
        status_line = await asyncio.wait_for(reader.readline(), 10)
        headers_in: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode().partition(":")
            headers_in[k.strip().lower()] = v.strip()
        payload = await reader.readexactly(int(headers_in["content-length"]))
    finally:
        writer.close()
    return int(status_line.split()[1]), json.loads(payload)


@contextlib.contextmanager
def parses_of(*wires):
    """The threads each wire's parse ran on."""
    threads: list[threading.Thread] = []
    reals = {}
    for wire in wires:
        reals[wire] = wire.parse

        def parse(raw, real=reals[wire]):
            threads.append(threading.current_thread())
            return real(raw)
        wire.parse = parse
    try:
        yield threads
    finally:
        for wire in wires:
            del wire.parse


async def test_a_gateway_body_over_the_cap_is_refused_before_it_is_read(server, operator):
    _, token = await register(operator, "big-body")
    with parses_of(OPENAI, ANTHROPIC) as parsed:
        # Declared over the cap, nothing sent: the answer comes without waiting for the body.
        status, body = await raw_post(server, "/v1/chat/completions",
                                      {"authorization": f"Bearer {token}", "content-type": "application/json",
                                       "content-length": str(CAP + 1)})
        assert status == 413
        assert body["error"]["code"] == "request_too_large" and body["error"]["type"] == "invalid_request_error"
        # Sent in chunks with no length: refused once it passes the cap, in Anthropic's shape.
        async def chunks():
            piece = b" " * (1024 * 1024)
            for _ in range(CAP // len(piece) + 2):
                yield piece
        async with httpx.AsyncClient(base_url=server.base, timeout=60) as http:
            answer = await http.post("/v1/messages", content=chunks(),
                                     headers={"x-api-key": token, "anthropic-version": "2023-06-01"})
        assert answer.status_code == 413
        assert answer.json() == {"type": "error", "error": {"type": "request_too_large",
                                                            "message": f"the request body is over {CAP} bytes"}}
    assert not parsed, "a body over the cap was decoded"


@pytest.mark.parametrize("size", [300 * 1024])
async def test_a_large_gateway_body_is_decoded_off_the_event_loop(server, operator, size):
    _, token = await register(operator, "large-body")
    text = "word " * (size // 5)
    with parses_of(OPENAI) as parsed:
        async with httpx.AsyncClient(base_url=server.base, timeout=60) as http:
            await http.post("/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                            json={"model": "m", "messages": [{"role": "user", "content": text}]})
    assert parsed and parsed[0] is not threading.main_thread()

"""The fleet the fault tests run: agents over HTTP and subscribers over WebSocket, each
spreading its calls over every worker and recording every answer it got (app/audit/
history_check.py judges them against the log afterwards)."""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import time
import uuid
from dataclasses import dataclass, field

import httpx
import websockets

from app.audit.history_check import FAIL, INFO, OK, Op

from .cluster import FaultCluster

TURN = "id status lane"
REQUEST = (f"mutation {{ requestTurn(input: {{estimatedTokens: 10, maxOutputTokens: 10, waitSeconds: 20}}) "
           f"{{ {TURN} }} }}")
COMPLETE = (f"mutation($id: ID!) {{ completeTurn(input: {{turnId: $id, outcome: OK, promptTokens: 10, "
            f"completionTokens: 10}}) {{ {TURN} }} }}")
CANCEL = f"mutation($id: ID!) {{ cancelTurn(turnId: $id) {{ {TURN} }} }}"
RETRIABLE = {"UNAVAILABLE"}


class Retriable(Exception):
    pass


async def gql(http: httpx.AsyncClient, url: str, token: str, query: str, **variables) -> dict:
    """One GraphQL call. Returns data; raises Retriable for an outcome the client cannot
    know (cut connection, timeout, UNAVAILABLE), RuntimeError with the code otherwise."""
    try:
        response = await http.post(url, json={"query": query, "variables": variables},
                                   headers={"Authorization": f"Bearer {token}"})
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise Retriable(repr(exc)) from None
    if body.get("errors"):
        code = (body["errors"][0].get("extensions") or {}).get("code")
        if code in RETRIABLE:
            raise Retriable(code)
        raise RuntimeError(f"{code}: {body['errors'][0].get('message')}")
    return body["data"]


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    clock = staticmethod(time.monotonic)

    def granted(self) -> int:
        return sum(1 for o in self.ops if o.kind == "request" and o.outcome == OK and o.status == "GRANTED")

    def completed(self) -> int:
        return sum(1 for o in self.ops if o.kind == "complete" and o.outcome == OK)


async def _call(history: History, client: str, kind: str, http, url, token, query, **variables):
    invoked = history.clock()
    try:
        data = await gql(http, url, token, query, **variables)
    except Retriable as exc:
        history.ops.append(Op(client, kind, invoked, history.clock(), INFO, variables.get("id"), error=str(exc)))
        return None
    except RuntimeError as exc:
        history.ops.append(Op(client, kind, invoked, history.clock(), FAIL, variables.get("id"), error=str(exc)))
        return None
    turn = next(iter(data.values()))
    history.ops.append(Op(client, kind, invoked, history.clock(), OK, turn["id"], turn["status"], turn["lane"]))
    return turn


async def agent_loop(cluster: FaultCluster, history: History, name: str, token: str,
                     stop: asyncio.Event) -> None:
    """request (waiting for the grant), then complete, round-robin over the live workers;
    a turn not granted in time is cancelled, so it holds no lane for its lease."""
    async with httpx.AsyncClient(timeout=40) as http:
        for n in itertools.count():
            if stop.is_set():
                return
            workers = cluster.alive()
            worker = workers[n % len(workers)]
            turn = await _call(history, name, "request", http, worker.url, token, REQUEST)
            if turn is None:
                await asyncio.sleep(0.05)  # a retry backoff, not synchronisation
                continue
            worker = workers[(n + 1) % len(workers)]
            kind, query = ("complete", COMPLETE) if turn["status"] == "GRANTED" else ("cancel", CANCEL)
            for _attempt in range(100):   # a retried completion of the same turn
                done = await _call(history, name, kind, http, worker.url, token, query, id=turn["id"])
                last = history.ops[-1]
                if done is not None or last.outcome == FAIL:
                    break
                worker = cluster.alive()[_attempt % len(cluster.alive())]
                await asyncio.sleep(0.05)


class ResumingSubscriber:
    """Follows `events(after:, types:)`; whenever its connection ends (cut, worker killed,
    database restart) it subscribes again, on the next worker, after the last position it
    received. `positions` is everything it was delivered, in arrival order."""

    def __init__(self, cluster: FaultCluster, name: str, types: list[str] | None, after: int):
        self.cluster, self.name, self.types, self.after = cluster, name, types, after
        self.positions: list[int] = []
        self.reconnects = 0
        self.ws = None

    @property
    def last(self) -> int:
        return self.positions[-1] if self.positions else self.after

    async def run(self, stop: asyncio.Event) -> None:
        for n in itertools.count():
            if stop.is_set():
                return
            workers = self.cluster.alive()
            try:
                await self._follow(workers[n % len(workers)], stop)
            except (TimeoutError, OSError, websockets.WebSocketException, RuntimeError):
                pass
            self.reconnects += 1
            await asyncio.sleep(0.05)  # a reconnect backoff

    async def _follow(self, worker, stop: asyncio.Event) -> None:
        query = "subscription($after: Int, $types: [String!]) { events(after: $after, types: $types) { position } }"
        async with websockets.connect(worker.ws, subprotocols=["graphql-transport-ws"], open_timeout=5,
                                      ping_interval=None, proxy=None) as ws:
            self.ws = ws
            await ws.send(json.dumps({"type": "connection_init",
                                      "payload": {"authorization": "Bearer op_fault_token_2d8e4b6a9c"}}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connection_ack"
            await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {
                "query": query, "variables": {"after": self.last, "types": self.types}}}))
            while not stop.is_set():
                try:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 1))
                except TimeoutError:
                    continue
                if message["type"] == "ping":
                    await ws.send(json.dumps({"type": "pong"}))
                elif message["type"] == "next":
                    if message["payload"].get("errors"):
                        raise RuntimeError(message["payload"]["errors"])
                    self.positions.append(message["payload"]["data"]["events"]["position"])
                else:
                    raise RuntimeError(message)

    def cut(self) -> bool:
        """Cut the connection under the client, mid-stream (no close handshake)."""
        ws = self.ws
        if ws is None or ws.transport is None or ws.transport.is_closing():
            return False
        ws.transport.abort()
        return True


class SlowSubscriber:
    """Subscribes to every event from position 0, `operations` times over one connection
    with a tiny receive window (so the server's socket buffers fill in a short run), and
    then reads nothing at all until `drain` is called."""

    def __init__(self, worker, operations: int = 20):
        self.worker, self.operations = worker, operations

    async def start(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", self.worker.port))
        # max_queue=1: the client library stops reading its socket after one message.
        self.ws = await websockets.connect(self.worker.ws, sock=sock, subprotocols=["graphql-transport-ws"],
                                           ping_interval=None, max_queue=1, compression=None, proxy=None)
        await self.ws.send(json.dumps({"type": "connection_init",
                                       "payload": {"authorization": "Bearer op_fault_token_2d8e4b6a9c"}}))
        assert json.loads(await asyncio.wait_for(self.ws.recv(), 5))["type"] == "connection_ack"
        for _ in range(self.operations):
            await self.ws.send(json.dumps({"id": str(uuid.uuid4()), "type": "subscribe", "payload": {
                "query": "subscription { events(after: 0) { position type data } }"}}))

    async def drain(self, timeout: float = 60) -> tuple[dict[str, list[int]], int | None, str]:
        """Read everything the server sent: each operation's positions, then how the
        connection ended."""
        positions: dict[str, list[int]] = {}
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                message = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
                if message["type"] == "next":
                    positions.setdefault(message["id"], []).append(
                        message["payload"]["data"]["events"]["position"])
        return positions, self.ws.close_code, self.ws.close_reason or ""

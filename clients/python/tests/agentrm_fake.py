"""An in-memory stand-in for the AgentRM server's side of the client's contract.

Queries and mutations arrive through httpx.MockTransport (`handle`), the `turn`
subscription over a real websockets server on 127.0.0.1 speaking graphql-transport-ws
(`serve_ws`). Lanes are granted first come, first served; completing or cancelling a
turn frees its lane for the next queued one, and every change of a watched turn is
pushed to its subscribers. The shapes follow schema/agentrm.graphql of the server.

The HTTP side may run on another thread's event loop (SyncAgentRM's), so the state sits
behind a lock and subscribers are woken with call_soon_threadsafe.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

AGENT_TOKEN = "agent-secret"
OPERATOR_TOKEN = "operator-secret"
FIRST_FIELD = re.compile(r"\{\s*(\w+)")


class GraphQLFailure(Exception):
    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


@dataclass
class Watcher:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[dict[str, Any]]


@dataclass
class FakeAgentRM:
    lanes: int = 1
    lease_seconds: float = 30.0
    stall_timeout_seconds: float | None = 6.0
    base: str = ""                               # http://127.0.0.1:<port of the websockets server>
    holders: list[str | None] = field(default_factory=list)
    turns: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)     # requestTurn inputs
    heartbeats: list[tuple[str, float]] = field(default_factory=list)
    completions: dict[str, dict[str, Any]] = field(default_factory=dict)  # CompleteTurnInput by turn
    cancels: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    agents: dict[str, str] = field(default_factory=lambda: {AGENT_TOKEN: "agent-1"})
    connection_payloads: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, GraphQLFailure] = field(default_factory=dict)  # operation field -> its next error
    delays: dict[str, float] = field(default_factory=dict)  # operation field -> seconds before it is served
    served: list[str] = field(default_factory=list)         # operation fields, in the order they took effect
    watchers: dict[str, list[Watcher]] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.holders = [None] * self.lanes

    # -- the test's handles ---------------------------------------------------------------
    def fail_next(self, operation: str, message: str, code: str) -> None:
        """The next call of `operation` (a root field, e.g. completeTurn) answers this error."""
        self.failures[operation] = GraphQLFailure(message, code)

    def status(self, turn_id: str) -> str:
        return str(self.turns[turn_id]["status"])

    def end(self, turn_id: str, status: str, reason: str) -> None:
        """The server ends a turn on its own (REAPED, or CANCELLED by quarantine)."""
        with self.lock:
            self._finish(turn_id, status, reason=reason)

    # -- state ----------------------------------------------------------------------------
    def _doc(self, turn_id: str) -> dict[str, Any]:
        return dict(self.turns[turn_id])

    def _notify(self, turn_id: str) -> None:
        doc = self._doc(turn_id)
        for watcher in self.watchers.get(turn_id, []):
            watcher.loop.call_soon_threadsafe(watcher.queue.put_nowait, dict(doc))

    def _grant(self, turn_id: str, lane: int) -> None:
        self.holders[lane] = turn_id
        self.turns[turn_id].update(status="GRANTED", lane=lane, level=0, grantedAt="2026-01-01T00:00:00+00:00",
                                   leaseExpiresAt="2026-01-01T00:00:30+00:00")
        self._notify(turn_id)

    def _finish(self, turn_id: str, status: str, outcome: str | None = None, reason: str | None = None) -> None:
        turn = self.turns[turn_id]
        lane = turn["lane"]
        turn.update(status=status, outcome=outcome, reason=reason, finishedAt="2026-01-01T00:00:10+00:00")
        self._notify(turn_id)
        if lane is not None and self.holders[lane] == turn_id:
            self.holders[lane] = None
            queued = [t for t in self.turns.values() if t["status"] == "QUEUED"]
            if queued:
                self._grant(queued[0]["id"], lane)

    def _turn(self, turn_id: str, *allowed: str) -> dict[str, Any]:
        turn = self.turns.get(turn_id)
        if turn is None:
            raise GraphQLFailure(f"no turn {turn_id}", "NOT_FOUND")
        if turn["status"] not in allowed:
            raise GraphQLFailure(f"turn {turn_id} is {turn['status']}", "CONFLICT")
        return turn

    # -- the operations -------------------------------------------------------------------
    def _request_turn(self, i: dict[str, Any]) -> dict[str, Any]:
        assert isinstance(i["estimatedTokens"], int) and isinstance(i["streams"], bool)
        self.requests.append(i)
        turn_id = f"turn-{next(self.ids)}"
        self.turns[turn_id] = {"id": turn_id, "status": "QUEUED", "lane": None, "level": None, "leaseExpiresAt": None,
                               "grantedAt": None, "finishedAt": None, "outcome": None, "reason": None}
        if None in self.holders:
            self._grant(turn_id, self.holders.index(None))
        return self._doc(turn_id)

    def _operate(self, name: str, variables: dict[str, Any], token: str | None) -> Any:
        if name == "registerAgent":
            if token != OPERATOR_TOKEN:
                raise GraphQLFailure("operator only", "FORBIDDEN")
            new = f"token-{variables['i']['name']}"
            self.agents[new] = variables["i"]["name"]
            return {"token": new}
        if token not in self.agents:
            raise GraphQLFailure("unknown token", "UNAUTHENTICATED")
        if name == "requestTurn":
            return self._request_turn(variables["i"])
        if name == "heartbeat":
            self._turn(variables["t"], "GRANTED")
            self.heartbeats.append((variables["t"], time.monotonic()))
            return {"id": variables["t"]}
        if name == "completeTurn":
            i = variables["i"]
            self._turn(i["turnId"], "GRANTED")
            self.completions[i["turnId"]] = i
            self._finish(i["turnId"], "COMPLETED", outcome=i.get("outcome", "OK"))
            return {"id": i["turnId"]}
        if name == "cancelTurn":
            self._turn(variables["t"], "QUEUED", "GRANTED")
            self.cancels.append(variables["t"])
            self._finish(variables["t"], "CANCELLED", reason="cancelled by the agent")
            return {"id": variables["t"]}
        if name == "pools":
            return [{"leaseSeconds": self.lease_seconds, "stallTimeoutSeconds": self.stall_timeout_seconds}]
        if name == "appendContext":
            self.messages.append(variables["i"])
            return {"agentId": self.agents[token], "hotTokens": sum(len(m["content"].split()) for m in self.messages),
                    "warmTokens": 0, "coldTokens": 0, "messages": len(self.messages)}
        if name == "context":
            pinned = [m["content"] for m in self.messages if m["pinned"]]
            items = [{"tier": "hot", "role": m["role"], "content": m["content"], "tokens": len(m["content"].split())}
                     for m in self.messages if not m["pinned"]]
            return {"agentId": self.agents[token], "tokens": sum(i["tokens"] for i in items), "pinned": pinned,
                    "items": items}
        raise GraphQLFailure(f"the fake does not know {name}", "BAD_INPUT")

    async def handle_async(self, request: httpx.Request) -> httpx.Response:
        """As `handle`, after the delay set for the operation (a slow server)."""
        if request.method == "POST" and request.content:
            delay = self.delays.get(self._operation(request), 0.0)
            if delay:
                await asyncio.sleep(delay)
        return self.handle(request)

    @staticmethod
    def _operation(request: httpx.Request) -> str:
        return FIRST_FIELD.search(json.loads(request.content)["query"])[1]  # type: ignore[index]

    def handle(self, request: httpx.Request) -> httpx.Response:
        """POST /graphql, answered as the server does: 200 with data or errors."""
        if request.method != "POST" or str(request.url) != f"{self.base}/graphql":
            return httpx.Response(404, text="not found")
        body = json.loads(request.content)
        name = self._operation(request)
        auth = request.headers.get("authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        with self.lock:
            try:
                failure = self.failures.pop(name, None)
                if failure is not None:
                    raise failure
                data = self._operate(name, body.get("variables") or {}, token)
                self.served.append(name)
            except GraphQLFailure as exc:
                return httpx.Response(200, json={"data": None, "errors": [
                    {"message": str(exc), "path": [name], "extensions": {"code": exc.code}}]})
        return httpx.Response(200, json={"data": {name: data}})

    # -- the turn subscription ------------------------------------------------------------
    async def serve_ws(self, ws: Any) -> None:
        assert ws.subprotocol == "graphql-transport-ws"
        init = json.loads(await ws.recv())
        assert init["type"] == "connection_init"
        self.connection_payloads.append(init.get("payload") or {})
        await ws.send(json.dumps({"type": "ping"}))       # the client must answer it before the ack
        assert json.loads(await ws.recv())["type"] == "pong"
        await ws.send(json.dumps({"type": "connection_ack"}))
        message = json.loads(await ws.recv())
        assert message["type"] == "subscribe"
        sub_id, payload = message["id"], message["payload"]
        assert FIRST_FIELD.search(payload["query"])[1] == "turn"  # type: ignore[index]
        turn_id = payload["variables"]["t"]
        failure = self.failures.pop("turn", None)
        if failure is not None:
            await ws.send(json.dumps({"id": sub_id, "type": "error",
                                      "payload": [{"message": str(failure), "extensions": {"code": failure.code}}]}))
            return
        watcher = Watcher(asyncio.get_running_loop(), asyncio.Queue())
        with self.lock:
            self.watchers.setdefault(turn_id, []).append(watcher)
            first = self._doc(turn_id)
        closed = asyncio.ensure_future(ws.wait_closed())
        try:
            await ws.send(json.dumps({"id": sub_id, "type": "next", "payload": {"data": {"turn": first}}}))
            while True:
                change = asyncio.ensure_future(watcher.queue.get())
                await asyncio.wait({change, closed}, return_when=asyncio.FIRST_COMPLETED)
                if not change.done():           # the client went away
                    change.cancel()
                    return
                doc = change.result()
                await ws.send(json.dumps({"id": sub_id, "type": "next", "payload": {"data": {"turn": doc}}}))
        finally:
            closed.cancel()
            with self.lock:
                self.watchers[turn_id].remove(watcher)

    def watching(self, turn_id: str) -> int:
        with self.lock:
            return len(self.watchers.get(turn_id, []))

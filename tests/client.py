"""One small client for both transports the API speaks: GraphQL over HTTP, and
graphql-transport-ws over a WebSocket (raw protocol, so tests see exactly what goes over
the wire). A third-party client (gql) is exercised separately in its own test."""
from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import websockets


class GraphQLError(Exception):
    def __init__(self, errors: list[dict]):
        super().__init__("; ".join(e.get("message", "?") for e in errors))
        self.errors = errors

    @property
    def code(self) -> str | None:
        return (self.errors[0].get("extensions") or {}).get("code")


class GraphQLClient:
    def __init__(self, server, token: str | None):
        self.server, self.token = server, token
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> GraphQLClient:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.AsyncClient(headers=headers, timeout=60)
        return self

    async def __aexit__(self, *exc) -> None:
        await self._http.aclose()

    async def raw(self, query: str, variables: dict | None = None) -> dict:
        response = await self._http.post(self.server.http, json={"query": query, "variables": variables or {}})
        return response.json()

    async def __call__(self, query: str, **variables: Any) -> dict:
        body = await self.raw(query, variables)
        if body.get("errors"):
            raise GraphQLError(body["errors"])
        return body["data"]

    def subscribe(self, query: str, **variables: Any) -> Subscription:
        return Subscription(self.server.ws, self.token, query, variables)


class Subscription:
    """async with client.subscribe(...) as sub: item = await sub.next()"""

    def __init__(self, url: str, token: str | None, query: str, variables: dict):
        self.url, self.token, self.query, self.variables = url, token, query, variables
        self.id = str(uuid.uuid4())

    async def __aenter__(self) -> Subscription:
        self.ws = await websockets.connect(self.url, subprotocols=["graphql-transport-ws"])
        payload = {"authorization": f"Bearer {self.token}"} if self.token else {}
        await self.ws.send(json.dumps({"type": "connection_init", "payload": payload}))
        ack = json.loads(await asyncio.wait_for(self.ws.recv(), 10))
        assert ack["type"] == "connection_ack", ack
        await self.ws.send(json.dumps({"id": self.id, "type": "subscribe",
                                       "payload": {"query": self.query, "variables": self.variables}}))
        return self

    async def __aexit__(self, *exc) -> None:
        await self.ws.close()

    async def next(self, timeout: float = 15) -> dict:
        """The next `next` payload's data; raises GraphQLError on `error`, StopAsyncIteration on complete."""
        while True:
            message = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
            if message["type"] == "ping":
                await self.ws.send(json.dumps({"type": "pong"}))
                continue
            if message["type"] == "next":
                if message["payload"].get("errors"):
                    raise GraphQLError(message["payload"]["errors"])
                return message["payload"]["data"]
            if message["type"] == "error":
                raise GraphQLError(message["payload"])
            if message["type"] == "complete":
                raise StopAsyncIteration


REGISTER = """mutation($name: String!, $pool: String!, $cls: PriorityClass!, $budget: Int) {
  registerAgent(input: {name: $name, pool: $pool, priorityClass: $cls, contextBudgetTokens: $budget}) {
    token agent { id name pool priorityClass level state } } }"""

TURN_FIELDS = "id agentId status lane level leaseExpiresAt queuedAt grantedAt finishedAt outcome reason"

REQUEST = f"""mutation($est: Int!, $out: Int, $wait: Float!) {{
  requestTurn(input: {{estimatedTokens: $est, maxOutputTokens: $out, waitSeconds: $wait}}) {{ {TURN_FIELDS} }} }}"""

HEARTBEAT = f"mutation($id: ID!) {{ heartbeat(turnId: $id) {{ {TURN_FIELDS} }} }}"

COMPLETE = f"""mutation($id: ID!, $outcome: Outcome!, $p: Int, $c: Int, $retry: Float, $headers: JSON) {{
  completeTurn(input: {{turnId: $id, outcome: $outcome, promptTokens: $p, completionTokens: $c,
                        retryAfterSeconds: $retry, rateLimitHeaders: $headers}}) {{ {TURN_FIELDS} }} }}"""

CANCEL = f"mutation($id: ID!) {{ cancelTurn(turnId: $id) {{ {TURN_FIELDS} }} }}"

CREATE_POOL = """mutation($name: String!, $lanes: Int!, $rpm: Int!, $tpm: Int!, $lease: Float!, $boost: Float,
                            $limiter: RateLimiter) {
  createPool(input: {name: $name, lanes: $lanes, rpm: $rpm, tpm: $tpm, leaseSeconds: $lease, boostSeconds: $boost,
                     limiter: $limiter}) {
    name lanes rpm tpm leaseSeconds } }"""

SCHEDULER = """query($pool: String!) { scheduler(pool: $pool) { pool position
  lanes { index turnId agentId } levels { level queued { turnId agentId } }
  rateLimit { rpm tpm availableRequests availableTokens pausedUntil rateFactor } } }"""


async def register(operator: GraphQLClient, name: str, pool: str = "default", cls: str = "INTERACTIVE",
                   budget: int | None = None) -> tuple[str, str]:
    data = await operator(REGISTER, name=name, pool=pool, cls=cls, budget=budget)
    return data["registerAgent"]["agent"]["id"], data["registerAgent"]["token"]


ADMITTED = """subscription($agent: ID) { events(after: 0, agentId: $agent, types: ["AgentAdmitted"]) {
  position } }"""


async def appended_about(server, after: int, *names: str) -> list:
    """Events after ``after`` whose stream or data names any of ``names``. A test that checks
    a refused request appended nothing uses this, not the log's head: on the shared test
    server other tests' pools append in the background (reaps, learned lane limits)."""
    assert names, "name what the refused requests were about"
    return [e for e in await server.runtime.store.read(after, 10_000)
            if any(n in e.stream or n in json.dumps(e.data) for n in names)]


async def appended_outside_pools(server, after: int) -> list:
    """Events after ``after`` outside the pools' streams, where background work appends."""
    return [e for e in await server.runtime.store.read(after, 10_000) if not e.stream.startswith("pool-")]


async def admitted(operator: GraphQLClient, agent_id: str) -> int:
    """Wait for the pool's scheduler to answer a registration (AgentAdmitted, appended after
    registerAgent returns): a test that counts appended events starts from a quiet log."""
    async with operator.subscribe(ADMITTED, agent=agent_id) as sub:
        # Late in a session the shared server's default pool holds hundreds of agents and
        # other tests' leftovers, and its scheduler answers behind them.
        return (await sub.next(timeout=60))["events"]["position"]


async def start_serve(database_url: str, data_dir, operator_token: str, workers: int = 2
                      ) -> tuple[asyncio.subprocess.Process, int]:
    """`agentrm serve --workers N` as an operator starts it, in a process of its own on a
    free port; returns the process and the port (the caller stops it)."""
    import os
    import socket
    import sys
    from pathlib import Path
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": database_url, "AGENTRM_OPERATOR_TOKEN": operator_token,
           "AGENTRM_DATA_DIR": str(data_dir)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", str(workers), "--no-demo",
        cwd=Path(__file__).resolve().parents[1], env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    return proc, port

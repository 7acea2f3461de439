"""The compiled path for the turn documents (app/api/hot_documents.py) answers exactly as
the general executor does: the same bytes, status and content type, for answers and for
errors, over real HTTP against the real database.

Two servers share the log: the session's (compiled path on) and one that sends every
request through strawberry's executor (compiled path off, no schedulers of its own). A
command with a request id is answered once; the same body sent to the other server is a
retry, answered with the first answer's turn as it stands: both answers describe one
state, so they must be equal byte for byte. Errors change nothing, so the same erroneous
body is simply sent to both."""
from __future__ import annotations

import json
import uuid

import httpx
import pytest_asyncio

from tests.client import CREATE_POOL, register
from tests.conftest import Server

CLIENT_FIELDS = "id status lane level leaseExpiresAt grantedAt finishedAt outcome reason"
ALL_FIELDS = ("__typename id agentId pool status lane level estimatedTokens maxOutputTokens streams requestedAt "
              "queuedAt grantedAt leaseExpiresAt finishedAt outcome reason runId")
REQUEST_VARS = f"mutation($i: TurnRequestInput!) {{ requestTurn(input: $i) {{ {ALL_FIELDS} }} }}"
REQUEST_CLIENT = f"mutation($i: TurnRequestInput!) {{ requestTurn(input: $i) {{ {CLIENT_FIELDS} }} }}"
REQUEST_LITERAL = ('mutation Ask($r: String) { requestTurn(input: {estimatedTokens: 50, maxOutputTokens: 10, '
                   'waitSeconds: 5, requestId: $r}) { id status t: status when: grantedAt } }')
COMPLETE_VARS = f"mutation($i: CompleteTurnInput!) {{ completeTurn(input: $i) {{ {ALL_FIELDS} }} }}"
COMPLETE_LITERAL = ('mutation($id: ID!, $r: String) { completeTurn(input: {turnId: $id, outcome: RATE_LIMITED, '
                    'promptTokens: 50, completionTokens: 10, retryAfterSeconds: 0.5, '
                    'rateLimitHeaders: {remaining: "0"}, requestId: $r}) { status outcome finishedAt } }')
HEARTBEAT = f"mutation($t: ID!, $r: String) {{ heartbeat(turnId: $t, requestId: $r) {{ {ALL_FIELDS} }} }}"
CANCEL = f"mutation($t: ID!, $r: String) {{ cancelTurn(turnId: $t, requestId: $r) {{ {ALL_FIELDS} }} }}"


@pytest_asyncio.fixture
async def general(database_url):
    srv = await Server(database_url, run_schedulers=False, hot_documents=False).start()
    yield srv
    await srv.stop()


class Both:
    """Posts one body to the compiled server and to the general one."""

    def __init__(self, hot, general, http: httpx.AsyncClient):
        self.hot, self.general, self.http = hot, general, http

    @property
    def hot_documents(self):
        from app.api.schema import schema
        return schema.hot_documents

    async def post(self, server, token: str | None, body: bytes, content_type: str = "application/json"):
        headers = {"content-type": content_type}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        response = await self.http.post(server.http, content=body, headers=headers)
        return response.status_code, response.headers.get("content-type"), response.content

    async def learn(self, query: str) -> None:
        """The general executor takes the document once on the compiled server, which then
        has its plan. Sent with an invalid token: valid, so it is learnt, and refused, so
        nothing runs."""
        status, _, answer = await self.post(self.hot, "invalid", body(query))
        assert json.loads(answer)["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        assert self.hot_documents.plans.get(query) is not None

    async def same(self, token: str | None, payload: bytes, *, compiled: bool, content_type="application/json"):
        """The compiled server's answer first (the command runs there), then the general
        one's to the same body; returns the answer (decoded when it is JSON)."""
        before = self.hot_documents.served
        hot = await self.post(self.hot, token, payload, content_type)
        assert self.hot_documents.served - before == (1 if compiled else 0), hot
        await self.general.runtime.projector.catch_up()
        assert hot == await self.post(self.general, token, payload, content_type)
        return json.loads(hot[2]) if hot[1] == "application/json" else hot


def body(query: str, variables: dict | None = None, **extra) -> bytes:
    return json.dumps({"query": query, "variables": variables or {}, **extra}).encode()


async def test_compiled_answers_equal_the_general_executor_byte_for_byte(server, operator, general):
    pool = f"hot_{uuid.uuid4().hex[:8]}"
    await operator(CREATE_POOL, name=pool, lanes=4, rpm=6000, tpm=1_000_000, lease=30.0, boost=None)
    # A name outside ASCII: the general path's JSON escapes it, and so must ours.
    _, token = await register(operator, "agent-ü-" + uuid.uuid4().hex[:4], pool)
    _, other = await register(operator, "other", pool)
    async with httpx.AsyncClient(timeout=60) as http:
        both = Both(server, general, http)
        for query in (REQUEST_VARS, REQUEST_CLIENT, REQUEST_LITERAL, COMPLETE_VARS, COMPLETE_LITERAL,
                      HEARTBEAT, CANCEL):
            await both.learn(query)

        # requestTurn with variables, granted; retried on the general server.
        ask = {"i": {"estimatedTokens": 50, "maxOutputTokens": 10, "waitSeconds": 5, "requestId": "r1",
                     "runId": "run-ü"}}
        turn = (await both.same(token, body(REQUEST_VARS, ask), compiled=True))["data"]["requestTurn"]
        assert turn["status"] == "GRANTED" and turn["__typename"] == "Turn" and turn["runId"] == "run-ü"
        # A heartbeat, then a rate-limited completion with headers, literal arguments.
        await both.same(token, body(HEARTBEAT, {"t": turn["id"], "r": "h1"}), compiled=True)
        done = await both.same(token, body(COMPLETE_LITERAL, {"id": turn["id"], "r": "c1"}), compiled=True)
        assert done["data"]["completeTurn"]["outcome"] == "RATE_LIMITED"

        # A literal request with an operation name, aliases; completed through variables.
        lit = await both.same(token, body(REQUEST_LITERAL, {"r": "r2"}, operationName="Ask"), compiled=True)
        second = lit["data"]["requestTurn"]
        assert second["t"] == second["status"]
        await both.same(token, body(COMPLETE_VARS, {"i": {"turnId": second["id"], "requestId": "c2"}}),
                        compiled=True)
        # The client library's documents: request, then cancel the granted turn.
        third = (await both.same(token, body(REQUEST_CLIENT, {"i": {"estimatedTokens": 5, "requestId": "r3"}}),
                                 compiled=True))["data"]["requestTurn"]
        cancelled = await both.same(token, body(CANCEL, {"t": third["id"], "r": "x3"}), compiled=True)
        assert cancelled["data"]["cancelTurn"]["status"] == "CANCELLED"

        # Errors the service raises, answered after the resolver ran: the executor's own.
        errors = [
            (token, body(COMPLETE_VARS, {"i": {"turnId": turn["id"]}}), "CONFLICT"),          # already done
            (other, body(COMPLETE_VARS, {"i": {"turnId": second["id"]}}), "FORBIDDEN"),       # not its turn
            (token, body(HEARTBEAT, {"t": "no-such-turn"}), "FORBIDDEN"),   # as another agent's: no oracle
            (token, body(REQUEST_VARS, {"i": {"estimatedTokens": -1}}), "BAD_USER_INPUT"),
            (token, body(CANCEL, {"t": third["id"]}), "CONFLICT"),
        ]
        for who, payload, code in errors:
            answer = await both.same(who, payload, compiled=True)
            assert answer["data"] is None and answer["errors"][0]["extensions"]["code"] == code, answer

        # Found before any resolver runs: the compiled path steps aside, the executor answers.
        declined = [
            (token, body(REQUEST_VARS, {"i": {"estimatedTokens": "many"}}), "application/json"),   # coercion
            (token, body(REQUEST_VARS, {}), "application/json"),                                   # missing
            (token, body(REQUEST_LITERAL, {}, operationName="Other"), "application/json"),
            ("not-a-token", body(REQUEST_VARS, ask), "application/json"),
            (None, body(REQUEST_VARS, ask), "application/json"),
            (token, body(REQUEST_VARS, ask), "text/plain"),
        ]
        for who, payload, content_type in declined:
            answer = await both.same(who, payload, compiled=False, content_type=content_type)
            assert answer[0] == 400 if isinstance(answer, tuple) else answer["errors"], answer
        # A body with more than the plan reads (operation extensions): the executor's too.
        retried = await both.same(token, body(REQUEST_VARS, ask, extensions={"x": 1}), compiled=False)
        assert retried["data"]["requestTurn"]["id"] == turn["id"]


APPEND_VARS = ("mutation($c: String!, $r: String!, $p: Boolean!) { appendContext(input: {role: $r, content: $c, "
               "pinned: $p}) { __typename hotTokens warmTokens messages s: messages } }")
APPEND_INPUT = "mutation($i: AppendContextInput!) { appendContext(input: $i) { hotTokens messages } }"


async def test_compiled_context_appends_answer_as_the_general_executor(server, operator, general):
    """appendContext, the document an agent sends for every message: each append goes to
    one of two twin agents, one through each server, so both answers describe the same
    state; an append that is refused changes nothing and gets the executor's own error."""
    pool = f"hotc_{uuid.uuid4().hex[:8]}"
    await operator(CREATE_POOL, name=pool, lanes=4, rpm=6000, tpm=1_000_000, lease=30.0, boost=None)
    _, one = await register(operator, "twin-1", pool)
    _, two = await register(operator, "twin-2", pool)
    async with httpx.AsyncClient(timeout=60) as http:
        both = Both(server, general, http)
        for query in (APPEND_VARS, APPEND_INPUT):
            await both.learn(query)

        async def twins(payload: bytes, compiled: bool = True):
            # Key facts are recorded after an append returns, by each server's own worker:
            # both twins' earlier facts must be in before their stats (warmTokens) compare.
            for each in (server, general):
                await each.runtime.context.run_fact_extraction()
            before = both.hot_documents.served
            hot = await both.post(server, one, payload)
            assert both.hot_documents.served - before == (1 if compiled else 0), hot
            await general.runtime.projector.catch_up()
            assert hot == await both.post(general, two, payload)
            return json.loads(hot[2])

        for n, (role, content) in enumerate([("user", "deploy the ü service to staging"),
                                             ("assistant", "done: port 8443, tenant t-77"),
                                             ("tool", "x" * 300)]):
            answer = await twins(body(APPEND_VARS, {"c": content, "r": role, "p": n == 0}))
            assert answer["data"]["appendContext"]["messages"] == n + 1
        answer = await twins(body(APPEND_INPUT, {"i": {"role": "user", "content": "and now?"}}))
        assert answer["data"]["appendContext"]["messages"] == 4

        # Refused by the service (a NUL in the content, a role it does not know): the same
        # error through both, and nothing appended.
        for bad in ({"c": "a\x00b", "r": "user", "p": False}, {"c": "hi", "r": "robot", "p": False}):
            answer = await twins(body(APPEND_VARS, bad))
            assert answer["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", answer
        # Variables that do not coerce: the general way, before anything runs.
        await twins(body(APPEND_VARS, {"c": 5, "r": "user", "p": "yes"}), compiled=False)
        answer = await twins(body(APPEND_INPUT, {"i": {"role": "user", "content": "counted?"}}))
        assert answer["data"]["appendContext"]["messages"] == 5

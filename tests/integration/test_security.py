"""Credentials, GraphQL limits and retries through the real server and database: invalid
tokens, token rotation and revocation, depth/size/alias caps, the body cap, switched-off
introspection, masked internal errors, and requestId retries that survive a restart."""
from __future__ import annotations

import uuid

import httpx
import pytest

from app.api import app as api_app
from app.api import security
from app.api.schema import build_schema
from app.auth import OPERATOR, Principal, hash_token
from app.bootstrap import postgres_runtime
from app.config import load
from app.domain import events as ev
from app.domain.streams import turn_stream
from tests.client import COMPLETE, REQUEST, GraphQLClient, GraphQLError, register

ME = "{ me { id name } }"


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def code_of(client: GraphQLClient, query: str, **variables) -> str | None:
    with pytest.raises(GraphQLError) as err:
        await client(query, **variables)
    return err.value.code


async def test_an_invalid_token_is_refused_on_every_operation_me_included(server, operator):
    for token in ("agt_unknown", "not a token at all", "Bearer-less"):
        async with GraphQLClient(server, token) as stranger:
            for query in (ME, "{ __typename }", "{ __schema { queryType { name } } }",
                          "mutation { requestTurn(input: {estimatedTokens: 1}) { id } }"):
                assert await code_of(stranger, query) == "UNAUTHENTICATED", (token, query)
    # A malformed header is present and invalid too; none at all is anonymous (me: null).
    async with httpx.AsyncClient(headers={"Authorization": "Basic Zm9vOmJhcg=="}) as http:
        body = (await http.post(server.http, json={"query": ME})).json()
        assert body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    async with GraphQLClient(server, None) as anonymous:
        assert (await anonymous(ME))["me"] is None


async def test_rotation_and_revocation_are_events_and_end_the_old_token(server, operator):
    agent_id, first = await register(operator, unique("rotating"))
    head = await server.runtime.store.head()
    rotated = (await operator("mutation($a: ID!) { rotateAgentToken(agentId: $a) { token agent { id } } }",
                              a=agent_id))["rotateAgentToken"]
    second = rotated["token"]
    assert rotated["agent"]["id"] == agent_id and second != first
    async with GraphQLClient(server, first) as old, GraphQLClient(server, second) as new:
        assert await code_of(old, ME) == "UNAUTHENTICATED"
        assert (await new(ME))["me"]["id"] == agent_id
        # Only the operator rotates or revokes, the agent itself included.
        assert await code_of(new, "mutation($a: ID!) { revokeAgentToken(agentId: $a) { id } }",
                             a=agent_id) == "FORBIDDEN"
        await operator("mutation($a: ID!) { revokeAgentToken(agentId: $a) { id } }", a=agent_id)
        assert await code_of(new, ME) == "UNAUTHENTICATED"
        assert await code_of(operator, "mutation($a: ID!) { revokeAgentToken(agentId: $a) { id } }",
                             a=agent_id) == "CONFLICT"   # nothing left to revoke
    events = await server.runtime.store.read(head, 1000, streams=[f"agent-{agent_id}"])
    assert [e.type for e in events] == [ev.AGENT_TOKEN_ROTATED, ev.AGENT_TOKEN_REVOKED]
    assert events[0].data["token_hash"] == hash_token(second)
    assert second not in str([e.data for e in events]) and events[0].metadata["actor"] == "operator"
    # Rotation brings a revoked agent back, with yet another token.
    third = (await operator("mutation($a: ID!) { rotateAgentToken(agentId: $a) { token } }",
                            a=agent_id))["rotateAgentToken"]["token"]
    async with GraphQLClient(server, third) as again:
        assert (await again(ME))["me"]["id"] == agent_id


async def test_documents_too_deep_too_long_or_too_aliased_are_refused(server, operator, monkeypatch):
    deep = "{ scheduler { levels { queued { turnId } } } }"       # depth 3, our deepest honest query
    assert (await operator(deep))["scheduler"]["levels"] is not None
    # No field of today's schema nests past the cap, so the cap is lowered to test it.
    monkeypatch.setattr(security, "MAX_DEPTH", 2)   # this one counts 3 (the root field is 0)
    too_deep = await operator.raw(deep + " ")   # another document: validations are cached per document
    monkeypatch.undo()
    long = "{ " + " ".join(["__typename"] * 2_500) + " }"
    aliased = "{ " + " ".join(f"a{i}: __typename" for i in range(30)) + " }"
    for body, code in ((too_deep, "GRAPHQL_VALIDATION_FAILED"),
                       (await operator.raw(aliased), "GRAPHQL_VALIDATION_FAILED"),
                       (await operator.raw(long), "GRAPHQL_PARSE_FAILED")):   # the parser counts tokens
        assert body.get("data") is None and len(body["errors"]) == 1, body
        assert body["errors"][0]["extensions"]["code"] == code, body
        assert "Traceback" not in str(body)
    assert "exceeds maximum operation depth" in too_deep["errors"][0]["message"]


async def test_every_error_of_a_bad_document_has_a_code_over_http_and_websocket(server, operator, caplog):
    """Not GraphQL, not fitting the schema, variables not fitting their types: each answer
    names its kind in extensions.code, with no trace, nothing logged as a failure, and
    nothing appended."""
    head = await server.runtime.store.head()
    cases = [("{ me { id ", {}, "GRAPHQL_PARSE_FAILED"),          # short: the parser cache's path
             ("{ me { id " + " " * 5_000, {}, "GRAPHQL_PARSE_FAILED"),   # long: strawberry parses it
             ("mutation { requestTurn(input: {estimatedTokens: 1} { id } }", {}, "GRAPHQL_PARSE_FAILED"),
             ("{ noSuchField }", {}, "GRAPHQL_VALIDATION_FAILED"),
             ("mutation { requestTurn(input: {estimatedTokens: \"many\"}) { id } }", {}, "GRAPHQL_VALIDATION_FAILED"),
             ("mutation($e: Int!) { requestTurn(input: {estimatedTokens: $e}) { id } }", {"e": "many"},
              "BAD_USER_INPUT"),
             ("mutation($e: Int!) { requestTurn(input: {estimatedTokens: $e}) { id } }", {}, "BAD_USER_INPUT")]
    agent_id, token = await register(operator, unique("sloppy"))
    async with GraphQLClient(server, token) as agent:
        for query, variables, code in cases:
            body = await agent.raw(query, variables)
            assert body.get("data") is None and [e["extensions"]["code"] for e in body["errors"]] == [code], \
                (query, body)
            assert "Traceback" not in str(body) and "File " not in str(body)
            async with agent.subscribe(query, **variables) as sub:
                with pytest.raises(GraphQLError) as err:
                    await sub.next()
                assert [e["extensions"]["code"] for e in err.value.errors] == [code], (query, err.value.errors)
        async with agent.subscribe("subscription { turn(turnId: ") as sub:
            with pytest.raises(GraphQLError) as err:
                await sub.next()
            assert err.value.code == "GRAPHQL_PARSE_FAILED"
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert [e.type for e in await server.runtime.store.read(head, 100) if not e.stream.startswith("pool-")] \
        == [ev.AGENT_REGISTERED]


async def test_a_body_over_the_cap_is_refused_before_it_is_read_whole(server, operator, monkeypatch):
    monkeypatch.setattr(api_app, "MAX_BODY_BYTES", 10_000)
    big = {"query": "mutation($c: String!) { appendContext(input: {role: \"user\", content: $c}) { messages } }",
           "variables": {"c": "x" * 20_000}}
    head = await server.runtime.store.head()
    async with httpx.AsyncClient(headers={"Authorization": "Bearer op_test_token_7f3a9c1e5b"}) as http:
        declared = await http.post(server.http, json=big)

        async def chunks():   # no Content-Length: the cap applies as the body streams in
            for _ in range(30):
                yield b" " * 1_000
        streamed = await http.post(server.http, content=chunks(), headers={"content-type": "application/json"})
        small = await http.post(server.http, json={"query": "{ __typename }"})
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["errors"][0]["extensions"]["code"] == "LIMIT_EXCEEDED"
    assert small.json() == {"data": {"__typename": "Query"}}
    assert [e for e in await server.runtime.store.read(head, 100) if not e.stream.startswith("pool-")] == []


def test_introspection_can_be_switched_off(monkeypatch):
    query = "{ __schema { queryType { name } } }"
    assert build_schema().execute_sync(query, context_value={}).data == {"__schema": {"queryType": {"name": "Query"}}}
    closed = build_schema(introspection=False).execute_sync(query, context_value={})
    assert closed.data is None and "introspection" in closed.errors[0].message.lower()
    assert build_schema(introspection=False).execute_sync("{ __typename }", context_value={}).data \
        == {"__typename": "Query"}
    monkeypatch.setenv("AGENTRM_INTROSPECTION", "0")
    assert load().introspection is False
    monkeypatch.setenv("AGENTRM_INTROSPECTION", "1")
    assert load().introspection is True


async def test_an_unexpected_failure_shows_no_detail_to_the_client(server, operator, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("connection string postgres://secret@db/agentrm in /srv/app/service.py")
    monkeypatch.setattr(server.runtime.service, "list_agents", broken)
    body = await operator.raw("{ agents { id } }")
    [error] = body["errors"]
    assert error["message"] == "internal error" and error["extensions"]["code"] == "INTERNAL"
    assert "secret" not in str(body) and "Traceback" not in str(body) and "service.py" not in str(body)


async def test_request_ids_are_answered_from_the_log_after_a_restart(server, operator):
    agent_id, token = await register(operator, unique("retrier"))
    async with GraphQLClient(server, token) as agent:
        retried = REQUEST.replace("waitSeconds: $wait}", "waitSeconds: $wait, requestId: $rid}") \
                         .replace("$wait: Float!)", "$wait: Float!, $rid: String)")
        first = (await agent(retried, est=10, out=10, wait=5, rid="r-1"))["requestTurn"]
        again = (await agent(retried, est=10, out=10, wait=5, rid="r-1"))["requestTurn"]
        assert again["id"] == first["id"]
        completing = COMPLETE.replace("rateLimitHeaders: $headers}", "rateLimitHeaders: $headers, requestId: $rid}") \
                             .replace("$headers: JSON)", "$headers: JSON, $rid: String)")
        done = (await agent(completing, id=first["id"], outcome="OK", p=5, c=5, rid="c-1"))["completeTurn"]
    head = await server.runtime.store.head()
    # The finished turn's document persisted: a process that starts now loads only open
    # turns, so the retry must read the ended turn back (the path a restart takes).
    await server.runtime.projector.persist()
    # A second process on the same database, folded from the log (no state carried over).
    other = await postgres_runtime(server.url, run_schedulers=False)
    try:
        me = Principal("agent", agent_id)
        assert (await other.service.request_turn(me, 10, 10, request_id="r-1"))["turn_id"] == first["id"]
        replayed = await other.service.complete_turn(me, first["id"], ev.OK, 5, 5, request_id="c-1")
        assert (replayed["status"], replayed["finished_at"] is not None) == (done["status"], True)
        # Nothing appended by either retry (a pool's timers may append decisions meanwhile).
        assert [e for e in await other.store.read(head, 1000) if not e.stream.startswith("pool-")] == []
        inputs = [e.type for e in await other.store.read(0, 100, streams=[turn_stream(first["id"])])]
        assert inputs == [ev.TURN_REQUESTED, ev.COMPLETION_REPORTED]
        assert agent_id in [a["agent_id"] for a in other.service.list_agents(OPERATOR)]
    finally:
        await other.stop()

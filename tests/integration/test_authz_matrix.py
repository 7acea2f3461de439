"""The authorization matrix: every query, mutation and subscription of the schema against
every role (no token, an invalid token, another agent, the agent itself, the operator),
over real HTTP and WebSocket. The operations are read from the schema, so a new field
fails `test_every_operation_of_the_schema_has_its_row` until its row says who may use it.

Each row aims at agent A's resources (A's id, A's granted turn, A's context, A's pool).
"other" is agent B, in another pool. Outcomes: "ok" (no error), "null" (no error, data
null), or the error code. A refused command appends nothing but pool decisions (timers)."""
from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import dataclass

import pytest

from app.api.schema import schema
from tests.client import GraphQLClient, GraphQLError, register

ROLES = ("none", "invalid", "other", "own", "operator")
U, F = "UNAUTHENTICATED", "FORBIDDEN"
OPERATOR_ONLY = {"none": U, "invalid": U, "other": F, "own": F, "operator": "ok"}
SELF_OR_OPERATOR = {"none": U, "invalid": U, "other": F, "own": "ok", "operator": "ok"}
AGENT_ITSELF = {"none": U, "invalid": U, "other": F, "own": "ok", "operator": F}
ANY_AGENT_FOR_ITSELF = {"none": U, "invalid": U, "other": "ok", "own": "ok", "operator": F}
AUTHENTICATED = {"none": U, "invalid": U, "other": "ok", "own": "ok", "operator": "ok"}

TURN = "id agentId status"
AGENT = "id name pool state"


@dataclass
class Row:
    document: str
    variables: object          # ctx -> dict
    expect: dict
    needs_lease: bool = False  # the row aims at A's resource lease (made only where needed: it costs)


QUERIES = {
    "whatIf": Row("query($pool: String!) { whatIf(pool: $pool) { __typename } }",
                  lambda c: {"pool": c.pool}, OPERATOR_ONLY),
    "explainTurn": Row("query($id: ID!) { explainTurn(turnId: $id) }", lambda c: {"id": c.turn}, OPERATOR_ONLY),
    "context": Row("query($a: ID) { context(budgetTokens: 500, agentId: $a) { agentId tokens } }",
                   lambda c: {"a": c.agent}, SELF_OR_OPERATOR),
    "contextAt": Row("query($a: ID, $p: Int!) { contextAt(position: $p, budgetTokens: 500, agentId: $a) { agentId } }",
                     lambda c: {"a": c.agent, "p": c.position}, SELF_OR_OPERATOR),
    "contextStats": Row("query($a: ID) { contextStats(agentId: $a) { agentId messages } }",
                        lambda c: {"a": c.agent}, SELF_OR_OPERATOR),
    "me": Row(f"{{ me {{ {AGENT} }} }}", lambda c: {},
              {"none": "null", "invalid": U, "other": "ok", "own": "ok", "operator": "null"}),
    "agent": Row(f"query($id: ID!) {{ agent(id: $id) {{ {AGENT} }} }}", lambda c: {"id": c.agent}, SELF_OR_OPERATOR),
    "agents": Row(f"{{ agents {{ {AGENT} }} }}", lambda c: {}, OPERATOR_ONLY),
    "pools": Row("{ pools { name } }", lambda c: {}, AUTHENTICATED),
    "turn": Row(f"query($id: ID!) {{ turn(id: $id) {{ {TURN} }} }}", lambda c: {"id": c.turn}, SELF_OR_OPERATOR),
    "scheduler": Row("query($pool: String!) { scheduler(pool: $pool) { pool } }",
                     lambda c: {"pool": c.pool}, SELF_OR_OPERATOR),
    "schedulerAt": Row("query($pool: String!, $p: Int!) { schedulerAt(position: $p, pool: $pool) { pool } }",
                       lambda c: {"pool": c.pool, "p": c.position}, SELF_OR_OPERATOR),
    "events": Row("query($a: ID) { events(after: 0, limit: 5, agentId: $a) { position } }",
                  lambda c: {"a": c.agent}, OPERATOR_ONLY),
    "replayCheck": Row("query($pool: String) { replayCheck(pool: $pool) { matches } }",
                       lambda c: {"pool": c.pool}, OPERATOR_ONLY),
    # The console's operator views.
    "logHead": Row("{ logHead }", lambda c: {}, OPERATOR_ONLY),
    "agentActivity": Row("query($pool: String) { agentActivity(pool: $pool) { __typename } }",
                         lambda c: {"pool": c.pool}, OPERATOR_ONLY),
    "agentTurns": Row("query($a: ID!) { agentTurns(agentId: $a) { id } }", lambda c: {"a": c.agent}, OPERATOR_ONLY),
    "contextTiers": Row("query($a: ID!) { contextTiers(agentId: $a) { __typename } }",
                        lambda c: {"a": c.agent}, OPERATOR_ONLY),
    "verify": Row("query($pool: String) { verify(pool: $pool) { __typename } }",
                  lambda c: {"pool": c.pool}, OPERATOR_ONLY),
    # Resources. Agents contend for them, so every agent sees which exist (the names and
    # capacities asked here; holders are visible by design: a waiter may ask whom it waits on).
    "resources": Row("{ resources { name capacity } }", lambda c: {}, AUTHENTICATED),
    "resourceLease": Row("query($id: ID!) { resourceLease(id: $id) { id status } }",
                         lambda c: {"id": c.lease}, SELF_OR_OPERATOR),
    "accessGrants": Row("query($a: ID) { accessGrants(agentId: $a) { id } }", lambda c: {"a": c.agent},
                        SELF_OR_OPERATOR),
}

MUTATIONS = {
    "appendContext": Row("mutation($a: ID) { appendContext(input: {role: \"user\", content: \"hi\", agentId: $a}) "
                         "{ agentId } }", lambda c: {"a": c.agent}, SELF_OR_OPERATOR),
    "appendContextMessages": Row("mutation($a: ID) { appendContextMessages(agentId: $a, messages: "
                                 "[{role: \"user\", content: \"hi\"}]) { agentId } }",
                                 lambda c: {"a": c.agent}, SELF_OR_OPERATOR),
    "compactContext": Row("mutation($a: ID) { compactContext(agentId: $a) { agentId } }",
                          lambda c: {"a": c.agent}, SELF_OR_OPERATOR),
    "createPool": Row("mutation($n: String!) { createPool(input: {name: $n, lanes: 1, rpm: 60, tpm: 1000, "
                      "leaseSeconds: 30}) { name } }", lambda c: {"n": f"mx_{uuid.uuid4().hex[:8]}"}, OPERATOR_ONLY),
    "registerAgent": Row("mutation($pool: String!) { registerAgent(input: {name: \"x\", pool: $pool}) { token } }",
                         lambda c: {"pool": c.pool}, OPERATOR_ONLY),
    "rotateAgentToken": Row("mutation($a: ID!) { rotateAgentToken(agentId: $a) { token } }",
                            lambda c: {"a": c.agent}, OPERATOR_ONLY),
    "revokeAgentToken": Row("mutation($a: ID!) { revokeAgentToken(agentId: $a) { id } }",
                            lambda c: {"a": c.agent}, OPERATOR_ONLY),
    "releaseAgent": Row("mutation($a: ID!) { releaseAgent(agentId: $a) { id } }", lambda c: {"a": c.agent},
                        {**OPERATOR_ONLY, "operator": "CONFLICT"}),   # allowed; A is not quarantined
    "requestTurn": Row(f"mutation {{ requestTurn(input: {{estimatedTokens: 5}}) {{ {TURN} }} }}",
                       lambda c: {}, ANY_AGENT_FOR_ITSELF),
    "heartbeat": Row(f"mutation($id: ID!) {{ heartbeat(turnId: $id) {{ {TURN} }} }}",
                     lambda c: {"id": c.turn}, AGENT_ITSELF),
    "completeTurn": Row(f"mutation($id: ID!) {{ completeTurn(input: {{turnId: $id, outcome: OK}}) {{ {TURN} }} }}",
                        lambda c: {"id": c.turn}, AGENT_ITSELF),
    "cancelTurn": Row(f"mutation($id: ID!) {{ cancelTurn(turnId: $id) {{ {TURN} }} }}",
                      lambda c: {"id": c.turn}, SELF_OR_OPERATOR),
    "hibernateAgent": Row("mutation($a: ID!) { hibernateAgent(agentId: $a) { id } }",
                          lambda c: {"a": c.agent}, SELF_OR_OPERATOR),
    "wakeAgent": Row("mutation($a: ID!) { wakeAgent(agentId: $a) { id } }", lambda c: {"a": c.agent},
                     SELF_OR_OPERATOR),
    "defineResource": Row("mutation($n: String!) { defineResource(input: {name: $n, capacity: 2}) { name } }",
                          lambda c: {"n": f"tool:mx_{uuid.uuid4().hex[:8]}"}, OPERATOR_ONLY),
    "acquireResource": Row("mutation($n: String!) { acquireResource(input: {name: $n, mode: SHARED}) { id status } }",
                           lambda c: {"n": c.spare}, ANY_AGENT_FOR_ITSELF, needs_lease=True),
    "heartbeatResource": Row("mutation($id: ID!) { heartbeatResource(leaseId: $id) { id } }",
                             lambda c: {"id": c.lease}, AGENT_ITSELF, needs_lease=True),
    "releaseResource": Row("mutation($id: ID!) { releaseResource(leaseId: $id) { id } }",
                           lambda c: {"id": c.lease}, SELF_OR_OPERATOR, needs_lease=True),
    # A grant would switch default deny on for the whole session's server
    # (docs/guides/resources-and-access.md), so the operator's row is an allowed call with a
    # bad pattern, and a revoke of no grant: the answer shows the operator passed the
    # authorization check and nothing else did.
    "grantAccess": Row("mutation($a: ID!) { grantAccess(input: {agentId: $a, pattern: \" \"}) { id } }",
                       lambda c: {"a": c.agent}, {**OPERATOR_ONLY, "operator": "BAD_USER_INPUT"}),
    "revokeAccess": Row("mutation { revokeAccess(grantId: \"no-such-grant\") { id } }", lambda c: {},
                        {**OPERATOR_ONLY, "operator": "NOT_FOUND"}),
}

SUBSCRIPTIONS = {
    "events": Row("subscription($a: ID) { events(after: 0, agentId: $a) { position data } }",
                  lambda c: {"a": c.agent}, SELF_OR_OPERATOR),
    "turn": Row(f"subscription($id: ID!) {{ turn(turnId: $id) {{ {TURN} }} }}", lambda c: {"id": c.turn},
                SELF_OR_OPERATOR),
}


def schema_fields(kind: str) -> set[str]:
    root = {"query": schema._schema.query_type, "mutation": schema._schema.mutation_type,
            "subscription": schema._schema.subscription_type}[kind]
    return set(root.fields)


@pytest.mark.parametrize("kind, rows", [("query", QUERIES), ("mutation", MUTATIONS),
                                        ("subscription", SUBSCRIPTIONS)])
def test_every_operation_of_the_schema_has_its_row(kind, rows):
    missing = schema_fields(kind) - set(rows)
    assert not missing, f"{kind} fields with no row in the authorization matrix: {sorted(missing)}"
    assert set(rows) <= schema_fields(kind)
    for row in rows.values():
        assert set(row.expect) == set(ROLES)


@dataclass
class Ctx:
    pool: str
    agent: str
    turn: str
    position: int
    tokens: dict[str, str | None]
    other_agent: str
    other_pool: str
    resource: str | None = None   # held EXCLUSIVE by A, through `lease`
    lease: str | None = None
    spare: str | None = None      # defined, held by nobody


async def make_pools(operator) -> tuple[str, str]:
    pools = (f"mx_{uuid.uuid4().hex[:8]}", f"mx_{uuid.uuid4().hex[:8]}")
    # Lanes enough for every A of a test to hold one; a lease and a boost period longer than
    # the session, so that these pools' timers append nothing while later tests count events.
    for name in pools:
        await operator("mutation($n: String!) { createPool(input: {name: $n, lanes: 100, rpm: 60000, "
                       "tpm: 1000000, leaseSeconds: 3600, boostSeconds: 86400}) { name } }", n=name)
    return pools


async def make_ctx(server, operator, pools: tuple[str, str] | None = None, *, context: bool = True,
                   lease: bool = False) -> Ctx:
    """Agent A (with a granted turn and, if asked, some context and a held resource) in pool P;
    agent B in pool Q."""
    pool, other_pool = pools or await make_pools(operator)
    a_id, a_token = await register(operator, "a", pool)
    b_id, b_token = await register(operator, "b", other_pool)
    async with GraphQLClient(server, a_token) as a:
        turn = (await a(f"mutation {{ requestTurn(input: {{estimatedTokens: 5, waitSeconds: 10}}) {{ {TURN} }} }}"))
        if context:
            await a("mutation { appendContext(input: {role: \"user\", content: \"remember the blue door\"}) "
                    "{ agentId } }")
        resource = lease_id = spare = None
        if lease:
            # A lease longer than the session: its reaping appends nothing while tests count events.
            resource, spare = f"repo:mx_{uuid.uuid4().hex[:8]}", f"env:mx_{uuid.uuid4().hex[:8]}"
            for name in (resource, spare):
                await operator("mutation($n: String!) { defineResource(input: {name: $n, capacity: 5, "
                               "leaseSeconds: 86400}) { name } }", n=name)
            held = await a("mutation($n: String!) { acquireResource(input: {name: $n}) { id status } }", n=resource)
            assert held["acquireResource"]["status"] == "HELD"
            lease_id = held["acquireResource"]["id"]
    assert turn["requestTurn"]["status"] == "GRANTED"
    return Ctx(pool, a_id, turn["requestTurn"]["id"], await server.runtime.store.head(),
               {"none": None, "invalid": "agt_not-a-real-token", "other": b_token, "own": a_token,
                "operator": "op_test_token_7f3a9c1e5b"}, b_id, other_pool, resource, lease_id, spare)


def outcome(body: dict, field: str) -> str:
    if body.get("errors"):
        return (body["errors"][0].get("extensions") or {}).get("code") or "no code"
    return "null" if (body.get("data") or {}).get(field) is None else "ok"


async def non_pool_events_since(server, head: int) -> list:
    return [e for e in await server.runtime.store.read(head, 1000) if not e.stream.startswith("pool-")]


async def check_other_sees_nothing_of_a(body: dict, ctx: Ctx, where: str, failures: list) -> None:
    text = json.dumps(body)
    for secret in (ctx.agent, ctx.turn, ctx.pool):
        if secret in text:
            failures.append(f"{where}: agent B's answer mentions A's {secret}")


async def test_queries_against_every_role(server, operator):
    ctx, failures = await make_ctx(server, operator, lease=True), []
    for field, row in QUERIES.items():
        for role in ROLES:
            async with GraphQLClient(server, ctx.tokens[role]) as client:
                body = await client.raw(row.document, row.variables(ctx))
            got = outcome(body, field)
            if got != row.expect[role]:
                failures.append(f"query {field} as {role}: expected {row.expect[role]}, got {got}: {body}")
            if role == "other" and got == "ok":
                await check_other_sees_nothing_of_a(body, ctx, f"query {field}", failures)
    assert not failures, "\n".join(failures)


async def test_mutations_against_every_role(server, operator):
    failures, pools = [], await make_pools(operator)
    for field, row in MUTATIONS.items():
        for role in ROLES:
            # Fresh agents: a mutation may use A's turn or token up.
            ctx = await make_ctx(server, operator, pools, context=False, lease=row.needs_lease)
            head = await server.runtime.store.head()
            async with GraphQLClient(server, ctx.tokens[role]) as client:
                body = await client.raw(row.document, row.variables(ctx))
            got = outcome(body, field)
            if got != row.expect[role]:
                failures.append(f"mutation {field} as {role}: expected {row.expect[role]}, got {got}: {body}")
            if got not in ("ok", "null"):
                appended = await non_pool_events_since(server, head)
                if appended:
                    failures.append(f"refused mutation {field} as {role} appended {[e.type for e in appended]}")
            if role == "other" and got == "ok":
                await check_other_sees_nothing_of_a(body, ctx, f"mutation {field}", failures)
            # Free A's lane for the next one: a new pool runs below its configured lanes at
            # first (adaptive lanes: app/domain/concurrency.py), and every row's A holds one
            # for an hour.
            with contextlib.suppress(GraphQLError):
                await operator("mutation($id: ID!) { cancelTurn(turnId: $id) { id } }", id=ctx.turn)
    assert not failures, "\n".join(failures)


async def test_subscriptions_against_every_role(server, operator):
    ctx, failures = await make_ctx(server, operator), []
    for field, row in SUBSCRIPTIONS.items():
        for role in ROLES:
            async with GraphQLClient(server, ctx.tokens[role]) as client:
                async with client.subscribe(row.document, **row.variables(ctx)) as sub:
                    try:
                        data = await sub.next()
                        got = "ok" if data.get(field) is not None else "null"
                    except GraphQLError as err:
                        got = err.code or "no code"
            if got != row.expect[role]:
                failures.append(f"subscription {field} as {role}: expected {row.expect[role]}, got {got}")
    assert not failures, "\n".join(failures)

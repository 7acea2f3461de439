"""The access manager through the real API and the real database, on a server of its own
(a grant switches default deny on for every agent, so it must not leak into the shared
server's other tests): open until the first grant, then default deny; a grant allows its
pattern in its modes; a revocation takes it back; every refusal is an event naming the
rule that refused, and `agentrm audit access` tells the story from the log."""
from __future__ import annotations

import pytest
import pytest_asyncio

from app.domain import resource_events as rev
from app.domain.streams import RESOURCE_DECISIONS_STREAM, access_stream
from app.replay import replay_check
from tests.client import (
    REQUEST,
    GraphQLClient,
    GraphQLError,
    admitted,
    appended_outside_pools,
    register,
)
from tests.conftest import OPERATOR_TOKEN, Server
from tests.integration.test_audit import agentrm
from tests.integration.test_resources import ACQUIRE, DEFINE

GRANT = """mutation($agent: ID!, $pattern: String!, $modes: [ResourceMode!]) {
  grantAccess(input: {agentId: $agent, pattern: $pattern, modes: $modes}) { id agentId pattern modes revoked } }"""
REVOKE = "mutation($id: ID!) { revokeAccess(grantId: $id) { id revoked } }"


@pytest_asyncio.fixture
async def isolated(fresh_database):
    srv = await Server(fresh_database).start()
    try:
        yield srv
        report = await replay_check(srv.runtime.store, srv.runtime.projector)
        assert report.matches, report.differences
    finally:
        await srv.stop()


async def refusals(server, after: int) -> list:
    return await server.runtime.store.read(after, 100, streams=[RESOURCE_DECISIONS_STREAM],
                                           types=[rev.RESOURCE_REFUSED])


async def test_default_deny_grant_revoke_and_every_refusal_recorded(isolated):
    server = isolated
    async with GraphQLClient(server, OPERATOR_TOKEN) as operator:
        for name in ("repo:billing", "env:staging"):
            await operator(DEFINE, name=name, capacity=4, lease=30.0)
        (alice, alice_token), (bob, bob_token) = [await register(operator, n) for n in ("alice", "bob")]
        async with GraphQLClient(server, alice_token) as a, GraphQLClient(server, bob_token) as b:
            # no policy yet: open
            lease = (await a(ACQUIRE, name="repo:billing", mode="EXCLUSIVE", wait=0.0))["acquireResource"]
            assert lease["status"] == "HELD"
            await a("mutation($id: ID!) { releaseResource(leaseId: $id) { status } }", id=lease["id"])

            grant = (await operator(GRANT, agent=alice, pattern="repo:*", modes=["SHARED"]))["grantAccess"]
            assert grant == {"id": grant["id"], "agentId": alice, "pattern": "repo:*", "modes": ["SHARED"],
                             "revoked": False}
            staging = (await operator(GRANT, agent=alice, pattern="env:staging", modes=None))["grantAccess"]
            assert staging["modes"] == ["EXCLUSIVE", "SHARED"]
            shared = (await a(ACQUIRE, name="repo:billing", mode="SHARED", wait=0.0))["acquireResource"]
            assert shared["status"] == "HELD"

            head = await server.runtime.store.head()
            cases = [(a, "repo:billing", "EXCLUSIVE", f"grant:{grant['id']}", "does not allow EXCLUSIVE"),
                     (b, "repo:billing", "SHARED", "default-deny", "default deny"),
                     (b, "env:staging", "EXCLUSIVE", "default-deny", "default deny")]
            for client, name, mode, _rule, words in cases:
                with pytest.raises(GraphQLError) as refused:
                    await client(ACQUIRE, name=name, mode=mode, wait=0.0)
                assert refused.value.code == "FORBIDDEN" and words in str(refused.value)
            recorded = await refusals(server, head)
            assert [(e.data["resource"], e.data["mode"], e.data["reason"], e.data["rule"]) for e in recorded] == \
                [(name, mode, rev.FORBIDDEN, rule) for _c, name, mode, rule, _w in cases]
            assert [e.data["agent_id"] for e in recorded] == [alice, bob, bob]

            await operator(REVOKE, id=grant["id"])
            with pytest.raises(GraphQLError) as refused:
                await a(ACQUIRE, name="repo:billing", mode="SHARED", wait=0.0)
            assert refused.value.code == "FORBIDDEN" and "revoked" in str(refused.value)
            with pytest.raises(GraphQLError) as again:
                await operator(REVOKE, id=grant["id"])
            assert again.value.code == "CONFLICT"

            # pools: open until the first pool grant, then only the granted pools
            assert (await b(REQUEST, est=10, out=10, wait=5))["requestTurn"]["status"] == "GRANTED"
            await operator(GRANT, agent=alice, pattern="pool:default", modes=None)
            head = await server.runtime.store.head()
            with pytest.raises(GraphQLError) as refused:
                await b(REQUEST, est=10, out=10, wait=5)
            assert refused.value.code == "FORBIDDEN" and "default deny" in str(refused.value)
            [pool_refusal] = await server.runtime.store.read(head, 10, types=[rev.ACCESS_REFUSED])
            assert pool_refusal.stream == access_stream(bob)
            assert (pool_refusal.data["target"], pool_refusal.data["rule"]) == ("pool:default", "default-deny")
            turn = (await a(REQUEST, est=10, out=10, wait=5))["requestTurn"]
            assert turn["status"] == "GRANTED"

        # bad input and the wrong caller: clear errors, nothing appended
        await admitted(operator, bob)
        head = await server.runtime.store.head()
        async with GraphQLClient(server, bob_token) as b:
            for client, variables, code in [
                    (b, dict(agent=bob, pattern="*", modes=None), "FORBIDDEN"),
                    (operator, dict(agent=bob, pattern="", modes=None), "BAD_USER_INPUT"),
                    (operator, dict(agent=bob, pattern="repo:*", modes=[]), "BAD_USER_INPUT"),
                    (operator, dict(agent="no-such-agent", pattern="repo:*", modes=None), "NOT_FOUND")]:
                with pytest.raises(GraphQLError) as error:
                    await client(GRANT, **variables)
                assert error.value.code == code
        assert await appended_outside_pools(server, head) == []

    code, out = await agentrm(server.url, "audit", "access", "--agent", alice)
    assert code == 0, out
    assert f"grant {grant['id']}  repo:*  SHARED  (revoked" in out
    assert "env:staging  EXCLUSIVE/SHARED  (live)" in out
    assert "repo:billing EXCLUSIVE: Refused" in out and "does not allow EXCLUSIVE" in out
    assert "repo:billing EXCLUSIVE: Granted -> Released  [RELEASED; rule open]" in out     # before any policy
    assert f"repo:billing SHARED: Granted  [HELD; rule grant:{grant['id']}]" in out
    code, out = await agentrm(server.url, "audit", "access", "--agent", bob)
    assert code == 0 and "pool:default  rule default-deny" in out, out
    code, out = await agentrm(server.url, "audit", "verify")
    assert code == 0 and "all resource invariants hold" in out, out


async def test_a_revocation_the_worker_has_not_folded_yet_still_refuses_the_turn(isolated, monkeypatch):
    """The API's pool check reads this worker's read model, which may not have folded a
    revocation committed a moment ago (on another worker). The pool's scheduler decides the
    request again, in log order, so the request behind the revocation is refused."""
    server = isolated
    async with GraphQLClient(server, OPERATOR_TOKEN) as operator:
        agent_id, token = await register(operator, "late")
        grant = (await operator(GRANT, agent=agent_id, pattern="pool:default", modes=None))["grantAccess"]
        async with GraphQLClient(server, token) as agent:
            first = (await agent(REQUEST, est=10, out=10, wait=5))["requestTurn"]
            assert first["status"] == "GRANTED"
            await operator(REVOKE, id=grant["id"])
            # As if this worker had not folded the revocation: its own check passes the request.
            monkeypatch.setattr(server.runtime.service, "pool_guard", None)
            head = await server.runtime.store.head()
            with pytest.raises(GraphQLError) as refused:
                await agent(REQUEST, est=10, out=10, wait=5)
            assert refused.value.code == "FORBIDDEN" and "was revoked" in str(refused.value), refused.value.errors
    [cancelled] = await server.runtime.store.read(head, 100, types=["TurnCancelled"])
    assert cancelled.stream == "pool-default" and cancelled.data["rule"] == f"grant:{grant['id']}"
    code, out = await agentrm(server.url, "audit", "access", "--agent", agent_id)
    assert code == 0 and f"pool:default  rule grant:{grant['id']}: access refused:" in out, out
    code, out = await agentrm(server.url, "audit", "verify")
    assert code == 0, out

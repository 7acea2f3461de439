"""Threat-model row: `/metrics` (every pool, its limits, queues and traffic), GraphQL
introspection (a map of every field and argument) and GraphiQL (a page whose scripts come
from a CDN, run with the API's origin) were open to anyone without a token. /metrics now
wants the operator's token (AGENTRM_METRICS_PUBLIC=1 opens it), introspection is the
operator's (AGENTRM_INTROSPECTION=0 closes it to everyone), and GraphiQL is served only
with AGENTRM_GRAPHIQL=1."""
from __future__ import annotations

import httpx

from tests.client import GraphQLClient, register
from tests.conftest import OPERATOR_TOKEN
from tests.integration.test_security import code_of, unique

INTROSPECTION = "{ __schema { queryType { name } } }"
TYPE = '{ __type(name: "Agent") { fields { name } } }'


async def test_metrics_want_the_operators_token(server, operator):
    _, token = await register(operator, unique("metrics-reader"))
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
        anonymous = await http.get("/metrics")
        agent = await http.get("/metrics", headers={"authorization": f"Bearer {token}"})
        wrong = await http.get("/metrics", headers={"authorization": "Bearer op_guess_0123456789abcdef"})
        theirs = await http.get("/metrics", headers={"authorization": f"Bearer {OPERATOR_TOKEN}"})
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Bearer")
    assert wrong.status_code == 401
    assert agent.status_code == 403
    for refused in (anonymous, agent, wrong):
        assert "agentrm_" not in refused.text
    assert theirs.status_code == 200 and "agentrm_grants_total" in theirs.text
    assert theirs.headers["content-type"].startswith("text/plain")


async def test_introspection_is_refused_to_agents_and_anonymous_callers(server, operator):
    _, token = await register(operator, unique("introspector"))
    async with GraphQLClient(server, token) as agent, GraphQLClient(server, None) as anonymous:
        for caller in (agent, anonymous):
            for query in (INTROSPECTION, TYPE):
                assert await code_of(caller, query) is not None, query
        # What every client sends still works: __typename is not introspection.
        assert (await agent("{ __typename me { id } }"))["__typename"] == "Query"
    # The operator (the console reads the schema once at login) keeps it.
    assert (await operator(INTROSPECTION))["__schema"] == {"queryType": {"name": "Query"}}
    assert "id" in {f["name"] for f in (await operator(TYPE))["__type"]["fields"]}


async def test_introspection_refused_over_http_says_why(server, operator):
    _, token = await register(operator, unique("raw-introspector"))
    async with httpx.AsyncClient(timeout=30) as http:
        body = (await http.post(server.http, json={"query": INTROSPECTION},
                                headers={"authorization": f"Bearer {token}"})).json()
    assert body.get("data") is None and "introspection" in body["errors"][0]["message"].lower()


async def test_graphiql_is_not_served_by_default(server):
    async with httpx.AsyncClient(timeout=30) as http:
        page = await http.get(server.http, headers={"accept": "text/html"})
    assert "graphiql" not in page.text.lower()
    assert "<script" not in page.text.lower()


async def test_the_settings_open_metrics_and_graphiql_when_asked(fresh_database):
    from tests.conftest import Server
    opened = await Server(fresh_database, metrics_public=True, graphiql=True).start()
    try:
        async with httpx.AsyncClient(base_url=opened.base, timeout=30) as http:
            assert (await http.get("/metrics")).status_code == 200
            page = await http.get("/graphql", headers={"accept": "text/html"})
        assert page.status_code == 200 and "graphiql" in page.text.lower()
    finally:
        await opened.stop()

"""The plans of app/api/hot_documents.py: which documents get one, and that a plan's
argument conversion builds what strawberry's own convert_arguments builds."""
from __future__ import annotations

import pytest
from graphql import parse
from strawberry.types.arguments import convert_arguments

from app.api import types as t
from app.api.hot_documents import NotCompiled, compile_plan
from app.api.schema import schema

TURN = "{ id status leaseExpiresAt }"


@pytest.mark.parametrize("document", [
    "mutation($i: TurnRequestInput!) { requestTurn(input: $i) { id status lane level leaseExpiresAt grantedAt "
    "finishedAt outcome reason } }",
    "mutation { requestTurn(input: {estimatedTokens: 50, maxOutputTokens: 10, waitSeconds: 30}) { id status } }",
    "mutation($id: ID!) { completeTurn(input: {turnId: $id, outcome: OK, promptTokens: 50}) { status } }",
    "mutation Beat($t: ID!) { beat: heartbeat(turnId: $t) { __typename id at: leaseExpiresAt } }",
    "mutation($t: ID!) { cancelTurn(turnId: $t) { id } }",
])
def test_the_turn_documents_compile(document):
    plan = compile_plan(schema, parse(document))
    assert plan.result_class is t.Turn


@pytest.mark.parametrize("document", [
    "query { me { id } }",                                                       # not a mutation
    f"mutation($t: ID!) {{ heartbeat(turnId: $t) {TURN} cancelTurn(turnId: $t) {TURN} }}",   # two fields
    "mutation($t: ID!) { heartbeat(turnId: $t) { ...F } } fragment F on Turn { id }",       # a fragment
    "mutation($t: ID!) { heartbeat(turnId: $t) { ... on Turn { id } } }",                    # inline
    "mutation($t: ID!, $b: Boolean!) { heartbeat(turnId: $t) { id @include(if: $b) } }",    # a directive
    "mutation($t: ID!, $b: Boolean!) { heartbeat(turnId: $t) @skip(if: $b) { id } }",
    "mutation($t: ID!) { heartbeat(turnId: $t) { id id } }",                                 # a key twice
    'mutation { releaseAgent(agentId: "a") { id } }',                           # not a hot field
])
def test_other_documents_get_no_plan(document):
    with pytest.raises(NotCompiled):
        compile_plan(schema, parse(document))


CASES = {
    "requestTurn": [
        {"input": {"estimatedTokens": 50}},
        {"input": {"estimatedTokens": 50, "maxOutputTokens": None, "waitSeconds": 2.5, "streams": True,
                   "requestId": "r", "runId": "run"}},
        {"input": None},
    ],
    "completeTurn": [
        {"input": {"turnId": "x", "outcome": t.Outcome.OK}},
        {"input": {"turnId": "x", "outcome": t.Outcome.RATE_LIMITED, "promptTokens": 1, "completionTokens": 2,
                   "retryAfterSeconds": 0.5, "rateLimitHeaders": {"a": [1, {"b": None}]}, "requestId": None}},
    ],
    "heartbeat": [{"turnId": "x"}, {"turnId": "x", "requestId": "r"}, {"turnId": "x", "requestId": None}],
    "cancelTurn": [{"turnId": "x", "requestId": "r"}, {"turnId": "x"}],
}


@pytest.mark.parametrize("field", sorted(CASES))
def test_a_plan_converts_arguments_as_strawberry_does(field):
    args = {"requestTurn": "(input: $i)", "completeTurn": "(input: $i)"}.get(field, "(turnId: $t)")
    variable = {"requestTurn": "$i: TurnRequestInput", "completeTurn": "$i: CompleteTurnInput"}.get(field, "$t: ID!")
    plan = compile_plan(schema, parse(f"mutation({variable}) {{ {field}{args} {{ id }} }}"))
    [strawberry_field] = [f for f in schema.get_type_by_name("Mutation").fields
                          if schema.config.name_converter.get_graphql_name(f) == field]
    for values in CASES[field]:
        ours = {python: convert(values[name]) for name, python, convert in plan.arguments if name in values}
        theirs = convert_arguments(values, strawberry_field.arguments,
                                   scalar_registry=schema.schema_converter.scalar_registry, config=schema.config)
        assert ours == theirs
        assert [type(v) for v in ours.values()] == [type(v) for v in theirs.values()]

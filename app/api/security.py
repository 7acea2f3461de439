"""What the API refuses before any resolver runs: invalid credentials, documents too deep or
too large, request bodies over the cap, and introspection by anyone but the operator (by
anyone at all when switched off).

Why these numbers. Our own clients' documents are a few hundred tokens and at most three
levels below the root field (`scheduler { levels { queued { turnId } } }`, depth 3 as
strawberry counts). Depth 12, 2,000 tokens and 20 aliases leave room for any honest tool
and cut the cheap amplification attacks (deeply nested or aliased selections, a
megabyte of tokens to parse). Introspection is not counted in depth (strawberry's depth
limiter skips `__` fields), so the console, GraphiQL and code generators keep working for
the operator while it is on.
The body cap must admit the largest legal command: appendContextMessages takes up to 100
messages of 100,000 characters each (app/domain/context/limits.py), about 10 MB of JSON.
"""
from __future__ import annotations

import functools
from typing import cast

from graphql import ExecutionResult, FieldNode, GraphQLError, ValidationContext, ValidationRule
from graphql.validation import NoSchemaIntrospectionCustomRule
from strawberry.extensions import AddValidationRules, DisableIntrospection, MaxTokensLimiter, SchemaExtension
from strawberry.extensions.max_aliases import create_validator as aliases_rule
from strawberry.extensions.query_depth_limiter import create_validator as depth_rule

from app.auth import OPERATOR
from app.errors import LimitExceeded, Unauthenticated

from .context import GraphQLContext, principal_of

MAX_DEPTH = 12
MAX_TOKENS = 2_000
MAX_ALIASES = 20
MAX_BODY_BYTES = 16 * 1024 * 1024
# Fields each of whose answers is a fold of a whole stream (a pool's, up to a past
# position): a document may ask for so many of them, whatever its aliases. One for a
# console's view of a past moment, two to compare two moments.
COSTLY_FIELDS = {"schedulerAt": 2}


class RefuseInvalidCredentials(SchemaExtension):
    """A present but invalid bearer token gets UNAUTHENTICATED for the whole operation,
    whatever it selects (`me`, `__typename`, introspection): nothing runs for it."""

    def on_execute(self):
        context = self.execution_context.context
        if isinstance(context, dict) and "runtime" in context:
            try:
                principal_of(cast(GraphQLContext, context))
            except Unauthenticated as exc:
                self.execution_context.result = ExecutionResult(
                    data=None, errors=[GraphQLError(exc.message, extensions={"code": exc.code})])
        yield


# The depth and alias rules, built once. strawberry's QueryDepthLimiter and MaxAliasesLimiter
# build a new rule class in every instance, and an extension is instantiated per request;
# the validation cache is keyed by the document AND the tuple of rule classes, so with a
# fresh class per request it never hit: every request validated its document again (and
# filled the cache with entries nobody would look up). The same classes every time let
# a document that was valid once be taken as valid again. (Keyed by the caps, which are
# read per request, so lowering one takes effect at once.)
@functools.cache
def _limit_rules(max_depth: int, max_aliases: int) -> tuple:
    return depth_rule(max_depth, None), aliases_rule(max_aliases)


class CostlyFieldsRule(ValidationRule):
    """At most COSTLY_FIELDS[name] selections of each costly field in one document (every
    alias is one more answer to compute; a field inside a fragment counts once per
    fragment, and a fragment spread twice under one response key is answered once)."""

    def __init__(self, context: ValidationContext) -> None:
        super().__init__(context)
        self.seen: dict[str, int] = {}

    def enter_field(self, node: FieldNode, *_args) -> None:
        name = node.name.value
        cap = COSTLY_FIELDS.get(name)
        if cap is None:
            return
        self.seen[name] = self.seen.get(name, 0) + 1
        if self.seen[name] == cap + 1:
            self.report_error(GraphQLError(f"a document may select {name} at most {cap} times",
                                           node, extensions={"code": LimitExceeded.code}))


class DocumentLimits(AddValidationRules):
    """Depth and alias caps, as the two strawberry limiters check them, and the costly
    fields' caps."""

    def __init__(self) -> None:
        super().__init__([*_limit_rules(MAX_DEPTH, MAX_ALIASES), CostlyFieldsRule])


class IntrospectionForTheOperator(SchemaExtension):
    """Introspection (`__schema`, `__type`) for the operator only. The schema is public
    (schema/agentrm.graphql), but a map of every field and argument is the first thing an
    attacker with a stolen agent token or no token at all asks for, and no agent needs it:
    the agent client and the SDKs send fixed documents. The console, the operator's, reads
    it once to learn what the server offers. An invalid token is left to
    RefuseInvalidCredentials (UNAUTHENTICATED, whatever the document); a document run in
    the process (no runtime in its context: the SDL export, tests) is nobody's request."""

    def on_operation(self):
        context = self.execution_context.context
        if isinstance(context, dict) and "runtime" in context:
            try:
                caller = principal_of(cast(GraphQLContext, context))
            except Unauthenticated:
                caller = OPERATOR   # refused before it runs, with the right code
            if caller is None or not caller.is_operator:
                self.execution_context.validation_rules = (
                    *self.execution_context.validation_rules, NoSchemaIntrospectionCustomRule)
        yield


def limit_extensions(introspection: bool = True) -> list:
    """Factories: strawberry builds a fresh extension for each request. Introspection is
    the operator's (IntrospectionForTheOperator), or no one's when switched off."""
    extensions = [DocumentLimits, lambda: MaxTokensLimiter(max_token_count=MAX_TOKENS)]
    extensions.append(IntrospectionForTheOperator if introspection else DisableIntrospection)
    return extensions

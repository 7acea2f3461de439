"""What the API refuses before any resolver runs: invalid credentials, documents too deep or
too large, request bodies over the cap, and (when switched off) introspection.

Why these numbers. Our own clients' documents are a few hundred tokens and at most three
levels below the root field (`scheduler { levels { queued { turnId } } }`, depth 3 as
strawberry counts). Depth 12, 2,000 tokens and 20 aliases leave room for any honest tool
and cut the cheap amplification attacks (deeply nested or aliased selections, a
megabyte of tokens to parse). Introspection is not counted in depth (strawberry's depth
limiter skips `__` fields), so GraphiQL and code generators keep working while it is on.
The body cap must admit the largest legal command: appendContextMessages takes up to 100
messages of 100,000 characters each (app/domain/context/limits.py), about 10 MB of JSON.
"""
from __future__ import annotations

from graphql import ExecutionResult, GraphQLError
from strawberry.extensions import (DisableIntrospection, MaxAliasesLimiter, MaxTokensLimiter,
                                   QueryDepthLimiter, SchemaExtension)

from app.errors import Unauthenticated

from .context import principal_of

MAX_DEPTH = 12
MAX_TOKENS = 2_000
MAX_ALIASES = 20
MAX_BODY_BYTES = 16 * 1024 * 1024


class RefuseInvalidCredentials(SchemaExtension):
    """A present but invalid bearer token gets UNAUTHENTICATED for the whole operation,
    whatever it selects (`me`, `__typename`, introspection): nothing runs for it."""

    def on_execute(self):
        context = self.execution_context.context
        if isinstance(context, dict) and "runtime" in context:
            try:
                principal_of(context)
            except Unauthenticated as exc:
                self.execution_context.result = ExecutionResult(
                    data=None, errors=[GraphQLError(exc.message, extensions={"code": exc.code})])
        yield


def limit_extensions(introspection: bool = True) -> list:
    """Factories: strawberry builds a fresh extension for each request."""
    extensions = [lambda: QueryDepthLimiter(max_depth=MAX_DEPTH),
                  lambda: MaxTokensLimiter(max_token_count=MAX_TOKENS),
                  lambda: MaxAliasesLimiter(max_alias_count=MAX_ALIASES)]
    if not introspection:
        extensions.append(DisableIntrospection)
    return extensions

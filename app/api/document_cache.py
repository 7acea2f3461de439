"""Parse and validate each GraphQL document once.

Clients send the same few documents over and over (requestTurn, heartbeat, completeTurn):
parsing and validating them again would be a large share of the API's CPU under load.
strawberry's ParserCache and ValidationCache keep LRU caches keyed by the document;
any client can send new documents, so the caches are bounded in entries AND only take
documents up to MAX_CACHED_DOCUMENT_CHARS: 256 small documents, never 256 huge ones. A
larger document is parsed and validated as if there were no cache (strawberry does both
when no extension has).
"""
from __future__ import annotations

from collections.abc import Iterator

from graphql import GraphQLError
from strawberry.extensions import ParserCache, ValidationCache

DOCUMENT_CACHE_SIZE = 256
MAX_CACHED_DOCUMENT_CHARS = 4_096   # our own clients' documents are under 1k


def _small(extension) -> bool:
    return len(extension.execution_context.query or "") <= MAX_CACHED_DOCUMENT_CHARS


class SmallDocumentParserCache(ParserCache):
    def __init__(self) -> None:
        super().__init__(maxsize=DOCUMENT_CACHE_SIZE)

    def on_parse(self) -> Iterator[None]:
        if _small(self):
            try:
                self.execution_context.graphql_document = self.cached_parse_document(
                    self.execution_context.query, **self.execution_context.parse_options)
            except GraphQLError:
                # A syntax error: leave the document unset, so that strawberry parses it
                # again itself, inside its own error handling, and the error goes through
                # the operation's extensions (ErrorCodes gives it its code). Raised from
                # here it escaped them and reached the client without a code.
                pass
        yield


class SmallDocumentValidationCache(ValidationCache):
    def __init__(self) -> None:
        super().__init__(maxsize=DOCUMENT_CACHE_SIZE)

    def on_validate(self) -> Iterator[None]:
        if _small(self):
            yield from super().on_validate()
        else:
            yield

"""A document that does not parse, sent over graphql-transport-ws, gets an `error` message
for its operation (with its extensions.code, like every other error), instead of the
connection closing with code 4400. The connection may carry other subscriptions, and one
bad document must not cut them; strawberry closes it only for a syntax error."""
from __future__ import annotations

from graphql import GraphQLError, GraphQLSyntaxError
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import BaseGraphQLTransportWSHandler


class SyntaxErrorsAsMessages(BaseGraphQLTransportWSHandler):
    @staticmethod
    def _get_pre_execution_close_reason(error: GraphQLError) -> str | None:
        if isinstance(error, GraphQLSyntaxError):
            return None
        return BaseGraphQLTransportWSHandler._get_pre_execution_close_reason(error)


def with_syntax_errors_as_messages(handler: type[BaseGraphQLTransportWSHandler]) -> type:
    return type(handler.__name__, (SyntaxErrorsAsMessages, handler), {})

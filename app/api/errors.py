"""Every GraphQL error carries `extensions.code`: our ServiceError codes, or a
validation code for documents that do not fit the schema."""
from __future__ import annotations

from graphql import GraphQLError
from strawberry.extensions import SchemaExtension

from app.db.outage import is_outage
from app.errors import ServiceError, Unavailable


def as_graphql_error(exc: ServiceError) -> GraphQLError:
    return GraphQLError(exc.message, extensions={"code": exc.code})


class ErrorCodes(SchemaExtension):
    def on_operation(self):
        yield
        result = self.execution_context.result
        if not result or not result.errors:
            return
        for error in result.errors:
            original = error.original_error
            extensions = dict(error.extensions or {})
            if "code" in extensions:
                continue
            if isinstance(original, ServiceError):
                extensions["code"] = original.code
            elif original is None:
                extensions["code"] = "GRAPHQL_VALIDATION_FAILED"
            elif is_outage(original):
                # Retriable: the client cannot know whether the command took effect.
                extensions["code"] = Unavailable.code
                error.message = f"the database is unavailable ({type(original).__name__}); retry"
            else:
                extensions["code"] = "INTERNAL"
            error.extensions = extensions

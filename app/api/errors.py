"""Every GraphQL error carries `extensions.code`: our ServiceError codes, or a
validation code for documents that do not fit the schema."""
from __future__ import annotations

from graphql import GraphQLError
from strawberry.extensions import SchemaExtension

from app.db.outage import is_outage
from app.errors import ServiceError, Unavailable


INTERNAL_MESSAGE = "internal error"


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
                if error.path is not None:
                    # A resolver failed unexpectedly: the client gets no detail of it (no
                    # message of ours, no stack trace); process_errors logged it in full.
                    # (Errors without a path are the document's or its variables' and
                    # describe the client's own input.)
                    error.message = INTERNAL_MESSAGE
            error.extensions = extensions

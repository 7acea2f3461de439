"""Every GraphQL error carries `extensions.code`: our ServiceError codes, or a code for a
document that is not GraphQL (GRAPHQL_PARSE_FAILED), does not fit the schema
(GRAPHQL_VALIDATION_FAILED) or whose variables do not fit their types (BAD_USER_INPUT).
No error shows a stack trace or an unexpected failure's message."""
from __future__ import annotations

from graphql import GraphQLError, GraphQLSyntaxError
from strawberry.extensions import SchemaExtension

from app.db.outage import is_outage
from app.errors import BadInput, ServiceError, Unavailable

INTERNAL_MESSAGE = "internal error"
PARSE_FAILED = "GRAPHQL_PARSE_FAILED"
VALIDATION_FAILED = "GRAPHQL_VALIDATION_FAILED"


def as_graphql_error(exc: ServiceError) -> GraphQLError:
    return GraphQLError(exc.message, extensions={"code": exc.code})


def is_input_error(error: GraphQLError) -> bool:
    """graphql-core's own finding about the client's input (variables that do not coerce,
    an operation name that is not in the document): no resolver ran, nothing failed."""
    original = error.original_error
    return error.path is None and (original is None or type(original) is GraphQLError)


def assign_codes(errors, *, escaped: bool = False) -> None:
    """Give each error without a code its code (in place; validation's errors have theirs
    from ErrorCodes.on_validate). `escaped`: these errors left the operation
    without passing its extensions (a failure strawberry caught around them), so one that
    is not the client's own mistake must not show its message."""
    for error in errors or ():
        extensions = dict(error.extensions or {})
        if "code" in extensions:
            continue
        original = error.original_error
        if isinstance(original, ServiceError):
            extensions["code"] = original.code
        elif original is None and isinstance(error, GraphQLSyntaxError):
            extensions["code"] = PARSE_FAILED   # not GraphQL at all, or over the token cap
        elif is_input_error(error):
            # Found by graphql-core before any resolver ran: the variables do not fit their
            # types, or no operation matches the name.
            extensions["code"] = BadInput.code
        elif original is not None and is_outage(original):
            # Retriable: the client cannot know whether the command took effect.
            extensions["code"] = Unavailable.code
            error.message = f"the database is unavailable ({type(original).__name__}); retry"
        else:
            extensions["code"] = "INTERNAL"
            if error.path is not None or escaped:
                # A resolver (or an extension) failed unexpectedly: the client gets no
                # detail of it (no message of ours, no stack trace); process_errors logged
                # it in full.
                error.message = INTERNAL_MESSAGE
        error.extensions = extensions


class ErrorCodes(SchemaExtension):
    def on_validate(self):
        yield
        # What validation found (this first extension's hook exits last: every rule has
        # run). Coded here, since over a WebSocket the result leaves before on_operation
        # ends.
        for error in self.execution_context.pre_execution_errors or ():
            if not (error.extensions or {}).get("code"):
                error.extensions = {**(error.extensions or {}), "code": VALIDATION_FAILED}

    def on_operation(self):
        yield
        result = self.execution_context.result
        if result and result.errors:
            assign_codes(result.errors)

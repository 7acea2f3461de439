"""Per-request context: the runtime and the calling principal."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict, cast

from strawberry.types import Info

from app.auth import Principal, authenticate, parse_bearer
from app.errors import Unauthenticated

if TYPE_CHECKING:   # for the annotations only: at run time the context carries the runtime
    from app.bootstrap import Runtime

_INVALID = object()  # cached: a credential was presented and it is not valid


class GraphQLContext(TypedDict, total=False):
    """A GraphQL request's context, as AgentRMGraphQL.get_context (and the hot documents'
    path) build it; strawberry adds connection_params on a WebSocket."""
    request: Any                        # the HTTP request or the WebSocket
    response: Any                       # strawberry's response (None on the hot path)
    runtime: Runtime
    connection_params: dict[str, Any]   # graphql-transport-ws: connection_init's payload
    principal: object                   # principal_of's cache: a Principal, None or _INVALID


def runtime(info: Info) -> Runtime:
    return cast("Runtime", info.context["runtime"])


def _credential(context: Mapping[str, Any]) -> str | None:
    """HTTP: the Authorization header. WebSocket: `authorization` in connection_init."""
    header = None
    params = context.get("connection_params")
    if isinstance(params, dict):
        header = params.get("authorization") or params.get("Authorization")
    request: Any = context.get("request")
    if header is None and hasattr(request, "headers"):
        header = request.headers.get("authorization")
    return header if isinstance(header, str) else (None if header is None else str(header))


def principal_of(context: GraphQLContext) -> Principal | None:
    """Who calls: None without a credential. A credential that is present but not valid
    (unknown, revoked, malformed) is refused with UNAUTHENTICATED, never taken as none."""
    cached = context.get("principal", "unset")
    if cached is _INVALID:
        raise Unauthenticated("the bearer token is not valid")
    if cached != "unset":
        return cast("Principal | None", cached)
    header = _credential(context)
    rt = context["runtime"]
    found = authenticate(parse_bearer(header), rt.operator_token, rt.projector.model.token_index)
    if found is None and header is not None and header.strip():
        context["principal"] = _INVALID
        raise Unauthenticated("the bearer token is not valid")
    context["principal"] = found
    return found


def principal(info: Info) -> Principal | None:
    return principal_of(info.context)

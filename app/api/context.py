"""Per-request context: the runtime and the calling principal."""
from __future__ import annotations

from collections.abc import Mapping

from strawberry.types import Info

from app.auth import Principal, authenticate, parse_bearer
from app.errors import Unauthenticated

_INVALID = object()  # cached: a credential was presented and it is not valid


def runtime(info: Info):
    return info.context["runtime"]


def _credential(context: Mapping) -> str | None:
    """HTTP: the Authorization header. WebSocket: `authorization` in connection_init."""
    header = None
    params = context.get("connection_params")
    if isinstance(params, dict):
        header = params.get("authorization") or params.get("Authorization")
    request = context.get("request")
    if header is None and hasattr(request, "headers"):
        header = request.headers.get("authorization")
    return header if isinstance(header, str) else (None if header is None else str(header))


def principal_of(context: dict) -> Principal | None:
    """Who calls: None without a credential. A credential that is present but not valid
    (unknown, revoked, malformed) is refused with UNAUTHENTICATED, never taken as none."""
    cached = context.get("principal", "unset")
    if cached is _INVALID:
        raise Unauthenticated("the bearer token is not valid")
    if cached != "unset":
        return cached
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

"""Per-request context: the runtime and the calling principal."""
from __future__ import annotations

from strawberry.types import Info

from app.auth import Principal, authenticate, parse_bearer


def runtime(info: Info):
    return info.context["runtime"]


def principal(info: Info) -> Principal | None:
    """HTTP: the Authorization header. WebSocket: `authorization` in connection_init."""
    cached = info.context.get("principal", "unset")
    if cached != "unset":
        return cached
    request = info.context["request"]
    header = None
    params = info.context.get("connection_params")
    if isinstance(params, dict):
        header = params.get("authorization") or params.get("Authorization")
    if header is None and hasattr(request, "headers"):
        header = request.headers.get("authorization")
    rt = runtime(info)
    found = authenticate(parse_bearer(header), rt.operator_token, rt.projector.model.token_index)
    info.context["principal"] = found
    return found

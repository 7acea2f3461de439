"""What the gateway answers for a /v1 path it does not serve, or a method a path does not take.

Starlette's own answers are plain text ("Not Found"), which an SDK reports as an error
without a message. Here they are the provider's JSON error, in the caller's format (see
`caller_wire`), so `openai.NotFoundError` and `anthropic.NotFoundError` carry a reason.
The catch-all route sits last: a path that a gateway route serves with another method
matches that route partially, and answers 405 with `Allow`.
"""
from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Match, Route

from .wire import caller_wire

CATCH_ALL = "/v1/{path:path}"
# A function endpoint takes GET alone unless told: the catch-all takes every method.
EVERY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def catch_all(served: Sequence[BaseRoute]) -> Route:
    """The last /v1 route: a 404 or a 405 in the caller's wire format."""

    async def unserved(request: Request) -> JSONResponse:
        wire = caller_wire(request.headers)
        allowed: set[str] = set()
        for route in served:
            match, _ = route.matches(request.scope)
            if match is not Match.NONE and isinstance(route, Route) and route.methods:
                allowed |= route.methods
        where = f"{request.method} {request.url.path}"
        if allowed:
            allow = ", ".join(sorted(allowed))
            return JSONResponse(wire.error_body(405, f"{where}: this path takes {allow}"), status_code=405,
                                headers={"allow": allow})
        return JSONResponse(wire.error_body(404, f"Invalid URL ({where}): the AgentRM gateway does not serve "
                                                 "this path"), status_code=404)

    return Route(CATCH_ALL, unserved, methods=EVERY_METHOD)

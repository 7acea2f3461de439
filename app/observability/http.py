"""/metrics (the operator's, unless AGENTRM_METRICS_PUBLIC), /healthz and /readyz (anyone's:
orchestrators probe them without credentials, and they say nothing but up and ready)."""
from __future__ import annotations

import asyncio

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.api.holder import RuntimeHolder
from app.auth import authenticate, parse_bearer

READY_CATCH_UP_S = 2.0


def _refused(request: Request, rt) -> Response | None:
    """Why /metrics is not served to this caller, or None for the operator. The metrics name
    every pool, its limits, queues and traffic: the operator's to read (Prometheus sends
    the operator token), not an agent's or a passer-by's."""
    token = parse_bearer(request.headers.get("authorization"))
    caller = authenticate(token, rt.operator_token, rt.projector.model.token_index)
    if caller is not None and caller.is_operator:
        return None
    if caller is None:
        return Response("the operator's bearer token is required\n", status_code=401, media_type="text/plain",
                        headers={"www-authenticate": 'Bearer realm="agentrm"'})
    return Response("metrics are the operator's\n", status_code=403, media_type="text/plain")


def routes(holder: RuntimeHolder, *, metrics_public: bool = False) -> list[Route]:
    async def metrics(request: Request) -> Response:
        app_metrics, rt = holder.metrics, holder.runtime
        if app_metrics is None or rt is None:
            return Response("starting\n", status_code=503, media_type="text/plain")
        if not metrics_public and (refused := _refused(request, rt)) is not None:
            return refused
        return Response(await app_metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def healthz(_request: Request) -> Response:
        # The process is up and serving: nothing else is asked (no database round trip),
        # so a database outage never makes an orchestrator kill healthy workers.
        rt = holder.runtime
        return JSONResponse({"ok": True, "started": rt is not None})

    async def readyz(_request: Request) -> Response:
        rt = holder.runtime
        if rt is None:
            return JSONResponse({"ready": False, "reason": "starting"}, status_code=503)
        try:
            head = await asyncio.wait_for(rt.store.head(), READY_CATCH_UP_S)
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready", with the reason
            return JSONResponse({"ready": False, "reason": f"database unreachable: {type(exc).__name__}"},
                                status_code=503)
        try:
            await asyncio.wait_for(rt.projector.wait_position(head), READY_CATCH_UP_S)
        except Exception:  # noqa: BLE001
            pass
        position = rt.projector.model.position
        if position < head:
            return JSONResponse({"ready": False, "reason": "projections behind the log",
                                 "position": position, "head": head}, status_code=503)
        return JSONResponse({"ready": True, "position": position, "head": head})

    return [Route("/metrics", metrics), Route("/healthz", healthz), Route("/readyz", readyz)]

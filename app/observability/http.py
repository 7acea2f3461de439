"""/metrics, /healthz and /readyz."""
from __future__ import annotations

import asyncio

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.api.holder import RuntimeHolder

READY_CATCH_UP_S = 2.0


def routes(holder: RuntimeHolder) -> list[Route]:
    async def metrics(_request: Request) -> Response:
        app_metrics = holder.metrics
        if app_metrics is None:
            return Response("starting\n", status_code=503, media_type="text/plain")
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

"""The gateway's routes, mounted in the same Starlette app as /graphql."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.api.holder import RuntimeHolder
from app.auth import authenticate

from .output_estimate import OutputEstimator
from .proxy import GatewayEndpoint
from .wire import ANTHROPIC, OPENAI

if TYPE_CHECKING:   # for the annotations only: at run time the routes reach it through the holder
    from app.bootstrap import Runtime

MODELS_CACHE_S = 60.0


def routes(holder: RuntimeHolder) -> list[Route]:
    models_cache: dict[str, tuple[float, list[dict]]] = {}

    async def upstream_models(pool: str) -> list[dict]:
        """The pool's upstream's /v1/models (cached a minute), each tagged with the pool."""
        cached = models_cache.get(pool)
        if cached is not None and time.monotonic() - cached[0] < MODELS_CACHE_S:
            return cached[1]
        found: list[dict] = []
        try:
            if holder.upstreams is None:
                raise LookupError("no upstreams yet: the application is starting")
            upstream = await holder.upstreams.for_pool(pool)
            headers = {"authorization": f"Bearer {upstream.api_key}", "x-api-key": upstream.api_key} \
                if upstream.api_key else {}
            answer = await upstream.client.get(upstream.url("/v1/models"), headers=headers, timeout=10.0)
            if answer.status_code == 200:
                for m in answer.json().get("data") or ():
                    if isinstance(m, dict) and isinstance(m.get("id"), str):
                        # OpenAI's fields and Anthropic's, so either SDK's models.list() reads it.
                        found.append({"id": m["id"], "object": "model", "type": "model",
                                      "created": m.get("created", 0), "owned_by": m.get("owned_by", "upstream"),
                                      "display_name": m.get("display_name", m["id"]),
                                      "created_at": m.get("created_at", "1970-01-01T00:00:00Z"), "pool": pool})
        except (httpx.HTTPError, ValueError, LookupError):
            found = []
        except Exception:  # noqa: BLE001 - no upstream configured (NotFound) lists nothing
            found = []
        models_cache[pool] = (time.monotonic(), found)
        return found

    async def models(request: Request):
        rt = holder.runtime
        token = OPENAI.api_key(request.headers) or ANTHROPIC.api_key(request.headers)
        principal = authenticate(token, rt.operator_token, rt.projector.model.token_index) if rt else None
        if principal is None and rt is not None and token:
            await rt.projector.catch_up()
            principal = authenticate(token, rt.operator_token, rt.projector.model.token_index)
        if principal is None:
            return JSONResponse(OPENAI.error_body(401, "invalid or missing AgentRM token"), status_code=401)
        rt = cast("Runtime", rt)   # a principal was found: there is a runtime
        pools = sorted(rt.projector.model.pools) if principal.is_operator else \
            [rt.service.agent_view(cast(str, principal.agent_id))["pool"]]
        data = []
        for pool in pools:
            data.extend(await upstream_models(pool))
        return JSONResponse({"object": "list", "data": data, "has_more": False,
                             "first_id": data[0]["id"] if data else None,
                             "last_id": data[-1]["id"] if data else None})

    estimator = OutputEstimator()   # one per worker, shared by both wire formats
    return [Route("/v1/chat/completions", GatewayEndpoint(holder, OPENAI, estimator), methods=["POST"]),
            Route("/v1/messages", GatewayEndpoint(holder, ANTHROPIC, estimator), methods=["POST"]),
            Route("/v1/models", models, methods=["GET"])]

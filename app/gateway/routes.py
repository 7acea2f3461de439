"""The gateway's routes, mounted in the same Starlette app as /graphql."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.api.holder import RuntimeHolder

from .callers import principal_of
from .count_tokens import PATH as COUNT_TOKENS_PATH
from .count_tokens import count_tokens
from .embeddings import EMBEDDINGS
from .fallback import catch_all
from .managed_context import ManagedContext
from .output_estimate import OutputEstimator
from .proxy import GatewayEndpoint
from .responses_endpoint import ResponsesEndpoint
from .wire import ANTHROPIC, OPENAI, caller_wire

if TYPE_CHECKING:   # for the annotations only: at run time the routes reach it through the holder
    from app.bootstrap import Runtime

MODELS_CACHE_S = 60.0
NOT_SERVED_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


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
            # The key in one form per request: OpenAI's first, Anthropic's only if that is refused.
            answer = await upstream.client.get(upstream.url("/v1/models"), timeout=10.0, headers=(
                {"authorization": f"Bearer {upstream.api_key}"} if upstream.api_key else {}))
            if answer.status_code in (401, 403) and upstream.api_key:
                answer = await upstream.client.get(upstream.url("/v1/models"), timeout=10.0, headers={
                    "x-api-key": upstream.api_key, "anthropic-version": "2023-06-01"})
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

    async def caller_pools(request: Request) -> list[str] | JSONResponse:
        """The pools whose upstream models the caller may see: its agent's pool, every
        pool for the operator; or the 401 in the caller's wire format."""
        rt = holder.runtime
        principal = await principal_of(rt, request.headers)
        if principal is None:
            wire = caller_wire(request.headers)
            return JSONResponse(wire.error_body(401, "invalid or missing AgentRM token"), status_code=401)
        rt = cast("Runtime", rt)   # a principal was found: there is a runtime
        return sorted(rt.projector.model.pools) if principal.is_operator else \
            [rt.service.agent_view(cast(str, principal.agent_id))["pool"]]

    async def models(request: Request):
        pools = await caller_pools(request)
        if isinstance(pools, JSONResponse):
            return pools
        data = []
        for pool in pools:
            data.extend(await upstream_models(pool))
        return JSONResponse({"object": "list", "data": data, "has_more": False,
                             "first_id": data[0]["id"] if data else None,
                             "last_id": data[-1]["id"] if data else None})

    async def model(request: Request):
        pools = await caller_pools(request)
        if isinstance(pools, JSONResponse):
            return pools
        wanted = request.path_params["model_id"]
        for pool in pools:
            for m in await upstream_models(pool):
                if m["id"] == wanted:
                    return JSONResponse(m)
        wire = caller_wire(request.headers)
        return JSONResponse(wire.error_body(404, f"The model '{wanted}' does not exist in the upstream "
                                                 "models of this token's pools", code="model_not_found"),
                            status_code=404)

    estimator = OutputEstimator()   # one per worker, shared by the wire formats that generate
    managed = ManagedContext()      # the same: one agent's managed calls are ordered across formats
    served = [Route("/v1/chat/completions", GatewayEndpoint(holder, OPENAI, estimator, managed), methods=["POST"]),
              Route("/v1/messages", GatewayEndpoint(holder, ANTHROPIC, estimator, managed), methods=["POST"]),
              Route("/v1/responses", ResponsesEndpoint(holder, estimator), methods=["POST"]),
              Route("/v1/embeddings", GatewayEndpoint(holder, EMBEDDINGS), methods=["POST"]),
              Route(COUNT_TOKENS_PATH, count_tokens(holder), methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]),
              # :path, as model ids may hold a slash (org/model), which the SDKs send percent-encoded.
              Route("/v1/models/{model_id:path}", model, methods=["GET"])]
    return [*served, catch_all(served)]

"""POST /v1/messages/count_tokens: Anthropic's prompt count, which costs no model call.

So it takes no turn: it is asked of the pool's upstream directly, with the pool's key, and
passed back as the upstream gave it. An upstream without the endpoint (404 or 405: most
OpenAI-compatible servers) gets it counted here instead, with the pool's tokenizer and the
same count a turn reserves for the request (`count_prompt`), and the answer says so in
`x-agentrm-token-count: local`. Such an upstream is remembered (Upstreams.lacks), so it is
not asked again every call. The caller must hold an agent's token, as for a turn.
"""
from __future__ import annotations

import json
import logging
from typing import cast

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app import config
from app.api.holder import RuntimeHolder
from app.context.tokens import encoding_ready
from app.errors import ServiceError

from .bodies import BodyTooLarge, off_loop_if_large, refuse_declared
from .callers import principal_of
from .proxy import status_of
from .upstreams import Upstreams
from .wire import ANTHROPIC, BadRequest, WireFormat

log = logging.getLogger("agentrm.gateway")

PATH = "/v1/messages/count_tokens"
TOKEN_COUNT_HEADER = "x-agentrm-token-count"
ABSENT_STATUSES = (404, 405)


async def _body(request: Request, cap: int) -> bytes:
    """The whole body; BodyTooLarge, before reading it, when it is over the cap."""
    refuse_declared(request.headers, cap)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge(cap)
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(ANTHROPIC.error_body(status, message), status_code=status)


def count_tokens(holder: RuntimeHolder):
    max_body_bytes = config.load().gateway_max_body_bytes

    async def endpoint(request: Request) -> Response:
        rt = holder.runtime
        if rt is None:
            return _error(503, "AgentRM is starting")
        principal = await principal_of(rt, request.headers)
        if principal is None:
            return _error(401, "invalid or missing AgentRM token: pass the agent's token as the API key")
        if principal.is_operator:
            return _error(403, "the gateway serves agents: use an agent's token, not the operator's")
        try:
            raw = await _body(request, max_body_bytes)
            # The messages' own checks, without max_tokens: a count request has none.
            body = await off_loop_if_large(len(raw), WireFormat.parse, ANTHROPIC, raw)
            pool = (await rt.service.fresh(rt.service.agent_view, principal.agent_id))["pool"]
            upstreams = cast(Upstreams, holder.upstreams)   # set before the runtime
            upstream = await upstreams.for_pool(pool)
        except BodyTooLarge as exc:
            return _error(exc.status, str(exc))
        except BadRequest as exc:
            return _error(400, str(exc))
        except ServiceError as exc:
            return _error(status_of(exc), str(exc))
        if not upstreams.lacks(upstream.base_url, PATH):
            try:
                answer = await upstream.client.post(
                    upstream.url(PATH), content=raw, timeout=30.0,
                    headers=ANTHROPIC.upstream_headers(request.headers, upstream.api_key))
            except httpx.HTTPError as exc:
                return _error(502, f"the upstream could not be reached: {type(exc).__name__}")
            if answer.status_code not in ABSENT_STATUSES:
                headers = {TOKEN_COUNT_HEADER: "upstream"}
                for name in ("request-id", "retry-after"):
                    if name in answer.headers:
                        headers[name] = answer.headers[name]
                return Response(answer.content, status_code=answer.status_code, headers=headers,
                                media_type=answer.headers.get("content-type", "application/json"))
            upstreams.note_absent(upstream.base_url, PATH)
            log.info("upstream lacks %s: counting locally", PATH, extra={"pool": pool})
        encoding = rt.projector.model.pools[pool].settings.tokenizer
        await encoding_ready(encoding)
        counted = await off_loop_if_large(len(raw), ANTHROPIC.count_prompt, body, encoding)
        return Response(json.dumps({"input_tokens": counted}), media_type="application/json",
                        headers={TOKEN_COUNT_HEADER: "local"})

    return endpoint

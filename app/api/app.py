"""The Starlette application: /graphql (HTTP and graphql-transport-ws), the console at /, the
OpenAI/Anthropic gateway at /v1/..., /metrics, /healthz and /readyz, all on one port."""
from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import cast

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from strawberry.asgi import GraphQL
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL

from app import config
from app.adapters.pg_gateway_replies import PostgresGatewayReplies
from app.auth import authenticate, could_be_agent_token, parse_bearer
from app.bootstrap import Runtime, operator_token
from app.gateway.correlation import CorrelationMiddleware
from app.gateway.routes import routes as gateway_routes
from app.gateway.upstreams import Upstreams
from app.observability.http import routes as observability_routes
from app.observability.metrics import AppMetrics
from app.orphan_watch import stop_when_orphaned, supervisor_pid
from app.serving_gc import tune_for_serving

from .context import GraphQLContext
from .holder import RuntimeHolder
from .schema import build_schema, schema
from .security import MAX_BODY_BYTES
from .slow_subscribers import bounded_send_handler
from .ws_errors import with_syntax_errors_as_messages

# How long an idle client connection stays open. Above every common client's own idle
# expiry (httpx and so the OpenAI and Anthropic SDKs: 5 s; Node's agent: 4 s), so the
# client always drops an idle connection first. Equal timeouts race: a request sent on
# the connection the server is closing at that instant fails with a read error, and a
# non-idempotent POST is not retried by the SDKs. 75 s is nginx's default.
KEEP_ALIVE_SECONDS = 75

# The console's built assets (`npm run build` in frontend/, which `make setup` runs).
CONSOLE = Path(__file__).resolve().parents[2] / "frontend" / "dist"


class AgentRMGraphQL(GraphQL[GraphQLContext, None]):
    def __init__(self, rt_holder: RuntimeHolder, *, introspection: bool = True,
                 subscriber_send_timeout: float | None = None, hot_documents: bool = True,
                 graphiql: bool = False):
        served = schema if introspection else build_schema(introspection=False)
        # GraphiQL only when asked for (AGENTRM_GRAPHIQL): its page loads scripts from a CDN,
        # which would run with the origin of the API and the console.
        super().__init__(served, subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
                         keep_alive=True, keep_alive_interval=15, graphql_ide="graphiql" if graphiql else None)
        self.rt_holder = rt_holder
        self.hot_documents = served.hot_documents if hot_documents else None
        self.graphql_transport_ws_handler_class = with_syntax_errors_as_messages(bounded_send_handler(
            subscriber_send_timeout if subscriber_send_timeout is not None
            else config.load().subscriber_send_timeout_seconds))

    async def get_context(self, request, response) -> GraphQLContext:
        rt = cast(Runtime, self.rt_holder.runtime)   # requests are served once the lifespan set it
        context: GraphQLContext = {"request": request, "response": response, "runtime": rt}
        token = parse_bearer(request.headers.get("authorization")) if hasattr(request, "headers") else None
        if could_be_agent_token(token) and authenticate(token, rt.operator_token,
                                                        rt.projector.model.token_index) is None:
            await rt.projector.catch_up()  # an agent registered a moment ago on another worker
        return context

    async def run(self, request, *args, **kwargs):
        # A body that is not JSON gets a GraphQL-shaped error with a code, not a bare 400.
        if getattr(request, "method", None) == "POST":
            body = await _bounded_body(request)
            if body is None:
                return JSONResponse({"errors": [{"message": f"request body is over {MAX_BODY_BYTES} bytes",
                                                 "extensions": {"code": "LIMIT_EXCEEDED"}}]}, status_code=413)
            if self.hot_documents is not None:
                rt = cast(Runtime, self.rt_holder.runtime)   # requests are served once the lifespan set it
                answer = await self.hot_documents.answer(self, request, body, rt)
                if answer is not None:   # as strawberry's create_response makes it
                    return Response(answer, status_code=200, media_type="application/json")
            try:
                json.loads(body or b"{}")
            except ValueError as exc:
                return JSONResponse({"errors": [{"message": f"request body is not valid JSON: {exc}",
                                                 "extensions": {"code": "BAD_REQUEST"}}]}, status_code=400)
        return await super().run(request, *args, **kwargs)


async def _bounded_body(request) -> bytes | None:
    """The request body, or None once it is over the cap: a declared length is refused
    before reading, a streamed one as soon as it passes the cap (never read whole)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # what Request.body() returns from now on (Starlette keeps it there)
    return body


def create_app(url: str, *, run_schedulers: bool = True, demo: bool = False,
               op_token: str | None = None, introspection: bool | None = None,
               demo_upstream: bool | None = None, tune_gc: bool = False,
               hot_documents: bool | None = None, graphiql: bool | None = None,
               metrics_public: bool | None = None) -> Starlette:
    holder = RuntimeHolder()
    settings = config.load()
    graphql = AgentRMGraphQL(holder, introspection=settings.introspection if introspection is None
                             else introspection,
                             hot_documents=settings.hot_documents if hot_documents is None else hot_documents,
                             graphiql=settings.graphiql if graphiql is None else graphiql)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        rt = await Runtime(url, run_schedulers=run_schedulers).start()
        rt.operator_token = op_token or operator_token()
        upstream = config.load()
        upstreams = Upstreams(rt, upstream.upstream_base_url, upstream.upstream_api_key,
                              upstream.demo_upstream_url)
        metrics = AppMetrics(rt)
        holder.replies = PostgresGatewayReplies(rt.db, upstream.idempotency_window_seconds)
        holder.upstreams, holder.metrics, holder.runtime = upstreams, metrics, rt
        if tune_gc:   # a serving worker's own process (app/serving_gc.py says why)
            tune_for_serving()
        demo_task = None
        if demo:
            from app.demo import start_demo
            demo_task = start_demo(rt)
        supervisor = supervisor_pid() if tune_gc else None   # a worker of `serve --workers N`
        orphan_watch = asyncio.create_task(stop_when_orphaned(supervisor)) if supervisor else None
        try:
            yield
        finally:
            if orphan_watch is not None:
                orphan_watch.cancel()
            if demo_task is not None:
                demo_task.cancel()
                with contextlib.suppress(BaseException):
                    await demo_task
            holder.metrics = None
            metrics.close()
            holder.upstreams = None
            await upstreams.close()
            await rt.stop()

    async def console(_request: Request):
        index = CONSOLE / "index.html"
        if index.exists():
            return FileResponse(index, headers={"cache-control": "no-cache"})
        return PlainTextResponse("AgentRM: GraphQL at /graphql. The console is not built: run `make setup`.")

    # /graphql first: every agent call takes it, and the router tries routes in order.
    routes = [Route("/graphql", graphql, methods=["GET", "POST"]), WebSocketRoute("/graphql", graphql),
              Route("/", console),
              *observability_routes(holder, metrics_public=settings.metrics_public if metrics_public is None
                                    else metrics_public), *gateway_routes(holder),
              # check_dir=False: an unbuilt console must not keep the API from starting.
              Mount("/assets", StaticFiles(directory=CONSOLE / "assets", check_dir=False), name="assets")]
    if demo if demo_upstream is None else demo_upstream:
        from app.gateway.demo_upstream import routes as demo_upstream_routes
        routes.extend(demo_upstream_routes())
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(CorrelationMiddleware)])
    app.state.holder = holder
    return app

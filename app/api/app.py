"""The Starlette application: /graphql (HTTP and graphql-transport-ws), the console at /."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from strawberry.asgi import GraphQL
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL

from app.auth import authenticate, parse_bearer
from app.bootstrap import operator_token, subscriber_send_timeout_seconds
from app.runtime import Runtime

from .schema import schema
from .slow_subscribers import bounded_send_handler

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"


class AgentRMGraphQL(GraphQL):
    def __init__(self, rt_holder: dict, subscriber_send_timeout: float | None = None):
        super().__init__(schema, subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
                         keep_alive=True, keep_alive_interval=15)
        self.rt_holder = rt_holder
        self.graphql_transport_ws_handler_class = bounded_send_handler(
            subscriber_send_timeout if subscriber_send_timeout is not None else subscriber_send_timeout_seconds())

    async def get_context(self, request, response) -> dict:
        rt = self.rt_holder["runtime"]
        context = {"request": request, "response": response, "runtime": rt}
        token = parse_bearer(request.headers.get("authorization")) if hasattr(request, "headers") else None
        if token and authenticate(token, rt.operator_token, rt.projector.model.token_index) is None:
            await rt.projector.catch_up()  # an agent registered a moment ago on another worker
        return context

    async def run(self, request, *args, **kwargs):
        # A body that is not JSON gets a GraphQL-shaped error with a code, not a bare 400.
        if getattr(request, "method", None) == "POST":
            body = await request.body()
            try:
                json.loads(body or b"{}")
            except ValueError as exc:
                return JSONResponse({"errors": [{"message": f"request body is not valid JSON: {exc}",
                                                 "extensions": {"code": "BAD_REQUEST"}}]}, status_code=400)
        return await super().run(request, *args, **kwargs)


def create_app(url: str, *, run_schedulers: bool = True, demo: bool = False,
               op_token: str | None = None) -> Starlette:
    holder: dict = {}
    graphql = AgentRMGraphQL(holder)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        rt = await Runtime(url, run_schedulers=run_schedulers).start()
        rt.operator_token = op_token or operator_token()
        holder["runtime"] = rt
        demo_task = None
        if demo:
            from app.demo import start_demo
            demo_task = start_demo(rt)
        try:
            yield
        finally:
            if demo_task is not None:
                demo_task.cancel()
                with contextlib.suppress(BaseException):
                    await demo_task
            await rt.stop()

    async def console(_request: Request):
        index = FRONTEND / "index.html"
        if index.exists():
            return FileResponse(index)
        return PlainTextResponse("AgentRM: GraphQL at /graphql")

    async def health(_request: Request):
        rt = holder.get("runtime")
        return JSONResponse({"ok": rt is not None, "position": rt.projector.model.position if rt else None})

    routes = [Route("/", console), Route("/healthz", health),
              Route("/graphql", graphql, methods=["GET", "POST"]), WebSocketRoute("/graphql", graphql)]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.holder = holder
    return app

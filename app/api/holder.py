"""What the application's lifespan starts, for the routes that are built before it runs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # for the annotations only: at run time the holder needs none of them
    from app.bootstrap import Runtime
    from app.gateway.upstreams import Upstreams
    from app.observability.metrics import AppMetrics
    from app.ports import GatewayReplies


@dataclass
class RuntimeHolder:
    """The routes (GraphQL, the gateway, /metrics and the health checks) are created with
    the application, the runtime only when its lifespan starts: until then, and after it
    stops, these are None and the routes answer "starting"."""
    runtime: Runtime | None = None
    upstreams: Upstreams | None = None
    metrics: AppMetrics | None = None
    replies: GatewayReplies | None = None    # the gateway's stored replies (Idempotency-Key)

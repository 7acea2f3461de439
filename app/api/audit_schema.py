"""GraphQL for the operator console's audit view: what-if reports and turn stories.

`AuditQuery` is merged into the root Query by inheritance (`class Query(AuditQuery)`),
so these fields live beside `replayCheck` and `schedulerAt`. Operator only: a what-if
reads every agent's workload."""
from __future__ import annotations

import asyncio

import strawberry
from strawberry.types import Info

from app.audit import load_records, workload_records
from app.audit.explain import explain_turn
from app.audit.whatif import (
    RunMetrics,
    counterfactual_settings,
    extract_workload,
    what_if,
)
from app.auth import require_operator
from app.domain import events as ev
from app.domain.streams import pool_stream, turn_stream
from app.errors import BadInput, NotFound

from .context import principal, runtime


@strawberry.type
class RunMetricsView:
    turns: int
    finished: int
    completed_ok: int
    rate_limited: int
    errors: int
    reaped: int
    cancelled: int
    unfinished: int
    latency_p50: float | None
    latency_p90: float | None
    latency_p99: float | None
    latency_max: float | None
    lane_seconds: float
    productive_lane_seconds: float
    lane_waste: float | None
    throughput_per_minute: float | None
    span_seconds: float

    @classmethod
    def of(cls, m: RunMetrics) -> RunMetricsView:
        return cls(**m.__dict__)


@strawberry.type
class WhatIfSettings:
    lanes: int
    policy: str
    levels: int
    lease_seconds: float
    boost_seconds: float


@strawberry.type
class GrantView:
    turn_id: strawberry.ID
    lane: int


@strawberry.type
class WhatIfReport:
    pool: str
    from_position: int
    to_position: int
    recorded_settings: WhatIfSettings
    settings: WhatIfSettings
    actual: RunMetricsView
    what_if: RunMetricsView
    grants_compared: int
    same_grant_order: bool
    first_divergence: str | None
    simulation_complete: bool
    actual_grants: list[GrantView]
    what_if_grants: list[GrantView]


def _settings(s) -> WhatIfSettings:
    return WhatIfSettings(lanes=s.lanes, policy=s.policy, levels=s.levels, lease_seconds=s.lease_seconds,
                          boost_seconds=s.boost_seconds)


@strawberry.type
class AuditQuery:
    @strawberry.field
    async def what_if(self, info: Info, pool: str = "default", from_position: int | None = 0,
                      to_position: int | None = None, lanes: int | None = None, policy: str | None = None,
                      lease_seconds: float | None = None, levels: int | None = None,
                      boost_seconds: float | None = None) -> WhatIfReport:
        require_operator(principal(info))
        rt = runtime(info)
        if pool not in rt.projector.model.pools:
            raise NotFound(f"no pool named {pool!r}")
        if policy is not None and policy not in ("fifo", "mlfq"):
            raise BadInput("policy must be fifo or mlfq")
        records = await workload_records(rt.store, pool)
        try:
            workload = extract_workload(records, pool, from_position or 0, to_position)
            settings = counterfactual_settings(workload.settings, lanes=lanes, policy=policy,
                                               lease_seconds=lease_seconds, levels=levels,
                                               boost_seconds=boost_seconds)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        # The simulation is CPU-bound: run it off the event loop, which also serves the
        # scheduler's timers and every other request.
        r = await asyncio.to_thread(what_if, workload, settings)
        return WhatIfReport(
            pool=r.pool, from_position=r.from_position, to_position=r.to_position,
            recorded_settings=_settings(r.recorded_settings), settings=_settings(r.settings),
            actual=RunMetricsView.of(r.actual), what_if=RunMetricsView.of(r.whatif),
            grants_compared=r.grants_compared, same_grant_order=r.same_grant_order,
            first_divergence=r.first_divergence, simulation_complete=r.simulation_complete,
            actual_grants=[GrantView(turn_id=strawberry.ID(t), lane=lane) for t, lane in r.actual_grants],
            what_if_grants=[GrantView(turn_id=strawberry.ID(t), lane=lane) for t, lane in r.whatif_grants])

    @strawberry.field
    async def explain_turn(self, info: Info, turn_id: strawberry.ID) -> list[str]:
        require_operator(principal(info))
        store = runtime(info).store
        turn_records = await load_records(store, streams=[turn_stream(turn_id)])
        pool = next((r.data["pool"] for r in turn_records if r.type == ev.TURN_REQUESTED), None)
        if pool is None:
            raise NotFound(f"no turn with id {str(turn_id)!r}")
        pool_records = await load_records(store, streams=[pool_stream(pool)])
        return explain_turn(str(turn_id), turn_records, pool_records)

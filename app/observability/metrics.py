"""Prometheus metrics (prometheus-client), all named `agentrm_*`.

Two kinds:
- counters and a histogram fed by the projector's fold (`EventMetrics.on_event`): every
  worker folds the whole log, so each worker counts every grant, reap, pause... of the
  fleet, whoever decided it. Sum them with `max by (...)` across replicas, not `sum`.
- gauges read from the read model at scrape time (`ModelCollector`): queue depth per pool
  and level, lanes busy, the rate budget, hibernated agents, projection lag.

The gateway's own metrics (request duration, upstream status codes) are per worker: each
counts only what it served, so those are summed across replicas. So are the garbage
collector's pauses (`agentrm_gc_pause_seconds`, app/observability/gc_pauses.py): each
process's own.

Each app gets its own registry (tests run several apps in one process); the module-level
per-process metrics live in a registry of their own, shared by every app of the process.
"""
from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily

from app.domain import events as ev
from app.domain.decide import available
from app.domain.streams import category_of, id_of
from app.observability import gc_pauses

log = logging.getLogger("agentrm.metrics")

# `*_created` series (a counter's creation time) double the series count and no panel
# or rule reads them.
disable_created_metrics()

GATEWAY_REGISTRY = CollectorRegistry(auto_describe=True)
GATEWAY_DURATION = Histogram(
    "agentrm_gateway_request_duration_seconds",
    "Gateway requests, from the first byte in to the last byte out (queue wait included).",
    ["format", "status"], registry=GATEWAY_REGISTRY,
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
UPSTREAM_STATUS = Counter(
    "agentrm_gateway_upstream_responses", "Upstream answers to the gateway, by pool and HTTP status "
    "('error' when the upstream could not be reached).", ["pool", "status"], registry=GATEWAY_REGISTRY)
IDEMPOTENT_REPLAYS = Counter(
    "agentrm_gateway_idempotent_replays", "Gateway calls answered from a stored reply (a retry with "
    "the Idempotency-Key of a call that had finished, or that it waited for): no turn, no upstream call.",
    ["format"], registry=GATEWAY_REGISTRY)
GATEWAY_REGISTRY.register(gc_pauses.PAUSES)

# Every name this module exports, for the ops files' check (tests/unit/test_ops_files.py).
EXPORTED = (
    "agentrm_gateway_request_duration_seconds", "agentrm_gateway_upstream_responses_total",
    "agentrm_gateway_idempotent_replays_total",
    "agentrm_grants_total", "agentrm_reaps_total", "agentrm_demotions_total", "agentrm_boosts_total",
    "agentrm_promotions_total", "agentrm_rate_limited_total", "agentrm_pauses_total",
    "agentrm_scoped_pauses_total",
    "agentrm_compactions_total", "agentrm_quarantines_total", "agentrm_grant_latency_seconds",
    "agentrm_queue_depth", "agentrm_lanes", "agentrm_lanes_busy", "agentrm_rate_available_requests",
    "agentrm_rate_available_tokens", "agentrm_rate_factor", "agentrm_pool_paused",
    "agentrm_pool_paused_seconds_remaining", "agentrm_agents", "agentrm_hibernated_agents",
    "agentrm_projection_position", "agentrm_log_head_position", "agentrm_projection_lag_positions",
    "agentrm_projection_lag_seconds", "agentrm_gc_pause_seconds",
)


class EventMetrics:
    """Counters folded from the log, as the projector folds it."""

    def __init__(self, registry: CollectorRegistry, model):
        self.model = model
        c = lambda name, doc, labels: Counter(name, doc, labels, registry=registry)  # noqa: E731
        self.grants = c("agentrm_grants", "Turns granted.", ["pool", "level"])
        self.reaps = c("agentrm_reaps", "Turns reaped, by kind: start_deadline (no first chunk) or lease.",
                       ["pool", "kind"])
        self.demotions = c("agentrm_demotions", "MLFQ demotions.", ["pool"])
        self.boosts = c("agentrm_boosts", "MLFQ periodic boosts.", ["pool"])
        self.promotions = c("agentrm_promotions", "Queued turns promoted by aging.", ["pool"])
        self.rate_limited = c("agentrm_rate_limited", "Completions reported RATE_LIMITED (upstream 429s).",
                              ["pool"])
        self.pauses = c("agentrm_pauses", "Pool pauses after a 429.", ["pool"])
        self.scoped_pauses = c("agentrm_scoped_pauses", "Pauses after a 429 of one model (scope model) or of "
                               "one agent, its own uncorroborated report (scope agent).", ["pool", "scope"])
        self.compactions = c("agentrm_compactions", "Context compactions.", [])
        self.quarantines = c("agentrm_quarantines", "Agents quarantined after repeated reaps.", ["pool"])
        self.grant_latency = Histogram(
            "agentrm_grant_latency_seconds", "From requestTurn to the grant (recorded times).", ["pool"],
            registry=registry, buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))

    def on_event(self, event) -> None:
        kind = event.type
        data = event.data if isinstance(event.data, dict) else {}
        pool = id_of(event.stream) if category_of(event.stream) == "pool" else str(data.get("pool", ""))
        if kind == ev.TURN_GRANTED:
            self.grants.labels(pool, str(data.get("level"))).inc()
            turn = self.model.turns.get(data.get("turn_id"))
            if turn is not None and turn.get("requested_at") is not None and data.get("at") is not None:
                self.grant_latency.labels(pool).observe(max(0.0, data["at"] - turn["requested_at"]))
        elif kind == ev.TURN_REAPED:
            self.reaps.labels(pool, "start_deadline" if data.get("no_first_chunk") else "lease").inc()
        elif kind == ev.AGENT_DEMOTED:
            self.demotions.labels(pool).inc()
        elif kind == ev.LEVELS_BOOSTED:
            self.boosts.labels(pool).inc()
        elif kind == ev.TURN_PROMOTED:
            self.promotions.labels(pool).inc()
        elif kind == ev.POOL_PAUSED:
            self.pauses.labels(pool).inc()
        elif kind in (ev.MODEL_PAUSED, ev.AGENT_PAUSED):
            self.scoped_pauses.labels(pool, "model" if kind == ev.MODEL_PAUSED else "agent").inc()
        elif kind == ev.AGENT_QUARANTINED:
            self.quarantines.labels(pool).inc()
        elif kind == ev.COMPLETION_REPORTED and data.get("outcome") == ev.RATE_LIMITED:
            self.rate_limited.labels(pool).inc()
        elif kind == ev.CONTEXT_COMPACTED:
            self.compactions.inc()


class ModelCollector:
    """Gauges read from the live read model when Prometheus scrapes."""

    def __init__(self, projector):
        self.projector = projector
        self.head: int | None = None          # set by the /metrics handler before a scrape
        self.last_folded_at: float = time.time()

    def describe(self):
        return []

    def collect(self):
        model = self.projector.model
        now = time.time()
        g = lambda name, doc, labels=(): GaugeMetricFamily(name, doc, labels=list(labels))  # noqa: E731
        depth = g("agentrm_queue_depth", "Turns queued, per pool and MLFQ level.", ("pool", "level"))
        lanes = g("agentrm_lanes", "Configured lanes per pool.", ("pool",))
        busy = g("agentrm_lanes_busy", "Lanes held by a granted turn.", ("pool",))
        req = g("agentrm_rate_available_requests", "Requests the RPM bucket admits now.", ("pool",))
        tok = g("agentrm_rate_available_tokens", "Tokens the TPM bucket admits now.", ("pool",))
        factor = g("agentrm_rate_factor", "The AIMD factor on the admitted rate (1 = the whole limit).",
                   ("pool",))
        paused = g("agentrm_pool_paused", "1 while the pool is paused after a 429.", ("pool",))
        left = g("agentrm_pool_paused_seconds_remaining", "Seconds of pause left.", ("pool",))
        for name, state in sorted(model.pools.items()):
            for level, queue in enumerate(state.queues):
                depth.add_metric([name, str(level)], len(queue))
            lanes.add_metric([name], len(state.lanes))
            busy.add_metric([name], state.busy_lanes())
            requests, tokens = available(state, now)
            req.add_metric([name], requests)
            tok.add_metric([name], tokens)
            factor.add_metric([name], state.rate_factor)
            remaining = max(0.0, (state.paused_until or 0.0) - now)
            paused.add_metric([name], 1.0 if remaining > 0 else 0.0)
            left.add_metric([name], remaining)
        yield from (depth, lanes, busy, req, tok, factor, paused, left)
        agents = g("agentrm_agents", "Registered agents per pool and state.", ("pool", "state"))
        counts: dict[tuple[str, str], int] = {}
        hibernated = 0
        for agent_id in model.agents:
            view = model.agent_view(agent_id)
            if view is None:
                continue
            key = (view["pool"], view["state"])
            counts[key] = counts.get(key, 0) + 1
            hibernated += bool(view.get("hibernated"))
        for (pool, state), n in sorted(counts.items()):
            agents.add_metric([pool, state], n)
        yield agents
        hib = g("agentrm_hibernated_agents", "Agents whose context is hibernated.")
        hib.add_metric([], hibernated)
        yield hib
        position = g("agentrm_projection_position", "The last log position folded into the read model.")
        position.add_metric([], model.position)
        yield position
        if self.head is not None:
            head = g("agentrm_log_head_position", "The log's last committed position.")
            head.add_metric([], self.head)
            lag = g("agentrm_projection_lag_positions", "Committed events not folded yet.")
            lag.add_metric([], max(0, self.head - model.position))
            seconds = g("agentrm_projection_lag_seconds",
                        "Seconds since the read model last caught up with the log (0 when caught up).")
            seconds.add_metric([], 0.0 if self.head <= model.position else max(0.0, now - self.last_folded_at))
            yield from (head, lag, seconds)

    def on_event(self, _event) -> None:
        self.last_folded_at = time.time()


class AppMetrics:
    """The registry of one app: event counters, model gauges, plus the gateway's."""

    def __init__(self, runtime):
        self.registry = CollectorRegistry(auto_describe=False)
        gc_pauses.install()
        self.events = EventMetrics(self.registry, runtime.projector.model)
        self.model = ModelCollector(runtime.projector)
        self.registry.register(self.model)
        self.runtime = runtime
        self._unsubscribe = runtime.projector.subscribe(self._on_event)

    def _on_event(self, event) -> None:
        # Called inside the projector's fold: a metrics bug must never stop the read model.
        try:
            self.events.model = self.runtime.projector.model   # a rebuild may swap the model
            self.events.on_event(event)
            self.model.on_event(event)
        except Exception:  # noqa: BLE001
            log.exception("metrics: event %s at position %s not counted", event.type, event.position)

    async def render(self) -> bytes:
        from prometheus_client import generate_latest
        try:
            self.model.head = await self.runtime.store.head()
        except Exception:  # the database is away: report the rest; /readyz says why
            self.model.head = None
        return generate_latest(self.registry) + generate_latest(GATEWAY_REGISTRY)

    def close(self) -> None:
        self._unsubscribe()

"""The one place that wires adapters together into a running application.

Entry points (the CLI, the uvicorn factory, the benchmarks, the tests) ask this module for
the database, the operator token and a runtime. `Runtime` is the production wiring on
PostgreSQL; `MemoryRuntime` the same application on the in-memory log, for application
tests. What they are configured with comes from app/config.py, read when they start."""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import socket
import time
from pathlib import Path

from app import config
from app.adapters.leader_lease import LeaseLeadership
from app.adapters.memory_leadership import AlwaysLeads
from app.adapters.memory_log import MemoryLog
from app.auth import OPERATOR
from app.domain.settings import PoolSettings
from app.errors import Conflict
from app.eventstore.listener import LogListener
from app.eventstore.store import EventStore, create_pool
from app.private_files import create_private
from app.projections.runner import Projector
from app.provider_keys import ProviderKeys
from app.replay import PastPoolStates
from app.resources.manager import ResourceManager
from app.resources.service import ResourceService
from app.scheduler.loop import SchedulerSupervisor
from app.service import Service
from app.subscription_slots import SubscriptionSlots


def data_dir() -> Path:
    """Where the embedded cluster and local state live (AGENTRM_DATA_DIR), created."""
    path = Path(config.load().data_dir).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def external_database_url() -> str | None:
    """DATABASE_URL, when one is configured."""
    return config.load().database_url


def database_url(start_embedded: bool = True) -> str:
    """DATABASE_URL when set; otherwise the embedded cluster in the data dir (started)."""
    url = external_database_url()
    if url:
        return url
    if not start_embedded:
        raise SystemExit("DATABASE_URL is not set and the embedded database was not started")
    from app.db.embedded import EmbeddedPostgres
    return EmbeddedPostgres(data_dir()).start()


def operator_token() -> str:
    """The operator bearer token: AGENTRM_OPERATOR_TOKEN, else one generated once and kept
    in the data dir so that `agentrm token` and a restarted server agree on it."""
    token = config.load().operator_token
    if token:
        return token
    path = data_dir() / "operator.token"
    if not path.exists():
        write_secret(path, "op_" + secrets.token_urlsafe(24))
    return path.read_text().strip()


def operator_token_given() -> bool:
    """Whether the token came from the environment (a deployment's secret) rather than
    being generated here for a local run."""
    return bool(config.load().operator_token)


def fingerprint(secret: str) -> str:
    """What a log may say about a secret: enough to tell two apart, nothing to use."""
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()[:12]


def write_secret(path: Path, text: str) -> None:
    """Create a secret file readable by its owner alone from its first byte, whole."""
    create_private(path, text)


def use_demo_upstream(host: str, port: int, *, fleet: bool) -> str | None:
    """Where the demo echo model (app/gateway/demo_upstream.py) is served, handed to the
    workers. It is served whenever no upstream is configured, fleet or not, as the
    `default` pool's upstream, so the gateway works offline; and with the demo fleet, as
    the `demo` pool's. Returns the URL when it is the `default` pool's, else None."""
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    url = f"http://{local}:{port}/demo-upstream/v1"
    for_default = not config.load().upstream_base_url
    # "" clears a value a parent process may have left in the environment: not served.
    config.export_for_workers(demo_upstream_url=url if fleet or for_default else "")
    if not for_default:
        return None
    config.export_for_workers(upstream_base_url=url)
    return url


def worker_name() -> str:
    """This process's name in PostgreSQL (application_name, at most 63 bytes), unique per
    start: a standby ends the sessions of a silent worker by it."""
    return f"agentrm:{socket.gethostname()[:24]}:{os.getpid()}:{secrets.token_hex(3)}"


def default_pool_settings(settings: config.Settings) -> PoolSettings:
    """The `default` pool, created at the first start (AGENTRM_DEFAULT_*)."""
    return PoolSettings(name="default", lanes=settings.default_lanes, rpm=settings.default_rpm,
                        tpm=settings.default_tpm, lease_seconds=settings.default_lease_seconds,
                        boost_seconds=settings.default_boost_seconds)


async def _create_default_pool(service: Service, settings: PoolSettings | None) -> None:
    if "default" not in service.model.pools:
        with contextlib.suppress(Conflict):
            await service.create_pool(OPERATOR, settings or default_pool_settings(config.load()))


class Runtime:
    """The production wiring: PostgreSQL event log, LISTEN/NOTIFY, advisory-lock leaders."""

    # Set by the application that serves this runtime; empty matches no token (app/auth.py).
    operator_token: str = ""

    def __init__(self, url: str, *, run_schedulers: bool = True, pool_size: int = 10,
                 hibernate_idle_seconds: float | None = None, leader_lease_seconds: float | None = None):
        self.settings = config.load()
        self.url = url
        self.worker = worker_name()
        self.leader_lease_seconds = (self.settings.leader_lease_seconds if leader_lease_seconds is None
                                     else leader_lease_seconds)
        self.run_schedulers = run_schedulers
        self.pool_size = pool_size
        self.hibernate_idle_seconds = (self.settings.hibernate_idle_seconds if hibernate_idle_seconds is None
                                       else hibernate_idle_seconds)

    async def start(self, default_pool: PoolSettings | None = None) -> Runtime:
        self.db = await create_pool(self.url, min_size=2, max_size=self.pool_size,
                                    application_name=self.worker)
        self.store = EventStore(self.db)
        self.provider_keys = ProviderKeys.from_settings(data_dir)
        await self.provider_keys.seal_plaintext_rows(self.db)
        self.listener = LogListener(self.url)
        self.store.use_wakeups(self.listener)
        await self.listener.start()
        self.projector = Projector(self.store, self.listener)
        await self.projector.start()
        self.store.on_append(self.projector.offer)
        self.service = Service(self.store, self.projector,
                               max_queued_per_agent=self.settings.max_queued_per_agent,
                               timing_stamps=self.settings.timing_stamps,
                               provider_keys=self.provider_keys)
        self.resources = ResourceService(self.service)
        self.service.pool_guard = self.resources.check_pool
        self.subscription_slots = SubscriptionSlots(self.settings.max_subscriptions_per_agent)
        self.past_pool_states = PastPoolStates(self.store)
        self.resource_manager = ResourceManager(self.store, self.url, wakeups=self.listener)
        await _create_default_pool(self.service, default_pool)
        from app.context.service import ContextService
        self.context = ContextService(self.service, hibernate_idle_seconds=self.hibernate_idle_seconds)
        await self.context.start()
        self.leadership = LeaseLeadership(self.url, lease_seconds=self.leader_lease_seconds,
                                          worker=self.worker)
        self.supervisor = SchedulerSupervisor(self.store, self.url, wakeups=self.listener,
                                              leadership=self.leadership)
        if self.run_schedulers:
            await self.supervisor.start()
            await self.resource_manager.start()
        return self

    async def stop(self) -> None:
        await self.context.stop()
        await self.resource_manager.stop()
        await self.supervisor.stop()
        await self.projector.stop()
        await self.listener.stop()
        try:
            await asyncio.wait_for(self.db.close(), 10)
        except TimeoutError:
            self.db.terminate()   # an unresponsive database must not keep a worker from stopping


class MemoryRuntime:
    """No database: the in-memory log is its own wake-up source, the one process always
    leads every pool, and the clock is injected. No context service (it stores embeddings
    and archives in PostgreSQL)."""

    operator_token: str = ""

    def __init__(self, clock=None):
        self.clock = clock if clock is not None else time.time

    async def start(self, default_pool: PoolSettings | None = None) -> MemoryRuntime:
        self.store = MemoryLog(self.clock)
        self.listener = self.store
        self.projector = Projector(self.store, self.store)
        await self.projector.start()
        self.store.on_append(self.projector.offer)
        settings = config.load()
        self.service = Service(self.store, self.projector, clock=self.clock,
                               timing_stamps=settings.timing_stamps)
        self.resources = ResourceService(self.service)
        self.subscription_slots = SubscriptionSlots(settings.max_subscriptions_per_agent)
        self.past_pool_states = PastPoolStates(self.store)
        self.service.pool_guard = self.resources.check_pool
        self.resource_manager = ResourceManager(self.store, clock=self.clock, leadership=AlwaysLeads(),
                                                wakeups=self.store)
        await _create_default_pool(self.service, default_pool)
        self.supervisor = SchedulerSupervisor(self.store, clock=self.clock,
                                              leadership=AlwaysLeads(), wakeups=self.store)
        if hasattr(self.clock, "on_advance"):
            self.clock.on_advance(self.supervisor.tick)
            self.clock.on_advance(self.resource_manager.tick)
        await self.supervisor.start()
        await self.resource_manager.start()
        return self

    async def stop(self) -> None:
        await self.resource_manager.stop()
        await self.supervisor.stop()
        await self.projector.stop()


async def postgres_runtime(url: str, *, run_schedulers: bool = True, pool_size: int = 10,
                           default_pool: PoolSettings | None = None) -> Runtime:
    """The production wiring, started."""
    return await Runtime(url, run_schedulers=run_schedulers, pool_size=pool_size).start(default_pool)


async def memory_runtime(clock=None, *, default_pool: PoolSettings | None = None) -> MemoryRuntime:
    """The application without a database: the in-memory log, a leader that always leads,
    and `clock` (a ManualClock in tests, whose moves wake the schedulers' timers)."""
    return await MemoryRuntime(clock).start(default_pool)

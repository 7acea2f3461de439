"""The running application: event log, wake-ups, projector, schedulers and service, wired.

`Runtime` is the production wiring on PostgreSQL; `MemoryRuntime` the same application on
the in-memory log, for application tests. app/bootstrap.py builds either."""
from __future__ import annotations

import asyncio
import contextlib
import time

from app import bootstrap
from app.adapters.leader_lease import LeaseLeadership
from app.adapters.memory_leadership import AlwaysLeads
from app.adapters.memory_log import MemoryLog
from app.auth import OPERATOR
from app.domain.settings import PoolSettings
from app.errors import Conflict
from app.eventstore.listener import LogListener
from app.eventstore.store import EventStore, create_pool
from app.projections.runner import Projector
from app.resources.manager import ResourceManager
from app.resources.service import ResourceService
from app.scheduler.loop import SchedulerSupervisor
from app.service import Service

default_pool_settings = bootstrap.default_pool_settings  # kept for existing imports


async def _create_default_pool(service: Service, settings: PoolSettings | None) -> None:
    if "default" not in service.model.pools:
        with contextlib.suppress(Conflict):
            await service.create_pool(OPERATOR, settings or bootstrap.default_pool_settings())


class Runtime:
    def __init__(self, url: str, *, run_schedulers: bool = True, pool_size: int = 10,
                 hibernate_idle_seconds: float | None = None, leader_lease_seconds: float | None = None):
        self.url = url
        self.worker = bootstrap.worker_name()
        self.leader_lease_seconds = (bootstrap.leader_lease_seconds() if leader_lease_seconds is None
                                     else leader_lease_seconds)
        self.run_schedulers = run_schedulers
        self.pool_size = pool_size
        self.hibernate_idle_seconds = (bootstrap.hibernate_idle_seconds() if hibernate_idle_seconds is None
                                       else hibernate_idle_seconds)

    async def start(self, default_pool: PoolSettings | None = None) -> Runtime:
        self.db = await create_pool(self.url, min_size=2, max_size=self.pool_size,
                                    application_name=self.worker)
        self.store = EventStore(self.db)
        self.listener = LogListener(self.url)
        self.store.use_wakeups(self.listener)
        await self.listener.start()
        self.projector = Projector(self.store, self.listener)
        await self.projector.start()
        self.store.on_append(self.projector.offer)
        self.service = Service(self.store, self.projector,
                               max_queued_per_agent=bootstrap.max_queued_turns_per_agent())
        self.resources = ResourceService(self.service)
        self.service.pool_guard = self.resources.check_pool
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
        except asyncio.TimeoutError:
            self.db.terminate()   # an unresponsive database must not keep a worker from stopping


class MemoryRuntime:
    """No database: the in-memory log is its own wake-up source, the one process always
    leads every pool, and the clock is injected. No context service (it stores embeddings
    and archives in PostgreSQL)."""

    def __init__(self, clock=None):
        self.clock = clock if clock is not None else time.time

    async def start(self, default_pool: PoolSettings | None = None) -> MemoryRuntime:
        self.store = MemoryLog(self.clock)
        self.listener = self.store
        self.projector = Projector(self.store, self.store)
        await self.projector.start()
        self.store.on_append(self.projector.offer)
        self.service = Service(self.store, self.projector, clock=self.clock)
        self.resources = ResourceService(self.service)
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

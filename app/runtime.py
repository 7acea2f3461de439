"""Bootstrap: wire the event store, listener, projector, schedulers and service together."""
from __future__ import annotations

import contextlib
import os

from app.auth import OPERATOR
from app.domain.settings import PoolSettings
from app.errors import Conflict
from app.eventstore.listener import LogListener
from app.eventstore.store import EventStore, create_pool
from app.projections.runner import Projector
from app.scheduler.loop import SchedulerSupervisor
from app.service import Service


def default_pool_settings() -> PoolSettings:
    """The `default` pool, from the environment (AGENTRM_DEFAULT_LANES, _RPM, _TPM,
    _LEASE_SECONDS, _BOOST_SECONDS)."""
    env = os.environ.get
    return PoolSettings(
        name="default",
        lanes=int(env("AGENTRM_DEFAULT_LANES", "4")),
        rpm=int(env("AGENTRM_DEFAULT_RPM", "600")),
        tpm=int(env("AGENTRM_DEFAULT_TPM", "400000")),
        lease_seconds=float(env("AGENTRM_DEFAULT_LEASE_SECONDS", "30")),
        boost_seconds=float(env("AGENTRM_DEFAULT_BOOST_SECONDS", "60")),
    )


class Runtime:
    def __init__(self, url: str, *, run_schedulers: bool = True, pool_size: int = 10):
        self.url = url
        self.run_schedulers = run_schedulers
        self.pool_size = pool_size

    async def start(self, default_pool: PoolSettings | None = None) -> "Runtime":
        self.db = await create_pool(self.url, min_size=2, max_size=self.pool_size)
        self.store = EventStore(self.db)
        self.listener = LogListener(self.url)
        self.store.on_append(self.listener.poke)
        await self.listener.start()
        self.projector = Projector(self.store, self.listener)
        await self.projector.start()
        self.store.on_append(self.projector.offer)
        self.service = Service(self.store, self.projector)
        if "default" not in self.projector.model.pools:
            with contextlib.suppress(Conflict):
                await self.service.create_pool(OPERATOR, default_pool or default_pool_settings())
        from app.context.service import ContextService
        self.context = ContextService(
            self.service, hibernate_idle_seconds=float(os.environ.get("AGENTRM_HIBERNATE_IDLE_SECONDS", "1800")))
        await self.context.start()
        self.supervisor = SchedulerSupervisor(self.store, self.projector, self.url)
        if self.run_schedulers:
            await self.supervisor.start()
        return self

    async def stop(self) -> None:
        await self.context.stop()
        await self.supervisor.stop()
        await self.projector.stop()
        await self.listener.stop()
        await self.db.close()

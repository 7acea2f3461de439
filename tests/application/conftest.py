"""The application on the in-memory event log, with a manual clock in milliseconds: no
PostgreSQL, no real time in what is decided (only as a bound on waiting for a condition)."""
from __future__ import annotations

import pytest

from app.adapters.clock import ManualClock
from app.auth import OPERATOR, Principal
from app.bootstrap import memory_runtime
from app.domain.settings import PoolSettings

# Bounds on waiting for the scheduler's answer (a condition), never a measured duration.
SETTLE = 10.0


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
async def app(clock):
    rt = await memory_runtime(clock, default_pool=PoolSettings(name="default", lanes=1, lease_seconds=30))
    yield rt
    await rt.stop()


@pytest.fixture
def register(app):
    async def register(name: str = "a", **kwargs) -> Principal:
        view, _token = await app.service.register_agent(OPERATOR, name, **kwargs)
        return Principal("agent", view["agent_id"])
    return register

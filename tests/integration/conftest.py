"""Every integration test that writes events ends with a replay check: rebuilding every
projection from position 0 must equal the live read models. Also the fixtures that several
integration tests share."""
from __future__ import annotations

import pytest

from app.eventstore.listener import LogListener
from app.eventstore.store import EventStore, create_pool


@pytest.fixture(autouse=True)
async def replay_matches_after_each_test(request):
    yield
    runtimes = []
    if "server" in request.fixturenames:
        runtimes.append(request.getfixturevalue("server").runtime)
    from app.replay import replay_check
    for rt in runtimes:
        report = await replay_check(rt.store, rt.projector)
        assert report.matches, f"replay differs from live: {report.differences}"


@pytest.fixture
async def two_processes(fresh_database):
    """Two stores on one database, as two workers have; the first with its listener (whose
    periodic safety-net wake-up is pushed out of the test's way)."""
    pools = [await create_pool(fresh_database) for _ in range(2)]
    listener = LogListener(fresh_database, poll_interval=600)
    await listener.start()
    ours, theirs = EventStore(pools[0]), EventStore(pools[1])
    ours.use_wakeups(listener)
    yield ours, theirs, listener
    await listener.stop()
    for p in pools:
        await p.close()

"""Every integration test that writes events ends with a replay check: rebuilding every
projection from position 0 must equal the live read models."""
from __future__ import annotations

import pytest


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

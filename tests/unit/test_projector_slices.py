"""A projector's catch-up folds a long read in slices, letting the event loop run between
them, and ends in the state a fold in one go gives."""
from __future__ import annotations

import asyncio

from app.adapters.memory_log import MemoryLog
from app.eventstore.model import NewEvent
from app.projections.core import CoreModel
from app.projections.runner import Projector
from tests.unit.test_audit_verify import Log


def _workload() -> Log:
    log = Log(lanes=4)
    for a in range(5):
        log.register(f"a{a}", 1000.0)
    for t in range(120):   # requests and completions: several hundred events
        log.request(f"t{t}", f"a{t % 5}", 1001.0 + t)
        log.complete(f"t{t}", 1001.5 + t)
    return log


async def _memory_log(log: Log) -> MemoryLog:
    store = MemoryLog()
    for r in log.records:
        await store.append([NewEvent(r.stream, r.type, r.data, {})])
    return store


async def test_catch_up_lets_the_loop_run_between_slices_and_folds_everything():
    store = await _memory_log(_workload())
    events = await store.read(0, 10_000)
    assert len(events) > 3 * Projector.FOLD_SLICE
    projector = Projector(store, store)
    seen: list[int] = []
    done = asyncio.Event()

    async def watch() -> None:   # runs only when the catch-up lets the loop run
        while not done.is_set():
            seen.append(projector.model.position)
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0)
    folded = await projector.catch_up()
    done.set()
    await watcher
    assert folded == len(events)
    # The watcher ran in the middle of the read, each time between two whole slices.
    middle = [p for p in seen if 0 < p < events[-1].position]
    assert middle and all(p % Projector.FOLD_SLICE == 0 for p in middle)

    at_once = CoreModel()
    for event in events:
        at_once.fold(event)
    assert projector.model.all_docs() == at_once.all_docs()

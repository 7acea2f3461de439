"""cancel_all: a stop returns even when a background loop loses its cancel."""
import asyncio

from app import tasks


async def test_a_task_that_swallows_its_first_cancel_is_cancelled_again():
    swallowed = []

    async def loop():
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(True)   # as wait_for on 3.11 can: the cancel is lost once

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    await tasks.cancel_all([task, None])
    assert swallowed == [True] and task.cancelled()


async def test_a_task_that_never_stops_is_left_behind_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(tasks, "_GIVE_UP_AFTER_S", 0.5)
    monkeypatch.setattr(tasks, "_RECANCEL_EVERY_S", 0.1)
    stop = asyncio.Event()

    async def stubborn():
        while not stop.is_set():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass

    task = asyncio.create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    await tasks.cancel_all([task])
    assert not task.done() and "stubborn" in caplog.text
    stop.set()
    task.cancel()
    await task


async def test_errors_of_finished_tasks_are_retrieved_not_raised():
    async def fails():
        raise RuntimeError("boom")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await tasks.cancel_all([task])
    assert isinstance(task.exception(), RuntimeError)

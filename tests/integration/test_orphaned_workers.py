"""`agentrm serve --workers 2` whose supervisor is killed outright (SIGKILL): its workers
must not go on serving and leading pools with nobody to stop them; they leave."""
from __future__ import annotations

import asyncio
import os
import signal

import asyncpg

from agentrm_bench.load_bench import _children
from tests.client import start_serve
from tests.conftest import OPERATOR_TOKEN

SETTLE = 120.0  # a bound on waiting for a process, never a measured duration


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def _until(predicate, what: str) -> None:
    try:
        async with asyncio.timeout(SETTLE):
            while not await predicate():
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"not within {SETTLE} s: {what}") from None


async def test_workers_leave_when_their_supervisor_is_killed(fresh_database, tmp_path):
    proc, _port = await start_serve(fresh_database, tmp_path, OPERATOR_TOKEN)
    watcher = await asyncpg.connect(fresh_database)
    workers: list[int] = []
    try:
        async def both_listening() -> bool:
            assert proc.returncode is None, "serve exited"
            return await watcher.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                          "current_database() AND query LIKE 'LISTEN%'") >= 2
        await _until(both_listening, "both workers up")
        workers = [pid for pid in _children(proc.pid) if _alive(pid)]
        assert len(workers) >= 2, workers
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()

        async def workers_gone() -> bool:
            return not any(_alive(pid) for pid in workers)
        await _until(workers_gone, "the orphaned workers stop")

        async def sessions_gone() -> bool:
            return await watcher.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                          "current_database() AND pid <> pg_backend_pid()") == 0
        await _until(sessions_gone, "their database sessions close")
    finally:
        await watcher.close()
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

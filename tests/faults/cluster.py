"""Real processes for the fault tests: a PostgreSQL cluster of their own (it gets
restarted, so it cannot be the one the rest of the suite shares) and several separately
started `agentrm serve` processes on their own ports, all on one database."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx

from app.adapters.advisory_lock import lock_key
from app.db.embedded import EmbeddedPostgres, ensure_database
from app.db.migrate import upgrade

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_TOKEN = "op_fault_token_2d8e4b6a9c"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def until(check, timeout: float, what: str, interval: float = 0.02):
    """Poll a condition until it holds (a real process must come up): never a bare sleep."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: did not happen within {timeout:.0f} s")
        await asyncio.sleep(interval)


@dataclass
class Worker:
    name: str
    port: int
    proc: asyncio.subprocess.Process
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/graphql"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass
class FaultCluster:
    tmp: Path
    env_extra: dict = field(default_factory=dict)
    workers: list[Worker] = field(default_factory=list)
    paused: set[int] = field(default_factory=set)   # pids stopped by SIGSTOP

    def __post_init__(self) -> None:
        self.pg = EmbeddedPostgres(ROOT / ".agentrm" / "fault-cluster")

    async def start_database(self, name: str) -> str:
        await asyncio.to_thread(self.pg.start)
        await asyncio.to_thread(ensure_database, self.pg.url("postgres"), name, recreate=True)
        self.url = self.pg.url(name)
        await asyncio.to_thread(upgrade, self.url)
        self.watcher = await asyncpg.connect(self.url)
        return self.url

    async def start_worker(self, name: str) -> Worker:
        port = free_port()
        log = self.tmp / f"{name}.log"
        env = {**os.environ, "DATABASE_URL": self.url, "AGENTRM_OPERATOR_TOKEN": OPERATOR_TOKEN,
               "AGENTRM_DATA_DIR": str(self.tmp), **self.env_extra}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--no-demo", "--no-migrate",
            cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=open(log, "ab"))
        worker = Worker(name, port, proc, log)
        self.workers.append(worker)
        await self.wait_up(worker)
        return worker

    async def wait_up(self, worker: Worker) -> None:
        async def up() -> bool:
            assert worker.proc.returncode is None, f"{worker.name} exited: {worker.log.read_text()[-2000:]}"
            try:
                async with httpx.AsyncClient() as http:
                    return (await http.get(f"http://127.0.0.1:{worker.port}/healthz", timeout=2)).json()["ok"]
            except httpx.HTTPError:
                return False
        await until(up, 120, f"{worker.name} serving", interval=0.1)

    def alive(self) -> list[Worker]:
        """Where a load balancer would send requests: running workers that answer."""
        return [w for w in self.workers if w.proc.returncode is None and w.pid not in self.paused]

    async def leader(self, pool: str) -> Worker | None:
        """The worker whose session holds the pool's lock (its application_name carries its pid)."""
        name = await self.watcher.fetchval(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.classid = (($1::bigint >> 32) & 4294967295)::oid AND l.objid = ($1::bigint & 4294967295)::oid",
            lock_key(pool))
        if not name:
            return None
        pid = int(name.split(":")[2])
        return next((w for w in self.workers if w.pid == pid), None)

    async def lease_row(self, pool: str, holder: Worker):
        """The pool's lease row once `holder` has claimed it (it takes the lock first)."""
        async def claimed():
            row = await self.watcher.fetchrow("SELECT * FROM pool_leaders WHERE pool = $1", pool)
            return row if row is not None and int(row["worker"].split(":")[2]) == holder.pid else None
        return await until(claimed, 30, f"{holder.name} claims the lease of {pool}")

    def signal(self, worker: Worker, sig: signal.Signals) -> None:
        if sig == signal.SIGSTOP:
            self.paused.add(worker.pid)
        elif sig == signal.SIGCONT:
            self.paused.discard(worker.pid)
        os.kill(worker.pid, sig)

    async def restart_database(self) -> None:
        await self.watcher.close()
        await asyncio.to_thread(self.pg.stop)
        await asyncio.to_thread(self.pg.start)
        self.watcher = await asyncpg.connect(self.url)

    async def stop(self) -> None:
        for worker in self.workers:
            if worker.proc.returncode is None:
                try:
                    os.kill(worker.pid, signal.SIGCONT)
                    worker.proc.terminate()
                    await asyncio.wait_for(worker.proc.wait(), 20)
                except (TimeoutError, ProcessLookupError):
                    if worker.proc.returncode is None:
                        worker.proc.kill()
                        await worker.proc.wait()
        if getattr(self, "watcher", None) is not None and not self.watcher.is_closed():
            await self.watcher.close()
        await asyncio.to_thread(self.pg.stop)   # leave no server running behind the test

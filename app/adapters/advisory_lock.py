"""The PostgreSQL adapter of the Leadership port: one session advisory lock per pool.

The lock lives as long as its dedicated connection: a process that dies, or whose session
is killed, gives the pool up, and the next `pg_try_advisory_lock` elsewhere takes it."""
from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator

import asyncpg


def lock_key(pool: str) -> int:
    """A stable signed 64-bit advisory-lock key per pool."""
    return int.from_bytes(hashlib.sha256(f"agentrm-pool:{pool}".encode()).digest()[:8], "big", signed=True)


class _SessionLease:
    def __init__(self, conn: asyncpg.Connection):
        self.conn = conn

    @property
    def held(self) -> bool:
        return not self.conn.is_closed()


class AdvisoryLockLeadership:
    def __init__(self, url: str):
        self.url = url

    @contextlib.asynccontextmanager
    async def lead(self, pool: str) -> AsyncIterator[_SessionLease | None]:
        conn = await asyncpg.connect(self.url)
        try:
            # Looked up at call time, so a test can give each process a lock of its own.
            if await conn.fetchval("SELECT pg_try_advisory_lock($1)", lock_key(pool)):
                yield _SessionLease(conn)
            else:
                yield None
        finally:
            with contextlib.suppress(Exception):
                await conn.close()  # closing the session releases the advisory lock

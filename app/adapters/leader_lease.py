"""The production adapter of the Leadership port: the pool's advisory lock plus a lease.

The session advisory lock alone (app/adapters/advisory_lock.py) elects one leader per pool
and passes leadership on when the leader's process dies, since its session dies with it.
It does not notice a leader that is alive but silent: a process stopped by SIGSTOP, or
stuck for seconds, keeps its connection, so it keeps the lock and its pool stalls.

So the leader also renews a heartbeat row, `pool_leaders(pool, backend_pid, worker,
expires_at)`, every `lease_seconds / 4`, with the database's clock (every process reads
one clock). A standby waits for the lock; when the row's lease has lapsed it terminates
the silent leader's sessions (`pg_terminate_backend`): the lock session, and every session
of that worker that is inside a transaction, since one may be parked inside an append
holding the log's append lock. The lock comes free and the standby takes it on its next poll.

Standbys of all the pools a worker waits for share one watch (`_StandbyWatch`): one
connection and one query per poll for all of them, saying which locks are free and which
leases have lapsed. Only a pool whose lock looks free is tried, on its own connection
(the session advisory lock lives as long as the session that took it).

A leader that wakes after its lease lapsed finds `held` false (its own monotonic clock
says the lease is over, and its lock session is gone), so it steps down before its next
batch. A batch it was in the middle of is fenced off by the pool stream's expected
version: once the new leader has decided anything the stale append fails (and if it has
not, the old leader's state was still the latest, so its decision is a correct one).

Why one writer per pool, and how the lease is sized:
docs/architecture/decisions/one-writer-per-pool.md.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import asyncpg

from app.adapters import advisory_lock

log = logging.getLogger(__name__)

# Every session a worker opens carries this prefix in application_name (see
# app/eventstore/store.py create_pool), so a standby can end all of a silent worker's
# sessions and no one else's.
APPLICATION_PREFIX = "agentrm:"

CLOSE_TIMEOUT_SECONDS = 5.0

_HOLDER = """
SELECT l.pid, a.application_name
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted
  AND l.classid = (($1::bigint >> 32) & 4294967295)::oid AND l.objid = ($1::bigint & 4294967295)::oid
  AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""

_CLAIM = """
INSERT INTO pool_leaders (pool, backend_pid, worker, expires_at)
VALUES ($1, pg_backend_pid(), $2, clock_timestamp() + make_interval(secs => $3))
ON CONFLICT (pool) DO UPDATE SET backend_pid = EXCLUDED.backend_pid, worker = EXCLUDED.worker,
    expires_at = EXCLUDED.expires_at, term = pool_leaders.term + 1, claimed_at = clock_timestamp(),
    previous_expires_at = pool_leaders.expires_at
RETURNING term
"""

_RENEW = """
UPDATE pool_leaders SET expires_at = clock_timestamp() + make_interval(secs => $2)
WHERE pool = $1 AND backend_pid = pg_backend_pid() AND term = $3
"""

# For every pool a worker stands by for, in one round trip: is its lock held, and has the
# holder's lease lapsed (the pid the lease names, or null).
_WATCH = """
WITH held AS MATERIALIZED (
    SELECT classid, objid FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 1
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
SELECT p.pool,
       EXISTS (SELECT 1 FROM held h WHERE h.classid = ((p.key >> 32) & 4294967295)::oid
                                      AND h.objid = (p.key & 4294967295)::oid) AS held,
       (SELECT backend_pid FROM pool_leaders l WHERE l.pool = p.pool AND l.expires_at < clock_timestamp())
           AS lapsed_pid
FROM unnest($1::text[], $2::bigint[]) AS p(pool, key)
"""

_LAPSED = """
SELECT backend_pid, worker FROM pool_leaders
WHERE pool = $1 AND expires_at < clock_timestamp()
"""


class HeldLease:
    """Leadership of one pool as long as the lock session lives, the last renewal was
    accepted, and the lease it bought has not run out by this process's own clock."""

    def __init__(self, conn: asyncpg.Connection, term: int, valid_until: float):
        self.conn, self.term, self.valid_until = conn, term, valid_until
        self.lost: str | None = None

    @property
    def held(self) -> bool:
        return self.lost is None and not self.conn.is_closed() and time.monotonic() < self.valid_until


class LeaseLeadership:
    def __init__(self, url: str, *, lease_seconds: float = 5.0, worker: str = "agentrm:?",
                 poll_seconds: float | None = None):
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.url, self.lease_seconds, self.worker = url, lease_seconds, worker
        # A standby checks the lock and the lease this often: takeover comes at most one
        # poll after the lease lapses (plus the fold of the pool's stream).
        self.poll_seconds = poll_seconds if poll_seconds is not None else min(0.25, lease_seconds / 10)
        self._watch = _StandbyWatch(self)

    @contextlib.asynccontextmanager
    async def lead(self, pool: str) -> AsyncIterator[HeldLease]:
        """Waits until this process leads `pool`, then yields its lease; leaving the context
        (or the session dying) gives the leadership up."""
        conn = await asyncpg.connect(self.url, server_settings={"application_name": self.worker})
        renewing: asyncio.Task | None = None
        try:
            key = advisory_lock.lock_key(pool)  # looked up at call time, as the lock adapter does
            # Tried at once, then each time the worker's standby watch sees the lock free.
            while not await conn.fetchval("SELECT pg_try_advisory_lock($1)", key):
                await self._watch.until_free(pool, key)
            started = time.monotonic()
            term = await conn.fetchval(_CLAIM, pool, self.worker, self.lease_seconds)
            lease = HeldLease(conn, term, started + self.lease_seconds)
            renewing = asyncio.create_task(self._renew(lease, pool), name=f"lease-{pool}")
            log.info("worker %s leads pool %s (term %d)", self.worker, pool, term)
            yield lease
        finally:
            if renewing is not None:
                renewing.cancel()
                with contextlib.suppress(BaseException):
                    await renewing
            try:  # closing the session releases the advisory lock
                await asyncio.wait_for(conn.close(), CLOSE_TIMEOUT_SECONDS)
            except asyncio.CancelledError:
                conn.terminate()
                raise
            except Exception:
                conn.terminate()   # a stop must not wait on an unresponsive server

    async def _renew(self, lease: HeldLease, pool: str) -> None:
        interval = self.lease_seconds / 4
        while lease.held:
            await asyncio.sleep(interval)
            sent = time.monotonic()
            try:
                renewed = await asyncio.wait_for(
                    lease.conn.execute(_RENEW, pool, self.lease_seconds, lease.term), interval * 2)
            except (TimeoutError, asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
                lease.lost = f"lease renewal failed: {exc!r}"
                return
            if renewed != "UPDATE 1":
                lease.lost = "another worker holds the lease"
                return
            # The database's expiry is at least this late: it was set after `sent`.
            lease.valid_until = sent + self.lease_seconds

    async def _end_silent_leader(self, conn: asyncpg.Connection, pool: str, key: int) -> None:
        """If the lock's holder let its lease lapse, end every session of its worker."""
        lapsed = await conn.fetchrow(_LAPSED, pool)
        if lapsed is None:
            return
        holders = await conn.fetch(_HOLDER, key)
        if not holders or holders[0]["pid"] != lapsed["backend_pid"]:
            # The lock is held by a session that has not claimed the lease yet (it is
            # between taking the lock and writing its row): not silent, just new.
            return
        worker = holders[0]["application_name"]
        pids = [lapsed["backend_pid"]]
        if worker and worker.startswith(APPLICATION_PREFIX):
            # Only its sessions inside a transaction: one of them may hold the log's append
            # lock. Its idle pooled sessions stay, so a worker that was only slow keeps
            # serving requests; it just no longer leads.
            pids += [r["pid"] for r in await conn.fetch(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND xact_start IS NOT NULL "
                "AND pid <> pg_backend_pid()", worker)]
        ended = await conn.fetchval(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM unnest($1::int[]) AS t(pid)",
            sorted(set(pids)))
        log.warning("worker %s let its lease on pool %s lapse: ended %d of its sessions",
                    worker, pool, ended)


class _StandbyWatch:
    """The standby polling of one worker: one connection and one query per poll for every
    pool it waits to lead, however many. A pool whose lock is free wakes its waiter (which
    tries the lock on its own connection); one whose leader let its lease lapse gets its
    silent leader's sessions ended. Runs while anyone waits; the last waiter to leave ends it."""

    def __init__(self, leadership: LeaseLeadership):
        self.leadership = leadership
        self.waiting: dict[str, tuple[int, asyncio.Event]] = {}
        self._task: asyncio.Task | None = None

    async def until_free(self, pool: str, key: int) -> None:
        free = asyncio.Event()
        self.waiting[pool] = (key, free)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="standby-watch")
        try:
            await free.wait()
        finally:
            if self.waiting.get(pool, (None, None))[1] is free:
                del self.waiting[pool]
            if not self.waiting and self._task is not None:
                task, self._task = self._task, None
                task.cancel()
                await asyncio.wait([task])   # its connection is closed before we go on

    async def _run(self) -> None:
        lead = self.leadership
        conn: asyncpg.Connection | None = None
        failing = False
        try:
            while self.waiting:
                try:
                    if conn is None or conn.is_closed():
                        conn = await asyncpg.connect(lead.url, server_settings={"application_name": lead.worker})
                    pools = list(self.waiting)
                    rows = await conn.fetch(_WATCH, pools, [self.waiting[p][0] for p in pools])
                    for row in rows:
                        entry = self.waiting.get(row["pool"])
                        if entry is None:
                            continue
                        if not row["held"]:
                            entry[1].set()
                        elif row["lapsed_pid"] is not None:
                            await lead._end_silent_leader(conn, row["pool"], entry[0])
                    failing = False
                except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
                    # The database may be restarting: reconnect on the next poll (said once).
                    if not failing:
                        log.warning("standby watch could not poll (retrying every poll): %r", exc)
                    failing = True
                    if conn is not None:
                        conn.terminate()
                    conn = None
                await asyncio.sleep(lead.poll_seconds)
        finally:
            if conn is not None:
                conn.terminate()   # cancelled mid-query or not: nothing of this session is needed

"""The PostgreSQL adapter of the GatewayReplies port: the `gateway_replies` table, one row
per (agent, key), shared by every worker.

A claim is a row whose `status` is NULL: the first call's worker inserts it (or takes over
an expired or stale one) in one `INSERT ... ON CONFLICT DO UPDATE ... WHERE`, so of two
workers racing on one key exactly one gets the row back. Its `owner` token fences the
rest: only the claim's own worker may renew, finish or drop it, and a worker whose claim
was taken over (it went silent for CLAIM_STALE_SECONDS) finds its finish refused.

A retry that finds the claim running joins it by polling the row (20 ms, doubling to
250 ms): the first call may run on another worker, and a waiting retry is rare enough that
a cheap primary-key read beats a LISTEN channel per key. Rows are coordination state, not
history: nothing replays them, and expired ones are deleted at most once a minute by the
worker that begins a call then.
"""
from __future__ import annotations

import asyncio
import time
import uuid

import asyncpg

from app.ports import (
    CLAIM_STALE_SECONDS,
    CLAIMED,
    MAX_STORED_REPLY_BYTES,
    REUSED,
    RUNNING,
    STORED,
    Begun,
    StoredReply,
)

PURGE_EVERY_S = 60.0
POLL_FIRST_S, POLL_MAX_S = 0.02, 0.25

# $5 is the expiry cutoff (now - window), $6 the staleness cutoff (now - stale), $7 now. A
# stored reply is taken over once expired, a running claim once stale; nothing else.
_CLAIM = """
INSERT INTO gateway_replies AS r (agent_id, key, body_hash, owner, created_at, touched_at)
VALUES ($1, $2, $3, $4, to_timestamp($7), to_timestamp($7))
ON CONFLICT (agent_id, key) DO UPDATE
SET body_hash = EXCLUDED.body_hash, owner = EXCLUDED.owner, status = NULL, headers = NULL, body = NULL,
    created_at = EXCLUDED.created_at, touched_at = EXCLUDED.touched_at
WHERE (r.status IS NOT NULL AND r.created_at <= to_timestamp($5))
   OR (r.status IS NULL AND r.touched_at <= to_timestamp($6))
RETURNING r.owner
"""
_FOUND = "SELECT body_hash, status, headers, body FROM gateway_replies WHERE agent_id = $1 AND key = $2"
_HELD = "agent_id = $1 AND key = $2 AND owner = $3 AND status IS NULL"
_PURGE = """
DELETE FROM gateway_replies
WHERE (status IS NOT NULL AND created_at <= to_timestamp($1)) OR (status IS NULL AND touched_at <= to_timestamp($2))
"""


class PostgresGatewayReplies:
    def __init__(self, pool: asyncpg.Pool, window_s: float, *, stale_s: float = CLAIM_STALE_SECONDS,
                 max_body_bytes: int = MAX_STORED_REPLY_BYTES):
        self.pool, self.window_s, self.stale_s, self.max_body_bytes = pool, window_s, stale_s, max_body_bytes
        self._last_purge = -float("inf")

    async def begin(self, agent_id: str, key: str, body_hash: str, now: float) -> Begun:
        if time.monotonic() - self._last_purge >= PURGE_EVERY_S:
            self._last_purge = time.monotonic()
            await self.purge(now)
        while True:
            owner = uuid.uuid4().hex
            claimed = await self.pool.fetchval(_CLAIM, agent_id, key, body_hash, owner,
                                               now - self.window_s, now - self.stale_s, now)
            if claimed is not None:
                return Begun(CLAIMED, owner=owner)
            row = await self.pool.fetchrow(_FOUND, agent_id, key)
            if row is None:
                continue   # dropped between the two statements: claim again
            if row["body_hash"] != body_hash:
                return Begun(REUSED)
            if row["status"] is None:
                return Begun(RUNNING)
            return Begun(STORED, reply=StoredReply(row["status"], row["headers"] or {}, bytes(row["body"])))

    async def touch(self, agent_id: str, key: str, owner: str, now: float) -> bool:
        done = await self.pool.execute(f"UPDATE gateway_replies SET touched_at = to_timestamp($4) WHERE {_HELD}",
                                       agent_id, key, owner, now)
        return done == "UPDATE 1"

    async def finish(self, agent_id: str, key: str, owner: str, reply: StoredReply, now: float) -> bool:
        if len(reply.body) > self.max_body_bytes:
            await self.abandon(agent_id, key, owner)
            return False
        done = await self.pool.execute(
            f"UPDATE gateway_replies SET status = $4, headers = $5, body = $6, touched_at = to_timestamp($7) "
            f"WHERE {_HELD}", agent_id, key, owner, reply.status, dict(reply.headers), bytes(reply.body), now)
        return done == "UPDATE 1"

    async def abandon(self, agent_id: str, key: str, owner: str) -> None:
        await self.pool.execute(f"DELETE FROM gateway_replies WHERE {_HELD}", agent_id, key, owner)

    async def settled(self, agent_id: str, key: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        interval = POLL_FIRST_S
        while True:
            running = await self.pool.fetchval(
                "SELECT status IS NULL FROM gateway_replies WHERE agent_id = $1 AND key = $2", agent_id, key)
            left = deadline - time.monotonic()
            if not running or left <= 0:
                return
            await asyncio.sleep(min(interval, left))
            interval = min(interval * 2, POLL_MAX_S)

    async def purge(self, now: float) -> int:
        done = await self.pool.execute(_PURGE, now - self.window_s, now - self.stale_s)
        return int(done.split()[-1])

"""Stored message embeddings beside the log: ``context_vectors`` (one float32 vector per
message, migration 0003). The older ``context_embeddings`` (cold chunks, migration 0002) is
no longer written: retrieval ranks single messages.

Derived data, not in the log (re-embedding rebuilds it), so it has its own small adapter
and the context service holds no SQL.
"""
from __future__ import annotations

from collections.abc import Sequence

import asyncpg


class EmbeddingStore:
    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool

    async def vectors_after(self, agent_id: str, after_seq: int) -> list[tuple[int, bytes]]:
        """(seq, float32 bytes) of the agent's stored message vectors with seq > after_seq,
        in seq order: the indexer and the view read only what their cache lacks."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch("SELECT seq, vector FROM context_vectors WHERE agent_id = $1 AND seq > $2 "
                                    "ORDER BY seq", agent_id, after_seq)
        return [(r["seq"], bytes(r["vector"])) for r in rows]

    async def add_vectors(self, rows: Sequence[tuple[str, int, str, bytes]]) -> None:
        """Store (agent_id, seq, model, vector bytes); a message already stored keeps its
        vector (two indexers racing store it once)."""
        async with self.pool.acquire() as conn:
            await conn.executemany(
                "INSERT INTO context_vectors (agent_id, seq, model, vector) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (agent_id, seq) DO NOTHING", rows)

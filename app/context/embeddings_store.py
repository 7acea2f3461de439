"""Stored embeddings of cold chunks: the table ``context_embeddings`` (migration 0002).

Derived data beside the log, not in it (re-embedding rebuilds it), so it has its own
small adapter and the context service holds no SQL.
"""
from __future__ import annotations

from collections.abc import Sequence

import asyncpg


class EmbeddingStore:
    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool

    async def of_agent(self, agent_id: str) -> list[tuple[str, list[float]]]:
        """(chunk_id, embedding) of every stored chunk of one agent."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch("SELECT chunk_id, embedding FROM context_embeddings WHERE agent_id = $1",
                                    agent_id)
        return [(r["chunk_id"], r["embedding"]) for r in rows]

    async def stored_keys(self) -> set[tuple[str, str]]:
        """(agent_id, chunk_id) of every chunk that has an embedding."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch("SELECT agent_id, chunk_id FROM context_embeddings")
        return {(r["agent_id"], r["chunk_id"]) for r in rows}

    async def add(self, rows: Sequence[tuple[str, str, str, list[float]]]) -> None:
        """Store (agent_id, chunk_id, model, embedding) rows; a chunk already stored keeps
        its embedding (two indexers racing store it once)."""
        async with self.pool.acquire() as conn:
            await conn.executemany(
                "INSERT INTO context_embeddings (agent_id, chunk_id, model, embedding) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (agent_id, chunk_id) DO NOTHING", rows)

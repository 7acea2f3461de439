"""Stored message embeddings beside the log: ``context_vectors`` (one float32 vector per
message, migration 0005). Migration 0002's ``context_embeddings`` (one vector per cold
chunk) is not written: retrieval ranks single messages.

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

    async def vectors_after_many(self, after: dict[str, int]) -> dict[str, list[tuple[int, bytes]]]:
        """``vectors_after`` for many agents in one query (agent -> seq it holds through):
        an indexer pass over a fleet costs one round trip, not one per agent."""
        if not after:
            return {}
        agents = list(after)
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT v.agent_id, v.seq, v.vector FROM context_vectors v "
                "JOIN unnest($1::text[], $2::bigint[]) AS t(agent_id, after_seq) ON v.agent_id = t.agent_id "
                "WHERE v.seq > t.after_seq ORDER BY v.agent_id, v.seq", agents, [after[a] for a in agents])
        out: dict[str, list[tuple[int, bytes]]] = {}
        for r in rows:
            out.setdefault(r["agent_id"], []).append((r["seq"], bytes(r["vector"])))
        return out

    async def stored_through_many(self, agents: Sequence[str]) -> dict[str, int]:
        """The highest seq with a stored vector, per agent (agents with none are absent):
        what an indexer needs to know of an agent whose vectors it does not cache."""
        if not agents:
            return {}
        async with self.pool.acquire() as conn:
            rows = await conn.fetch("SELECT agent_id, max(seq) AS seq FROM context_vectors "
                                    "WHERE agent_id = ANY($1::text[]) GROUP BY agent_id", list(agents))
        return {r["agent_id"]: r["seq"] for r in rows}

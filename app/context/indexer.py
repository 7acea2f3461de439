"""The incremental message indexer: embeds each agent's new messages off the request path,
stores them (``context_vectors``) and keeps the in-process caches the views rank with.

Incremental: per agent it remembers the last seq it holds (``VectorCache``); a pass reads
from the table only rows after it (another worker may have stored them), embeds only the
messages still missing, and appends both to the cached matrix. Nothing ever reads the
whole table. A hibernating agent's caches are dropped (``forget``); its next view or
wake reloads them with one indexed query.
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable

import numpy as np

from app.domain import context as ctx

from .embeddings_store import EmbeddingStore
from .retrieval import AgentVectors, LexicalCache, VectorCache, from_bytes, to_bytes

MODEL_NAME = "all-MiniLM-L6-v2"
BATCH = 256  # messages embedded per model call: one call's CPU stays well under a second


def messages_of(state: ctx.AgentContext) -> list[ctx.ContextMessage]:
    """Every unpinned message of the agent, hot and cold, in seq order (pinned ones are
    always in the view; they need no ranking)."""
    return sorted((m for m in state.cold.messages + state.hot if not m.pinned), key=lambda m: m.seq)


class MessageIndexer:
    def __init__(self, embeddings: EmbeddingStore, embedder_of, *, cache_bytes: int = 512 * 1024 * 1024):
        self.embeddings = embeddings
        self._embedder_of = embedder_of      # a callable: the model loads lazily, on first use
        self.vectors = VectorCache(cache_bytes)
        self.lexical = LexicalCache()
        self._locks: dict[str, asyncio.Lock] = {}
        self.embedded = 0                    # messages embedded by this process (for reports)

    def _lock(self, agent_id: str) -> asyncio.Lock:
        return self._locks.setdefault(agent_id, asyncio.Lock())

    async def load(self, agent_id: str) -> AgentVectors:
        """The agent's cached vectors, topped up with any rows stored since (by anyone)."""
        entry = self.vectors.get(agent_id) or AgentVectors()
        rows = await self.embeddings.vectors_after(agent_id, entry.through)
        if rows:
            entry = self.vectors.extend(agent_id, [s for s, _ in rows], from_bytes([b for _, b in rows]))
        elif self.vectors.get(agent_id) is None:
            entry = self.vectors.extend(agent_id, [], np.zeros((0, 384), dtype=np.float32))
        return entry

    async def index(self, state: ctx.AgentContext) -> int:
        """Embed and store the agent's messages that have no vector yet; how many."""
        if state.hibernated:
            return 0
        async with self._lock(state.agent_id):
            entry = await self.load(state.agent_id)
            todo = [m for m in messages_of(state) if m.seq > entry.through]
            done = 0
            for start in range(0, len(todo), BATCH):
                batch = todo[start:start + BATCH]
                vectors = await asyncio.to_thread(self._embedder_of().embed, [m.content for m in batch])
                await self.embeddings.add_vectors(
                    [(state.agent_id, m.seq, MODEL_NAME, to_bytes(v)) for m, v in zip(batch, vectors)])
                self.vectors.extend(state.agent_id, [m.seq for m in batch], vectors)
                done += len(batch)
            self.embedded += done
            # Rebuild the agent's BM25 index here too, off the request path: the next view
            # finds it current instead of rebuilding it (~30 ms at 30k tokens).
            messages = [(m.seq, m.content) for m in messages_of(state)]
            await asyncio.to_thread(self.lexical.index_of, state.agent_id, messages)
            return done

    def pending(self, states: Iterable[ctx.AgentContext]) -> list[ctx.AgentContext]:
        """Awake agents whose newest unpinned message is past what the cache holds (an
        agent not cached at all counts: its rows may be stored, index() reads them)."""
        out = []
        for state in states:
            if state.hibernated or state.last_seq == 0:
                continue
            entry = self.vectors.get(state.agent_id)
            newest = max((m.seq for m in state.hot if not m.pinned), default=0)
            if entry is None or newest > entry.through:
                out.append(state)
        return out

    def lag(self, states: Iterable[ctx.AgentContext]) -> int:
        """Messages appended but not yet in the cache, over all awake agents."""
        total = 0
        for state in states:
            if state.hibernated:
                continue
            entry = self.vectors.get(state.agent_id)
            through = entry.through if entry else 0
            total += sum(1 for m in messages_of(state) if m.seq > through)
        return total

    def forget(self, agent_id: str) -> None:
        self.vectors.drop(agent_id)
        self.lexical.drop(agent_id)

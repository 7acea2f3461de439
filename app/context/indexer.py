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
from collections.abc import Iterable, Sequence

import numpy as np

from app.domain import context as ctx

from .embedding_lane import EmbeddingLane
from .embeddings_store import EmbeddingStore
from .retrieval import AgentVectors, LexicalCache, VectorCache, from_bytes, to_bytes

MODEL_NAME = "all-MiniLM-L6-v2"
BATCH = 256  # messages per indexing batch (the lane embeds them in small pieces)


def messages_of(state: ctx.AgentContext) -> list[ctx.ContextMessage]:
    """Every unpinned message of the agent, hot and cold, in seq order (pinned ones are
    always in the view; they need no ranking)."""
    return sorted((m for m in state.cold.messages + state.hot if not m.pinned), key=lambda m: m.seq)


def messages_after(state: ctx.AgentContext, through: int) -> list[ctx.ContextMessage]:
    """The unpinned messages with seq > ``through``, in seq order, read from the end of
    each tier (both are in seq order), so a pass over a fleet costs each agent its backlog,
    not its whole history."""
    out = []
    for tier in (state.cold.messages, state.hot):
        for i in range(len(tier) - 1, -1, -1):
            if tier[i].seq <= through:
                break
            if not tier[i].pinned:
                out.append(tier[i])
    return sorted(out, key=lambda m: m.seq)


class MessageIndexer:
    def __init__(self, embeddings: EmbeddingStore, embedder_of=None, *, lane: EmbeddingLane | None = None,
                 cache_bytes: int = 512 * 1024 * 1024, batch: int = BATCH):
        self.embeddings = embeddings
        # Every model call goes through the lane, where queries overtake indexing batches.
        self.lane = lane or EmbeddingLane(embedder_of)
        self.batch = batch
        self.vectors = VectorCache(cache_bytes)
        self.lexical = LexicalCache()
        self._pass = asyncio.Lock()          # one pass at a time per process
        self.stored: dict[str, int] = {}     # per agent: the seq its stored vectors reach
        self.embedded = 0                    # messages embedded by this process (for reports)

    async def load(self, agent_id: str, newest: int | None = None) -> AgentVectors:
        """The agent's cached vectors, topped up with any rows stored since (by anyone).
        When the cache already reaches ``newest`` (the agent's last unpinned seq) there is
        nothing to read, and the view skips the round trip."""
        cached = self.vectors.get(agent_id)
        if cached is not None and newest is not None and cached.through >= newest:
            return cached
        entry = cached or AgentVectors()
        rows = await self.embeddings.vectors_after(agent_id, entry.through)
        entry = self._top_up(agent_id, rows)
        self.stored[agent_id] = max(self.stored.get(agent_id, 0), entry.through)
        return entry

    def _top_up(self, agent_id: str, rows: list[tuple[int, bytes]]) -> AgentVectors:
        if rows:
            return self.vectors.extend(agent_id, [s for s, _ in rows], from_bytes([b for _, b in rows]))
        entry = self.vectors.get(agent_id)
        return entry if entry is not None else self.vectors.extend(
            agent_id, [], np.zeros((0, 384), dtype=np.float32))

    async def index(self, state: ctx.AgentContext) -> int:
        """Embed and store the agent's messages that have no vector yet; how many."""
        return await self.index_many([state])

    async def index_many(self, states: Sequence[ctx.AgentContext]) -> int:
        """Embed and store every given agent's messages that have no vector yet, across
        agents in shared batches (one message per agent per append is the usual backlog:
        per-agent model calls would each pay a whole call for one message). Per batch: two
        queries learn what others stored meanwhile, one model job (cut into small lane
        batches that queries overtake), one multi-row insert. Returns how many messages
        this process embedded."""
        states = [s for s in states if not s.hibernated]
        done = 0
        async with self._pass:
            while states:
                group, states = self._fill(states)
                done += await self._index_group(group)
        self.embedded += done
        return done

    def _fill(self, states: list[ctx.AgentContext]) -> tuple[list[ctx.AgentContext], list[ctx.AgentContext]]:
        """The next agents whose backlog (as far as this process knows) fits one batch
        (at least one agent, however large its backlog: it is embedded in pieces)."""
        group: list[ctx.AgentContext] = []
        total = 0
        for i, state in enumerate(states):
            waiting = len(messages_after(state, self.stored.get(state.agent_id, 0)))
            if group and total + waiting > self.batch:
                return group, states[i:]
            group.append(state)
            total += waiting
        return group, []

    async def _learn_stored(self, group: list[ctx.AgentContext]) -> None:
        """Catch up with rows other workers (or this one before a restart) stored: cached
        agents get the rows themselves, the others only the seq they reach. The vector
        cache is filled by views, never by the indexer: a pass over a fleet larger than
        the cache would otherwise evict and reload agents on every pass."""
        cached = {s.agent_id: vectors.through for s in group
                  if (vectors := self.vectors.get(s.agent_id)) is not None}
        for agent_id, rows in (await self.embeddings.vectors_after_many(cached)).items():
            self.stored[agent_id] = max(self.stored.get(agent_id, 0), self._top_up(agent_id, rows).through)
        for agent_id, through in cached.items():
            self.stored[agent_id] = max(self.stored.get(agent_id, 0), through)
        others = [s.agent_id for s in group if s.agent_id not in cached]
        for agent_id, seq in (await self.embeddings.stored_through_many(others)).items():
            self.stored[agent_id] = max(self.stored.get(agent_id, 0), seq)

    async def _index_group(self, group: list[ctx.AgentContext]) -> int:
        await self._learn_stored(group)
        todo: list[tuple[str, ctx.ContextMessage]] = []
        for state in group:
            todo += [(state.agent_id, m) for m in messages_after(state, self.stored.get(state.agent_id, 0))]
        done = 0
        for start in range(0, len(todo), self.batch):
            piece = todo[start:start + self.batch]
            vectors = await self.lane.embed_background([m.content for _, m in piece])
            await self.embeddings.add_vectors(
                [(agent_id, m.seq, MODEL_NAME, to_bytes(v)) for (agent_id, m), v in zip(piece, vectors)])
            for agent_id in dict.fromkeys(a for a, _ in piece):
                rows = [(m.seq, v) for (a, m), v in zip(piece, vectors) if a == agent_id]
                entry = self.vectors.get(agent_id)
                if entry is not None and entry.through == self.stored.get(agent_id, 0):
                    self.vectors.extend(agent_id, [s for s, _ in rows], np.stack([v for _, v in rows]))
                self.stored[agent_id] = max(self.stored.get(agent_id, 0), rows[-1][0])
            done += len(piece)
        await self._extend_lexical(group)
        return done

    async def _extend_lexical(self, group: list[ctx.AgentContext]) -> None:
        """Keep the BM25 indexes that views use current, off the request path: tokenizing
        (the costly part) in a thread, adding the tokens on the loop. An agent no view has
        asked about gets no index here; its first view builds it."""
        held = [(s.agent_id, [(m.seq, m.content) for m in messages_of(s)]) for s in group
                if self.lexical.holds(s.agent_id)]
        held = [(a, msgs) for a, msgs in held if self.lexical.missing(a, msgs)]
        if not held:
            return
        # (the list is only the calls' vehicle: tokenize_new returns nothing)
        await asyncio.to_thread(
            lambda: [self.lexical.tokenize_new(a, msgs) for a, msgs in held])  # type: ignore[func-returns-value]
        for agent_id, msgs in held:
            self.lexical.index_of(agent_id, msgs)

    def pending(self, states: Iterable[ctx.AgentContext]) -> list[ctx.AgentContext]:
        """Awake agents whose newest unpinned message is past what is known stored (an
        agent not known at all counts: its rows may be stored, a pass learns them)."""
        out = []
        for state in states:
            if state.hibernated or state.last_seq == 0:
                continue
            newest = next((m.seq for m in reversed(state.hot) if not m.pinned), 0)
            if state.agent_id not in self.stored or newest > self.stored[state.agent_id]:
                out.append(state)
        return out

    def lag(self, states: Iterable[ctx.AgentContext]) -> int:
        """Messages appended but not yet embedded, over all awake agents."""
        total = 0
        for state in states:
            if not state.hibernated:
                total += len(messages_after(state, self.stored.get(state.agent_id, 0)))
        return total

    def forget(self, agent_id: str) -> None:
        self.vectors.drop(agent_id)
        self.stored.pop(agent_id, None)
        self.lexical.drop(agent_id)

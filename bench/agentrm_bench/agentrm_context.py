"""AgentRM's context, driven in process the way the service drives it: the domain fold,
compaction planned by the domain and carried out by the compactor (here right after the
append that crossed the watermark: what the background worker does when it keeps up), one
MiniLM vector per message as the indexer stores them, and ``assemble_view`` with the
hybrid ranking of app.context.retrieval for a query."""
from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from app.context.compactor import compact
from app.context.retrieval import LexicalCache, VectorCache, hybrid_ranking
from app.context.summarize import ExtractiveSummarizer
from app.context.tokens import count_message, count_text
from app.domain import context as domain

AGENT = "bench"


@lru_cache(maxsize=500_000)
def cached_count_message(role: str, content: str) -> int:
    return count_message(role, content)


@lru_cache(maxsize=500_000)
def cached_count_text(text: str) -> int:
    return count_text(text)


# frozen, so one shared default instance is safe (as the default argument was)
DEFAULT_VIEW_SETTINGS = domain.ViewSettings()
DEFAULT_COMPACTION = domain.CompactionSettings()


class AgentRMContext:
    def __init__(self, compaction_budget: int, summarizer: ExtractiveSummarizer, embedder, query_embedder,
                 view_settings: domain.ViewSettings = DEFAULT_VIEW_SETTINGS,
                 compaction: domain.CompactionSettings = DEFAULT_COMPACTION,
                 neighbour_weight: float | None = None, dense: bool = True, bm25: bool = True,
                 supersession: bool = True) -> None:
        self.budget = compaction_budget
        self.summarizer = summarizer
        self.embedder = embedder              # message vectors (may be a cache shared by runs)
        self.query_embedder = query_embedder  # the model itself: query latency is real
        self.view_settings = view_settings
        self.compaction = compaction
        self.ranking_options = {"dense": dense, "bm25": bm25,
                                **({} if neighbour_weight is None else {"neighbour_weight": neighbour_weight})}
        self.supersession = supersession
        self.state = domain.new_context(AGENT)
        self.vectors = VectorCache()
        self.lexical = LexicalCache()
        self.compactions = self.summary_sentences = self.summary_tokens = 0

    def feed(self, role: str, content: str, pinned: bool, at: float) -> None:
        seq = self.state.last_seq + 1
        self.state = domain.apply(self.state, domain.CONTEXT_APPENDED, {
            "agent_id": AGENT, "seq": seq, "role": role, "content": content, "pinned": pinned,
            "tokens": cached_count_message(role, content), "at": at})
        if not pinned:
            self.vectors.extend(AGENT, [seq], self.embedder.embed([content]))
        plan = domain.plan_compaction(self.state, self.budget, self.compaction, at)
        if plan is None:
            return
        data = compact(self.state, plan, self.summarizer, cached_count_text, at)
        if not self.supersession:
            data["superseded"] = []
        self.state = domain.apply(self.state, domain.CONTEXT_COMPACTED, json.loads(json.dumps(data)))
        self.compactions += 1
        self.summary_sentences += int(data["cost"].get("sentences", 0))
        self.summary_tokens += data["summary_tokens"]

    def ranking(self, query: str, **options) -> list[int]:
        messages = sorted((m for m in self.state.cold.messages + self.state.hot if not m.pinned),
                          key=lambda m: m.seq)
        lexical = self.lexical.index_of(AGENT, [(m.seq, m.content) for m in messages])
        vector = self.query_embedder.embed([query])[0]
        return hybrid_ranking(vector, self.lexical.tokenize(query), [m.seq for m in messages],
                              self.vectors.get(AGENT), lexical, **{**self.ranking_options, **options})

    def view(self, query: str | None, now: float, budget: int, view_settings: domain.ViewSettings | None = None,
             **ranking_options) -> domain.ContextView:
        """``view_settings`` and ``ranking_options`` (neighbour_weight, dense, bm25) override
        the constructor's for this view only: ablations share one fold."""
        ranking = self.ranking(query, **ranking_options) if query else None
        return domain.assemble_view(self.state, budget, None, cached_count_message, now,
                                    view_settings or self.view_settings, ranking=ranking)


def view_messages(view: domain.ContextView) -> list[tuple[str, str]]:
    return [(i.role, i.content) for i in view.items]


def seqs_in(view: domain.ContextView) -> Sequence[str]:
    return [i.ref for i in view.items if i.kind in ("message", "pinned")]


class CachingEmbedder:
    """Memoises embeddings by text (the same conversation is embedded once for every
    strategy and budget); latency is measured on the model itself, not through this."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.cache: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            for text, vector in zip(missing, self.inner.embed(missing)):
                self.cache[text] = vector
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([self.cache[t] for t in texts])

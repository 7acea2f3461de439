"""The embedding model in a child process of its own, at a lower CPU priority: where the
server's background work runs (the indexer's messages, and whole compactions: key facts,
the summary and its sentences' embeddings, the cold chunks and their token counts).

Why a process: that work is most of the server's CPU (~30 ms per message on one core), and
in a thread of the server it would hold the server's GIL for the model's Python glue, so every
request the event loop served meanwhile would wait for the interpreter as well as for a core.
In a child it shares no interpreter with the request path, and the child's ``nice`` makes
the kernel give a core to the requests (and to PostgreSQL) first: background work takes
what they leave. Queries stay in the server process (app.context.embedding_lane): a view
waits for its own embedding only, never for a background batch in progress.

Compactions with the extractive summarizer run here whole, not in a thread of the server:
their key-fact extraction and chunking are pure-Python regex and counting work (~0.1-1 s a
compaction), and in a thread they held the server's GIL for that long, in slices, while
appends and views waited for the interpreter (a profile of the append phase found the
compaction thread holding the GIL in over half of the samples). The summary's sentences
are embedded in length-sorted batches of 4, as the lane hands the indexer's texts over (the
cheapest per text). Only the span's tiers travel (``compaction_input``): the cold archive,
most of an agent's history, stays behind. The child builds the tokenizer's tables of the
pools it compacts for (cl100k: ~40 MB, 0.1 s, once). A compaction with an LLM summarizer
stays in the server (app.context.service): it waits on a remote model, and here it would
hold up indexing for as long.

The child (app.context.child_process) is spawned on the first call, loads the model there
once, is stopped by ``close`` and replaced on the next call if it died.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app import config

from .child_process import ChildProcess, background_nice, start_child
from .embedder import EMBEDDING_DIM, embedding_threads


def _start_child(nice: int, threads: int) -> None:
    config.export_embedding_threads(threads)
    start_child(nice)


def _embed_in_child(texts: list[str]) -> np.ndarray:
    from .embedder import default_embedder
    return default_embedder().embed(texts)


class SortedBatches:
    """A ``TextEmbedder`` that embeds in length-sorted batches of ``chunk`` texts."""

    def __init__(self, model, chunk: int) -> None:
        self.model, self.chunk = model, chunk

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from .embedding_lane import joined, sorted_chunks
        order, batches = sorted_chunks(list(texts), self.chunk)
        return joined(order, [self.model.embed(batch) for batch in batches])


def _compact_in_child(state, plan, encoding: str, now: float) -> dict:
    """ContextCompacted data for ``plan`` (app.context.compactor.compact) with the extractive
    summarizer on this process's model."""
    from .compactor import FACT_EXTRACTION_BUDGET_S, compact
    from .embedder import default_embedder
    from .embedding_lane import DEFAULT_CHUNK
    from .summarize import ExtractiveSummarizer
    from .tokens import count_text
    summarizer = ExtractiveSummarizer(SortedBatches(default_embedder(), DEFAULT_CHUNK))
    return compact(state, plan, summarizer, lambda text: count_text(text, encoding), now,
                   extraction_budget_s=FACT_EXTRACTION_BUDGET_S)


def compaction_input(state):
    """What a compaction reads of an agent's context (hot, warm, facts): the cold archive,
    which it never reads, is left out of what is sent to the child."""
    from dataclasses import replace

    from app.domain.context.state import ColdArchive
    return replace(state, cold=ColdArchive(), resume_point=None)


__all__ = ["ModelProcess", "SortedBatches", "background_nice", "compaction_input"]


class ModelProcess(ChildProcess):
    """A ``TextEmbedder`` whose ``embed`` runs in the child (blocking the caller's thread,
    which waits without the GIL)."""

    def __init__(self, nice: int | None = None) -> None:
        # the thread count is read here: a bad setting stops the caller now
        super().__init__(background_nice() if nice is None else nice, _start_child, (embedding_threads(),))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-normalised float32 embeddings, shape (len(texts), 384)."""
        if len(texts) == 0:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        return self.call(_embed_in_child, list(texts))

    def compact(self, state, plan, encoding: str, now: float) -> dict:
        """ContextCompacted data for ``plan`` on ``state``, computed in the child with the
        extractive summarizer."""
        return self.call(_compact_in_child, compaction_input(state), plan, encoding, now)


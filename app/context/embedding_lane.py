"""One lane to the embedding model, where a query's embedding never waits behind indexing.

The model runs on the same few cores as everything else, and two model calls in one
interpreter only slow each other down (torch's threads oversubscribe the cores, and the
glue between its kernels needs the GIL). Every call goes through the lane's worker
threads:

- with one model (``embedder_of`` only), one worker takes calls in priority order: a
  view's query first, then indexing, cut into small batches (``chunk`` texts, sorted by
  length so a batch pads little), so a query that arrives mid-indexing waits for at most one small batch;
- with a background model too (``background_of``, the server's: a child process at a
  lower CPU priority, app.context.model_process), queries have a worker of their own on
  the in-process model, and background batches go to the other: a query then waits for
  no batch at all.

Queries are also cached (LRU, per text): an agent that asks again, or a fleet sharing a
prompt, costs one embedding. Vectors are read-only arrays, safe to share.

``close`` stops the workers (a shutdown must not leave threads behind); calls still
waiting then fail with ``LaneClosed``.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .embedder import TextEmbedder

QUERY, BACKGROUND = 0, 1
_STOP = -1   # sorts before every job: a closing worker stops before taking another
# Texts per background batch: the most a query waits behind. Length-sorted batches of 4
# cost no more CPU per message than larger ones (measured, one torch thread, ~90 word
# pieces a message: 37 ms/message at 4, 43 at 16, 74 at 64), so small costs nothing.
DEFAULT_CHUNK = 4
DEFAULT_QUERY_CACHE = 4096  # query vectors kept (1.5 kB each)


def sorted_chunks(texts: Sequence[str], chunk: int) -> tuple[list[int], list[list[str]]]:
    """``texts`` cut into batches of ``chunk`` in length order (a batch pads little), and the
    order, for ``joined``."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    return order, [[texts[i] for i in order[s:s + chunk]] for s in range(0, len(order), chunk)]


def joined(order: list[int], parts: list[np.ndarray]) -> np.ndarray:
    """The vectors of ``sorted_chunks``' batches back in the texts' own order."""
    stacked = np.concatenate(parts) if parts else np.zeros((0, 384), dtype=np.float32)
    out = np.empty_like(stacked)
    out[np.asarray(order, dtype=np.int64)] = stacked
    return out


class LaneClosed(RuntimeError):
    """The lane was closed (the server is stopping) before this call ran."""


class EmbeddingLane:
    def __init__(self, embedder_of: Callable[[], TextEmbedder], *,
                 background_of: Callable[[], TextEmbedder] | None = None,
                 chunk: int = DEFAULT_CHUNK, query_cache: int = DEFAULT_QUERY_CACHE) -> None:
        if chunk < 1 or query_cache < 0:
            raise ValueError("chunk must be >= 1 and query_cache >= 0")
        # callables: the models load lazily, on first use
        self._models = {QUERY: embedder_of, BACKGROUND: background_of or embedder_of}
        self.chunk = chunk
        self._jobs: queue.PriorityQueue = queue.PriorityQueue()
        # one queue (and worker) per model: with a single model, background waits behind queries
        self._queues = {QUERY: self._jobs,
                        BACKGROUND: self._jobs if background_of is None else queue.PriorityQueue()}
        self._order = itertools.count()      # FIFO within a priority
        self._workers: dict[int, threading.Thread] = {}
        self._start_lock = threading.Lock()
        self._closed = False
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = query_cache
        self._cache_lock = threading.Lock()
        self.query_hits = self.query_misses = 0
        self.background_texts = 0

    # -- the worker --------------------------------------------------------------------------
    def _worker_for(self, priority: int) -> None:
        """Start the worker of ``priority``'s queue (under the start lock)."""
        jobs = self._queues[priority]
        key = QUERY if jobs is self._jobs else BACKGROUND
        if key not in self._workers:
            name = "embedding-lane" if key == QUERY else "embedding-lane-background"
            worker = threading.Thread(target=self._run, args=(jobs,), name=name, daemon=True)
            self._workers[key] = worker
            worker.start()

    def _run(self, jobs: queue.PriorityQueue) -> None:
        while True:
            priority, _n, texts, future = jobs.get()
            if priority == _STOP:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._models[priority]().embed(texts))
            except BaseException as exc:  # handed to the caller, never lost in the thread
                future.set_exception(exc)

    def _submit(self, priority: int, texts: list[str]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._start_lock:
            if self._closed:
                raise LaneClosed("the embedding lane is closed")
            self._worker_for(priority)
            self._queues[priority].put((priority, next(self._order), texts, future))
        return future

    def pending(self) -> int:
        """Batches waiting for a worker (for reports). A worker's stop sentinel is not a
        batch: while close waits for the call in progress, it is not pending work."""
        queues = {id(q): q for q in self._queues.values()}
        count = 0
        for q in queues.values():
            with q.mutex:
                count += sum(1 for item in q.queue if item[0] != _STOP)
        return count

    @property
    def workers(self) -> list[threading.Thread]:
        with self._start_lock:
            return list(self._workers.values())

    def close(self, timeout: float = 30.0) -> None:
        """Stop the workers: the call in progress finishes, the waiting ones fail with
        ``LaneClosed``, and this returns when the threads have ended (or after ``timeout``,
        with a model call that hangs: the threads are daemons, so they never keep the
        process alive). Idempotent; the lane takes no calls until ``open``."""
        with self._start_lock:
            self._closed = True
            workers, self._workers = dict(self._workers), {}
            queues = {id(q): q for q in self._queues.values()}.values()
        for jobs in queues:
            while True:
                try:
                    _p, _n, _texts, future = jobs.get_nowait()
                except queue.Empty:
                    break
                if future is not None and future.set_running_or_notify_cancel():
                    future.set_exception(LaneClosed("the embedding lane closed before this call ran"))
        for key in workers:
            self._queues[key].put((_STOP, next(self._order), None, None))
        for worker in workers.values():
            worker.join(timeout)

    def open(self) -> None:
        """Take calls again after ``close`` (a service stopped and started again); the
        workers start with the first call."""
        with self._start_lock:
            self._closed = False

    # -- queries ---------------------------------------------------------------------------
    def _cached(self, text: str) -> np.ndarray | None:
        with self._cache_lock:
            vector = self._cache.get(text)
            if vector is not None:
                self._cache.move_to_end(text)
                self.query_hits += 1
            else:
                self.query_misses += 1
            return vector

    def _remember(self, text: str, vector: np.ndarray) -> np.ndarray:
        vector = np.array(vector, dtype=np.float32)
        vector.flags.writeable = False   # shared by every caller that asks the same
        if self._cache_size == 0:
            return vector
        with self._cache_lock:
            self._cache[text] = vector
            self._cache.move_to_end(text)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return vector

    async def query(self, text: str) -> np.ndarray:
        """The query's vector, ahead of any background batch still waiting."""
        vector = self._cached(text)
        if vector is None:
            vector = self._remember(text, (await asyncio.wrap_future(self._submit(QUERY, [text])))[0])
        return vector

    # -- background: indexing ---------------------------------------------------------------
    def _chunks(self, texts: Sequence[str]) -> tuple[list[int], list[concurrent.futures.Future]]:
        order, batches = sorted_chunks(texts, self.chunk)
        futures = [self._submit(BACKGROUND, batch) for batch in batches]
        self.background_texts += len(texts)
        return order, futures

    async def embed_background(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` in their order, computed in small batches that queries
        overtake."""
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        order, futures = self._chunks(texts)
        parts = [await asyncio.wrap_future(f) for f in futures]
        return joined(order, parts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The same, blocking (a ``TextEmbedder``): for code that runs in a thread of its own,
        such as the benchmarks' extractive summarizer. Never call it from the event loop."""
        if len(texts) == 0:
            return np.zeros((0, 384), dtype=np.float32)
        order, futures = self._chunks(list(texts))
        return joined(order, [f.result() for f in futures])

"""A worker process of the server's own, for background work that must not hold the server's
interpreter: one spawned child at a lower CPU priority that runs calls one at a time.

The child is spawned (never forked: the server has threads and an event loop) on the
first call and stopped by ``close``. A child that died (killed for memory, say) fails the
calls in flight with ``BrokenProcessPool`` and is replaced on the next call. A server
killed outright cannot stop it, so the child leaves by itself once its parent is gone.

The background model's process (app.context.model_process) and the fact extractor's
(app.context.fact_process) are two of these.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from app import config


def background_nice(env: Mapping[str, str] | None = None) -> int:
    """The children's niceness, AGENTRM_EMBEDDING_NICE (ConfigError, a ValueError, when bad).

    Background work yields the cores to requests: the default, nice 10, gets ~1/10 of a
    core's share against a busy nice-0 thread, and all of an idle core (0: the same
    priority as the server)."""
    return (config.load() if env is None else config.Settings.from_mapping(env)).embedding_nice


_ORPHAN_CHECK_SECONDS = 1.0
CLOSE_TIMEOUT_S = 5.0   # the most a stop waits for the child's call in progress


def _exit_when_orphaned(parent: int) -> None:
    """A server killed outright (SIGKILL, the OOM killer) cannot stop its child, and the
    child would wait for calls for ever, holding its memory: it leaves once its parent is
    gone (it is then re-parented, so ``getppid`` changes)."""
    while True:
        time.sleep(_ORPHAN_CHECK_SECONDS)
        if os.getppid() != parent:
            os._exit(0)


def start_child(nice: int) -> None:
    """In the child, first: lower its priority and watch for the parent's end."""
    if nice:
        os.nice(nice)
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), name="orphan-check",
                     daemon=True).start()


def child_pid() -> int:
    return os.getpid()


class ChildProcess:
    """Calls run in the child, blocking the caller's thread (which waits without the GIL).
    ``initializer(nice, *initargs)`` runs first in each child; it must call ``start_child``."""

    def __init__(self, nice: int, initializer: Callable[..., None] = start_child,
                 initargs: tuple = ()) -> None:
        if not 0 <= nice <= 19:
            raise ValueError(f"nice must be 0 to 19, not {nice!r}")
        self.nice = nice
        self._initializer, self._initargs = initializer, initargs
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {type(self).__name__} is closed")
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    1, mp_context=multiprocessing.get_context("spawn"), initializer=self._initializer,
                    initargs=(self.nice, *self._initargs))
            return self._pool

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the child (both picklable), waited for."""
        pool = self._executor()
        try:
            return pool.submit(fn, *args).result()
        except BrokenProcessPool:
            with self._lock:   # the child is gone: the next call starts another
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise

    def pid(self) -> int:
        """The child's process id (starting it if need be)."""
        return self.call(child_pid)

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
        progress may finish within ``timeout``, else the child is terminated and that call
        fails too, so a stopping server never waits long for background work. Idempotent."""
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

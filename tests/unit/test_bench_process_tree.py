"""The benchmarks count a server's CPU over its whole process tree, including children
that a worker thread started (the background embedding process is one): /proc lists such
a child under that thread for as long as the thread lives."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

from agentrm_bench.load_bench import _tree


def test_a_child_started_by_a_live_thread_is_in_the_tree():
    started: list[subprocess.Popen] = []
    ready, done = threading.Event(), threading.Event()

    def starter() -> None:
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        ready.set()
        done.wait(60)   # the thread stays alive, as the server's lane worker does

    thread = threading.Thread(target=starter)
    thread.start()
    ready.wait(60)
    child = started[0]
    try:
        assert child.pid in _tree(os.getpid())
    finally:
        done.set()
        thread.join()
        child.kill()
        child.wait()
    assert child.pid not in _tree(os.getpid())

"""The benchmarks count a server's CPU over its whole process tree, including children
that a worker thread started (the background embedding process is one)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

from agentrm_bench.load_bench import _tree


def test_a_child_started_by_a_thread_is_in_the_tree():
    started: list[subprocess.Popen] = []
    thread = threading.Thread(target=lambda: started.append(
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])))
    thread.start()
    thread.join()
    child = started[0]
    try:
        assert child.pid in _tree(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert child.pid not in _tree(os.getpid())

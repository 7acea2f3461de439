"""Stopping the server processes a benchmark starts."""
from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen, grace: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace`` seconds: a benchmark's
    server must never outlive the benchmark, whatever state it is in."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

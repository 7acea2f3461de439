"""The background model's child process: the same vectors as the in-process model, in a
process of its own at a lower CPU priority, stopped by close and replaced after a crash."""
from __future__ import annotations

import os
import signal
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest

from app.context.embedder import default_embedder
from app.context.model_process import ModelProcess


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_child_embeds_as_the_in_process_model_does_and_close_stops_it():
    model = ModelProcess(nice=5)
    try:
        texts = ["the port is 8080", "deploy to eu-west-1 on Friday", "x"]
        np.testing.assert_allclose(model.embed(texts), default_embedder().embed(texts), atol=1e-5)
        assert model.embed([]).shape == (0, 384)
        pid = model.pid()
        assert pid != os.getpid() and _alive(pid)
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)
    finally:
        model.close()
    assert not _alive(pid) and not model.running
    with pytest.raises(RuntimeError, match="closed"):
        model.embed(["after the close"])
    model.close()                                       # idempotent


def test_a_dead_child_fails_its_call_and_the_next_call_starts_another():
    model = ModelProcess()
    try:
        first = model.pid()
        os.kill(first, signal.SIGKILL)
        with pytest.raises(BrokenProcessPool):
            model.embed(["lost with the child"])
        second = model.pid()
        assert second != first
        assert model.embed(["a new child"]).shape == (1, 384)
    finally:
        model.close()
    assert not _alive(second)


def test_a_bad_niceness_is_refused():
    for bad in (-1, 20):
        with pytest.raises(ValueError, match="nice"):
            ModelProcess(nice=bad)


def test_the_niceness_defaults_to_ten_and_bad_settings_are_refused():
    from app.context.model_process import background_nice
    assert background_nice({}) == 10 and background_nice({"AGENTRM_EMBEDDING_NICE": " "}) == 10
    assert background_nice({"AGENTRM_EMBEDDING_NICE": "0"}) == 0
    for bad in ("-1", "20", "low", "2.5"):
        with pytest.raises(ValueError, match="AGENTRM_EMBEDDING_NICE"):
            background_nice({"AGENTRM_EMBEDDING_NICE": bad})


def test_the_child_leaves_when_its_parent_is_killed_outright():
    import subprocess
    import sys
    import time
    parent = subprocess.Popen(
        [sys.executable, "-c", "import time; from app.context.model_process import ModelProcess; "
                               "print(ModelProcess().pid(), flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
    finally:
        parent.kill()                                   # no close, no shutdown: SIGKILL
        parent.wait()
    deadline = time.monotonic() + 60
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(child):
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the model process outlived its killed parent")

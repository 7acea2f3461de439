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


def test_a_compaction_in_the_child_records_what_the_compactor_gives_in_process():
    """The child compacts with the extractive summarizer on its own model, in length-sorted
    batches of 4 as the lane hands texts over, and counts with the same tokenizer: its event
    data equals what the compactor recorded in a thread of the server through the lane, byte
    for byte (bar the summarizer's CPU cost). The cold archive, which a compaction never
    reads, is not sent."""
    from app.context.compactor import compact
    from app.context.embedding_lane import EmbeddingLane
    from app.context.model_process import compaction_input
    from app.context.summarize import ExtractiveSummarizer
    from app.context.tokens import count_message, count_text
    from app.domain import context as d

    lines = ["Set the request timeout to 30 s.", "The export job fails for the billing tenant.",
             "We decided to deploy to eu-west-1 on Friday.", "The admin API listens on port 8080.",
             "Running the export suite again after the fix.", "Please keep the batch size at 64 rows."]
    state = d.new_context("a")
    for seq in range(1, 41):
        content = f"{lines[seq % len(lines)]} Step {seq} of the migration touched app/billing/m{seq}.py."
        state = d.apply(state, d.CONTEXT_APPENDED, {"agent_id": "a", "seq": seq, "role": "user", "content": content,
                                                   "pinned": False, "tokens": count_message("user", content),
                                                   "at": float(seq)})
    def plan(seqs, n):
        return d.CompactionPlan("a", f"seg-{n}", seqs, seqs[0], seqs[-1], 0, 0, 0, 0.5, 0.3, 0.0, 64)

    summarizer = ExtractiveSummarizer(default_embedder())
    state = d.apply(state, d.CONTEXT_COMPACTED,
                    compact(state, plan(tuple(range(1, 16)), 1), summarizer, count_text, 50.0))
    assert state.cold.messages                           # the second compaction has history behind it

    slim = compaction_input(state)
    assert slim.cold == d.ColdArchive() and (slim.hot, slim.facts, slim.warm_segments) == (
        state.hot, state.facts, state.warm_segments)

    second = plan(tuple(range(16, 31)), 2)
    model = ModelProcess()
    try:
        in_child = model.compact(state, second, "cl100k_base", 60.0)
    finally:
        model.close()
    lane = EmbeddingLane(default_embedder)
    try:
        here = compact(state, second, ExtractiveSummarizer(lane), count_text, 60.0)
    finally:
        lane.close()
    assert in_child["summary"] and in_child["facts"] and in_child["chunks"]
    assert {**in_child, "cost": None} == {**here, "cost": None}
    assert in_child["cost"]["sentences"] == here["cost"]["sentences"]


def test_close_waits_a_bounded_time_for_the_call_in_progress_then_ends_the_child():
    import threading
    import time
    model = ModelProcess()
    pid = model.pid()
    failed: list[BaseException] = []

    def long_call() -> None:
        try:
            model.call(time.sleep, 60)
        except BaseException as exc:   # the call is lost with the child
            failed.append(exc)
    caller = threading.Thread(target=long_call)
    caller.start()
    time.sleep(0.5)                                     # the child is inside the call
    model.close(timeout=0.5)
    # Had close waited for the call, the call would have returned normally; it failed, and
    # the child ended with it.
    caller.join(10)
    assert failed and isinstance(failed[0], BrokenProcessPool) and not _alive(pid) and not model.running

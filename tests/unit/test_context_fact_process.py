"""The fact process: append-time extraction in a child of its own, at the background
priority, giving the event data the extractor gives in process."""
from __future__ import annotations

import os

import pytest

from app.context.append_facts import extract_pending, extractor_version, pending_messages
from app.context.fact_process import FactProcess
from app.context.tokens import count_message, count_text
from app.domain import context as d


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _state() -> d.AgentContext:
    state = d.new_context("a")
    texts = ["Set the retry limit to 3.", "Never deploy on Fridays.", "Set the retry limit to 5.",
             "The admin API listens on port 8080."]
    for seq, text in enumerate(texts, 1):
        state = d.apply(state, d.CONTEXT_APPENDED, {"agent_id": "a", "seq": seq, "role": "user", "content": text,
                                                   "pinned": False, "tokens": count_message("user", text),
                                                   "at": float(seq), "facts_at_append": True})
    return state


def _without_cost(data: dict) -> dict:
    return {k: v for k, v in data.items() if k != "cpu_seconds"}


def test_the_child_extracts_what_the_extractor_gives_in_process_and_close_stops_it():
    state = _state()
    first = pending_messages(state)[:1]
    state = d.apply(state, d.CONTEXT_FACTS_EXTRACTED, extract_pending(state, first, count_text, 5.0))
    process = FactProcess(nice=3)
    try:
        assert process.warm() == extractor_version()
        messages = pending_messages(state)
        here = extract_pending(state, messages, count_text, 6.0, budget_s=10.0)
        there = process.extract(state, messages, "cl100k_base", 6.0, 10.0)
        assert there is not None and here is not None and here["superseded"]   # judged against live facts
        assert _without_cost(there) == _without_cost(here)
        assert process.extract(state, [], "cl100k_base", 6.0, 10.0) is None
        assert process.extract(state, messages, "cl100k_base", 6.0, 0.0)["seqs"] == [2]   # at least one
        pid = process.pid()
        assert pid != os.getpid() and _alive(pid)
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 3)
    finally:
        process.close()
    assert not _alive(pid) and not process.running
    with pytest.raises(RuntimeError, match="closed"):
        process.extract(state, pending_messages(state), "cl100k_base", 7.0, 1.0)

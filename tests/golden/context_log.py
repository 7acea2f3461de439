"""A context stream recorded before context events were typed: appends, compactions (with
facts, supersessions and chunks, written by the real compactor and summarizer), and a
hibernation and wake. tests/unit/test_golden.py folds it with today's code and must get the
recorded state hash and view bytes.

    python -m tests.golden.context_log   # re-record (only to pin a new behaviour on purpose)
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from app.domain import context as ctx
from app.domain.events import AGENT_HIBERNATED, AGENT_WOKEN

from .later_fields import recorded_hash

DATA = Path(__file__).resolve().parents[1] / "data"
LOG, EXPECTED = DATA / "golden_context.jsonl", DATA / "golden_context_expected.json"
BUDGET = 2_000


def load() -> list[tuple[str, dict]]:
    return [(d["type"], d["data"]) for d in map(json.loads, LOG.read_text().splitlines()) if d]


def fold(events: list[tuple[str, dict]], each=None) -> tuple[ctx.AgentContext, list[str]]:
    """The fold of the stream, with the hash after every event (and ``each`` called with
    every state); a wake restores the parked context from the events before it, as the
    projection does from the database."""
    state, hashes = ctx.new_context("golden"), []
    for i, (type_, data) in enumerate(events):
        if state.hibernated and type_ != AGENT_HIBERNATED:
            archived = ctx.new_context("golden")
            for t, d in events[:i]:
                if t in (ctx.CONTEXT_APPENDED, ctx.CONTEXT_COMPACTED):
                    archived = ctx.apply(archived, t, d)
            state = ctx.restore(state, archived)
        state = ctx.apply(state, type_, data)
        hashes.append(recorded_hash(state))
        if each is not None:
            each(state)
    return state, hashes


def view_digest(state: ctx.AgentContext) -> str:
    from app.context.tokens import count_message
    view = ctx.assemble_view(state, BUDGET, None, count_message, state.last_activity_at)
    return hashlib.sha256(view.canonical_bytes()).hexdigest()


def record() -> None:  # pragma: no cover - run by hand
    from agentrm_bench.context_bench import SessionParameters, generate_session
    from app.context.compactor import compact
    from app.context.embedder import default_embedder
    from app.context.summarize import ExtractiveSummarizer
    from app.context.tokens import count_message, count_text

    session = generate_session(4242, SessionParameters(turns=90))
    summarizer = ExtractiveSummarizer(default_embedder())
    state, events = ctx.new_context("golden"), []

    def emit(type_: str, data: dict) -> None:
        nonlocal state
        data = json.loads(json.dumps(data))
        events.append({"type": type_, "data": data})
        state, _ = fold([(e["type"], e["data"]) for e in events])

    for index, (role, content, pinned, at) in enumerate(session.messages):
        emit(ctx.CONTEXT_APPENDED, {"agent_id": "golden", "seq": state.last_seq + 1, "role": role,
                                    "content": content, "pinned": pinned,
                                    "tokens": count_message(role, content), "at": at})
        plan = ctx.plan_compaction(state, BUDGET, ctx.CompactionSettings(), at)
        if plan is not None:
            emit(ctx.CONTEXT_COMPACTED, {**compact(state, plan, summarizer, count_text, at), "budget_tokens": BUDGET})
        if index == 60:
            emit(AGENT_HIBERNATED, {"agent_id": "golden", "pool": "p", "at": at,
                                        "resume_point": ctx.resume_point_for(state), "reason": "idle"})
            emit(AGENT_WOKEN, {"agent_id": "golden", "pool": "p", "at": at, "reason": "context appended"})
    LOG.write_text("".join(json.dumps(e, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
                           for e in events))
    final, hashes = fold(load())
    EXPECTED.write_text(json.dumps({"events": len(hashes), "hashes": hashes, "view": view_digest(final)},
                                   indent=1) + "\n")


if __name__ == "__main__":  # pragma: no cover
    record()

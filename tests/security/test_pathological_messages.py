"""Threat-model row: key-fact extraction had patterns whose work grew with the square of a
message's length (a run of `1,` or `a.` starts a match at every character and each scans to
the end), so one agent's 20k-character message took 12.5 s of the one background process
every agent's compaction shares. Each pattern now starts only at the beginning of a token
and never backtracks into it, so the work is linear in the message.

Checked as a growth rate, not a time: every pattern of the extractor and the salience
score is run over the whole hostile text (below the cut into bounded units, which would
hide a quadratic pattern), and eight times the input may cost at most 23 times as much
(linear is eight, quadratic sixty-four), each the fastest of three runs, so a loaded
machine does not decide the verdict."""
from __future__ import annotations

import json
import re
import time

import pytest

from app.context import facts

HOSTILE_RUNS = ["1,", "1.", "a.", "a-", "a/", "a1-", "Europe/A", "@a.", "x:1"]


def _patterns() -> list[re.Pattern]:
    from app.context import salience
    found = [v for v in vars(facts).values() if isinstance(v, re.Pattern)]
    found += [v for v in vars(salience).values() if isinstance(v, re.Pattern)]
    found += [pattern for _name, pattern, _weight in salience._VALUES]
    return found


def _fastest_of_three(text: str) -> float:
    patterns = _patterns()
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for pattern in patterns:
            for _match in pattern.finditer(text):
                pass
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("run", HOSTILE_RUNS)
def test_fact_extraction_work_grows_linearly_with_a_hostile_message(run):
    # 8x the text: linear work is 8x, quadratic 64x. The verdict sits at their geometric
    # mean, so a loaded machine (a 2x slower sample either way) cannot flip it.
    small, large = run * (10_000 // len(run)), run * (80_000 // len(run))
    ratio = _fastest_of_three(large) / max(_fastest_of_three(small), 1e-4)
    assert ratio < 23, f"{run!r}: 8x the text cost {ratio:.1f}x the work"


# -- bounded work per unit and per compaction ----------------------------------------------

NO_BOUNDARY = {
    "a run of 1,": "1," * 100_000,
    "one 200k-character word": "a" * 200_000,
    "words, no punctuation": " ".join(f"word{i} goes on" for i in range(20_000))[:200_000],
}


@pytest.mark.parametrize("name", list(NO_BOUNDARY))
def test_a_message_without_a_sentence_boundary_is_examined_in_bounded_segments(name, monkeypatch):
    """Every pattern and the salience score see at most MAX_UNIT_CHARS at a time, however
    long the run with no sentence boundary, and nothing is examined twice: the work is
    bounded units, whatever a pattern costs per character."""
    from app.context import salience
    text = NO_BOUNDARY[name]
    assert len(text) >= 200_000
    classified: list[int] = []
    scored: list[int] = []
    real_classify, real_score = facts.classify, salience.score
    monkeypatch.setattr(facts, "classify", lambda s, role="user": classified.append(len(s)) or real_classify(s, role))
    monkeypatch.setattr(salience, "score", lambda s, role="user": scored.append(len(s)) or real_score(s, role))

    facts.extract_facts(text, 1, "user")

    limit = facts.MAX_UNIT_CHARS
    assert classified and max(classified) <= limit and max(scored, default=0) <= limit
    assert sum(classified) <= len(text)
    # a segment is cut at a space in the second half of its window, or full: never tiny
    assert len(classified) <= len(text) // (limit // 2) + 1


def test_a_segment_cut_keeps_words_whole_and_loses_no_text():
    text = " ".join(f"w{i}" for i in range(5_000))
    pieces = facts.segments(text, 100)
    assert all(len(p) <= 100 for p in pieces)
    assert " ".join(pieces) == text   # cut only at spaces: every word whole, in order


def _span_state(contents):
    from app.context.tokens import count_message
    from app.domain import context as d
    state = d.new_context("a")
    for seq, content in enumerate(contents, start=1):
        state = d.apply(state, d.CONTEXT_APPENDED, {"agent_id": "a", "seq": seq, "role": "user", "content": content,
                                                   "pinned": False, "tokens": count_message("user", content),
                                                   "at": float(seq)})
    return state


class _NoSummary:
    name = "none"

    def summarize(self, messages, target_tokens, count):
        from app.context.summarize import Summary
        return Summary("", self.name)


def test_a_compaction_past_its_extraction_budget_moves_the_rest_unscanned_and_says_so(monkeypatch):
    """Each message costs one CPU second on a fake thread clock; with a budget of two, the
    first two messages are scanned and the other three are moved without their key facts,
    counted in the event, and still in the cold tier verbatim and in its chunks. The fold
    reads the facts from the event (replay never extracts), so the cut is replayed exactly."""
    from types import SimpleNamespace

    from app.context import compactor
    from app.context.tokens import count_text
    from app.domain import context as d
    ticks = iter(range(100))
    monkeypatch.setattr(compactor, "time", SimpleNamespace(thread_time=lambda: float(next(ticks))))
    contents = [f"Set the request timeout to {10 * i} s for ticket PAY-{4400 + i}." for i in range(1, 6)]
    state = _span_state(contents + ["tail one", "tail two"])
    plan = d.CompactionPlan(agent_id="a", segment_id="seg-1", seqs=(1, 2, 3, 4, 5), from_seq=1, to_seq=5,
                            tokens_before=state.hot_tokens, span_tokens=0, target_tokens=0, high_watermark=0.5,
                            low_watermark=0.3, tokens_per_minute=0.0, summary_target_tokens=40)

    data = compactor.compact(state, plan, _NoSummary(), count_text, now=10.0, extraction_budget_s=2.0)

    assert data["messages_not_scanned"] == 3
    assert {f["source_seq"] for f in data["facts"]} == {1, 2}
    chunked = "\n".join(c["text"] for c in data["chunks"])
    assert all(content in chunked for content in contents)
    after = d.apply(state, d.CONTEXT_COMPACTED, json.loads(json.dumps(data)))
    assert [m.content for m in after.cold.messages] == contents
    assert sorted(f.source_seq for f in after.facts) == sorted(f["source_seq"] for f in data["facts"])
    # without a budget (and so for every span scanned whole) the event has no such field
    unbounded = compactor.compact(state, plan, _NoSummary(), count_text, now=10.0)
    assert "messages_not_scanned" not in unbounded and {f["source_seq"] for f in unbounded["facts"]} == {1, 2, 3, 4, 5}


class _CountingEmbedder:
    def __init__(self):
        self.embedded = 0

    def embed(self, texts):
        import numpy as np
        self.embedded += len(texts)
        vectors = np.zeros((len(texts), 8), dtype=np.float32)
        vectors[:, 0] = 1.0
        return vectors


def test_a_summary_embeds_a_bounded_number_of_sentences_however_many_a_message_holds():
    """A message at the API's limit made of ~4,600 distinct short sentences: the summary
    embeds MAX_CANDIDATE_SENTENCES of them, sampled from the whole message (the embedding,
    ~7 ms a sentence, was over half a minute of the shared background process)."""
    from app.context.summarize import MAX_CANDIDATE_SENTENCES, ExtractiveSummarizer
    from app.context.tokens import count_text
    from app.domain.context import MAX_MESSAGE_CHARS
    text = ". ".join(f"Set x{i} to {i} ms" for i in range(6_000))[:MAX_MESSAGE_CHARS]
    embedder = _CountingEmbedder()
    summarizer = ExtractiveSummarizer(embedder)
    assert len(summarizer.candidate_sentences([("user", text)])) > 4_000

    summary = summarizer.summarize([("user", text)], 400, count_text)

    assert embedder.embedded == MAX_CANDIDATE_SENTENCES
    assert summary.cost["sentences"] == MAX_CANDIDATE_SENTENCES
    assert summary.cost["sentences_not_embedded"] > 3_500
    assert summary.text


def test_a_span_of_ordinary_size_is_summarised_from_every_sentence():
    from app.context.summarize import ExtractiveSummarizer
    from app.context.tokens import count_text
    messages = [("user", f"Step {i} of the migration touched the billing tables again.") for i in range(300)]
    embedder = _CountingEmbedder()
    summary = ExtractiveSummarizer(embedder).summarize(messages, 200, count_text)
    assert embedder.embedded == 300 and "sentences_not_embedded" not in summary.cost

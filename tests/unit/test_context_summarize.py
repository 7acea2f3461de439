"""Summarizers (real MiniLM model; a real local HTTP server for the LLM one) and the
compactor that turns a plan into ContextCompacted data."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from app.context.compactor import CHUNK_TARGET_TOKENS, chunk_messages, compact
from app.context.embedder import cosine_top_k, default_embedder, embed
from app.context.summarize import (
    ExtractiveSummarizer,
    OpenAICompatibleSummarizer,
    SummarizerError,
    llm_summarizer_from_env,
)
from app.context.tokens import count_message, count_text
from app.domain import context as d

SPAN = [
    ("user", "The nightly export job keeps failing for the billing tenant. Please find out why the export fails."),
    ("assistant", "I looked at the export job logs. "
                  "The export fails because the billing tenant has rows with a null currency."),
    ("tool", "2024-05-12 02:00:03 ERROR export-worker-2 row 88121 has currency=None"),
    ("assistant", "The weather in the logs is irrelevant. The null currency rows were created by the March import."),
    ("user", "OK. Fix the export so it skips rows with a null currency and reports them instead."),
    ("assistant", "I changed the export to skip null-currency rows and to report their ids at the end of the job."),
]


def test_embedder_is_normalised_float32_and_search_is_exact():
    vectors = embed(["refund for an order", "the order was refunded", "kubernetes pod memory"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    top = cosine_top_k(vectors[0], vectors, 2)
    assert [i for i, _ in top] == [0, 1] and top[0][1] == pytest.approx(1.0, abs=1e-5)
    assert default_embedder() is default_embedder()


def test_extractive_summary_is_verbatim_ordered_and_within_target():
    summarizer = ExtractiveSummarizer(default_embedder())
    result = summarizer.summarize(SPAN, 40, count_text)
    assert result.summarizer == "extractive" and result.text
    assert count_text(result.text) <= 40
    candidates = summarizer.candidate_sentences(SPAN)
    picked = [s for s in candidates if s in result.text]
    assert " ".join(picked) == result.text                    # verbatim sentences, original order
    assert "export" in result.text.lower()                     # the central topic survives
    assert "weather" not in result.text.lower()                # the off-topic sentence does not
    assert result.cost["cpu_seconds"] >= 0 and result.cost["sentences"] == len(candidates)


def test_extractive_summary_of_nothing_is_empty():
    result = ExtractiveSummarizer(default_embedder()).summarize([("user", "ok")], 50, count_text)
    assert result.text == ""


class _FakeChatServer:
    """A real HTTP server on 127.0.0.1 that answers like an OpenAI-compatible endpoint."""

    def __init__(self, status=200):
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server API)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                payload = {"choices": [{"message": {"role": "assistant", "content": " Export skips null currency. "}}],
                           "usage": {"prompt_tokens": 321, "completion_tokens": 7}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_openai_compatible_summarizer_against_a_local_server():
    with _FakeChatServer() as url:
        summarizer = OpenAICompatibleSummarizer(url + "/v1/", "tiny-model", api_key="sk-test")
        result = summarizer.summarize(SPAN, 64, count_text)
    assert result.text == "Export skips null currency."
    assert result.cost == {"prompt_tokens": 321, "completion_tokens": 7}
    assert result.summarizer == "openai-compatible"


def test_openai_compatible_summarizer_request_shape():
    fake = _FakeChatServer()
    with fake as url:
        OpenAICompatibleSummarizer(url, "tiny-model", api_key="sk-test").summarize(SPAN, 64, count_text)
    (request,) = fake.requests
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer sk-test"
    assert request["body"]["model"] == "tiny-model" and request["body"]["max_tokens"] == 64
    assert "null currency" in request["body"]["messages"][1]["content"]


def test_openai_compatible_summarizer_errors_are_clear():
    with _FakeChatServer(status=500) as url:
        with pytest.raises(SummarizerError, match="failed"):
            OpenAICompatibleSummarizer(url, "m").summarize(SPAN, 64, count_text)


def test_llm_summarizer_is_off_by_default_and_needs_both_settings():
    assert llm_summarizer_from_env({}) is None          # the extractive one, in the model process
    assert llm_summarizer_from_env({"AGENTRM_SUMMARIZER_URL": "http://127.0.0.1:1"}) is None
    configured = llm_summarizer_from_env({"AGENTRM_SUMMARIZER_URL": "http://127.0.0.1:1/v1",
                                          "AGENTRM_SUMMARIZER_MODEL": "m"})
    assert isinstance(configured, OpenAICompatibleSummarizer) and configured.model == "m"


# -- compactor ------------------------------------------------------------------------------
def _state(contents):
    state = d.new_context("a")
    for i, (role, content, pinned) in enumerate(contents, start=1):
        state = d.apply(state, d.CONTEXT_APPENDED, {"agent_id": "a", "seq": i, "role": role, "content": content,
                                                   "pinned": pinned, "tokens": count_message(role, content),
                                                   "at": float(i)})
    return state


def test_compact_produces_event_data_with_facts_supersession_and_chunks():
    contents = [("system", "You are the billing agent.", True),
                ("user", "Set the request timeout to 30 s.", False),
                ("assistant", "Noted. I will keep it small.", False),
                ("user", "Decision: we will use Redis for the session cache.", False),
                ("user", "Set the request timeout to 45 s.", False),
                ("tool", "ok", False), ("user", "next", False)]
    state = _state(contents)
    plan = d.CompactionPlan(agent_id="a", segment_id="seg-1", seqs=(2, 3, 4, 5), from_seq=2, to_seq=5,
                            tokens_before=state.hot_tokens, span_tokens=0, target_tokens=0, high_watermark=0.5,
                            low_watermark=0.3, tokens_per_minute=0.0, summary_target_tokens=40)
    data = compact(state, plan, ExtractiveSummarizer(default_embedder()), count_text, now=10.0)
    json.dumps(data)  # JSON-serialisable
    texts = {f["fact_id"]: f["text"] for f in data["facts"]}
    assert texts["f2.0"] == "Set the request timeout to 30 s." and texts["f5.0"] == "Set the request timeout to 45 s."
    assert data["superseded"] == [{"fact_id": "f2.0", "by": "f5.0"}]
    assert data["summarizer"] == "extractive" and "cpu_seconds" in data["cost"]
    assert data["chunks"][0]["from_seq"] == 2 and data["chunks"][-1]["to_seq"] == 5
    assert data["hot_tokens_after"] == state.hot_tokens - sum(m.tokens for m in state.hot if 2 <= m.seq <= 5)
    after = d.apply(state, d.CONTEXT_COMPACTED, data)
    live = [f.text for f in after.live_facts]
    assert "Set the request timeout to 45 s." in live and "Set the request timeout to 30 s." not in live
    assert len(after.facts) == 3                                 # the superseded one is kept
    assert [m.seq for m in after.hot] == [1, 6, 7]


def test_restating_a_live_fact_is_not_a_new_fact():
    state = _state([("user", "The order id is ORD-1.", False), ("user", "x", False),
                    ("user", "The order id is ORD-1.", False), ("user", "y", False)])
    def plan(seqs, n):
        return d.CompactionPlan("a", f"seg-{n}", seqs, seqs[0], seqs[-1], 0, 0, 0, 0.5, 0.3, 0.0, 32)

    summarizer = ExtractiveSummarizer(default_embedder())
    state = d.apply(state, d.CONTEXT_COMPACTED, compact(state, plan((1, 2), 1), summarizer, count_text, 5.0))
    data = compact(state, plan((3,), 2), summarizer, count_text, 6.0)
    assert data["facts"] == [] and data["superseded"] == []


def test_chunks_follow_message_boundaries_and_split_huge_messages():
    long_text = " ".join(f"line {i} of the build log" for i in range(400))
    state = _state([("user", f"short message {i}", False) for i in range(30)] + [("tool", long_text, False)])
    chunks = chunk_messages(state.hot, count_text, "seg-1")
    small = [c for c in chunks if c["to_seq"] <= 30]
    assert all(c["tokens"] <= CHUNK_TARGET_TOKENS for c in small)
    assert [c["from_seq"] for c in small] == sorted(c["from_seq"] for c in small)
    covered = [s for c in small for s in range(c["from_seq"], c["to_seq"] + 1)]
    assert covered == list(range(1, 31))                          # every message exactly once
    pieces = [c for c in chunks if c["from_seq"] == 31]
    assert len(pieces) > 1 and all(c["tokens"] <= CHUNK_TARGET_TOKENS * 1.5 for c in pieces)
    assert " ".join(p["text"] for p in pieces).split() == f"[31] tool: {long_text}".split()

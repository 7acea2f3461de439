"""The gateway's idempotency rules that need no server: the key, what "the same body"
means, which answers are stored, and the size cap of what is captured."""
from __future__ import annotations

import pytest

from app.gateway.idempotency import Capture, body_hash, key_of, storable
from app.gateway.wire import BadRequest


def test_the_key_is_optional_and_bounded():
    assert key_of({}) is None
    assert key_of({"idempotency-key": "stainless-python-retry-1"}) == "stainless-python-retry-1"
    for bad in ("", "k" * 256, "caf\u00e9", "tab\there"):
        with pytest.raises(BadRequest, match="Idempotency-Key"):
            key_of({"idempotency-key": bad})


def test_the_same_body_is_the_same_json_on_the_same_endpoint():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    reordered = {"max_tokens": 5, "messages": [{"content": "hi", "role": "user"}], "model": "m"}
    assert body_hash("openai", body) == body_hash("openai", reordered)
    assert body_hash("openai", body) != body_hash("anthropic", body)
    assert body_hash("openai", body) != body_hash("openai", {**body, "max_tokens": 6})


def test_only_the_requests_own_answers_are_stored():
    assert all(storable(s) for s in (200, 201, 400, 404, 413, 422))
    assert not any(storable(s) for s in (401, 403, 408, 409, 429, 500, 502, 503, 504))


def test_a_capture_keeps_the_answer_up_to_the_cap():
    capture = Capture(cap=10)
    capture.started(200, {"Content-Type": "text/event-stream", "x-ratelimit-remaining-requests": "5",
                          "x-agentrm-turn-id": "t", "content-length": "9"})
    capture.sent(b"data: 1\n\n")
    reply = capture.reply()
    assert reply is not None and reply.body == b"data: 1\n\n"
    assert reply.headers == {"content-type": "text/event-stream", "x-agentrm-turn-id": "t"}
    capture.sent(b"xx")   # 11 bytes: over the cap, nothing kept
    assert capture.over and capture.reply() is None

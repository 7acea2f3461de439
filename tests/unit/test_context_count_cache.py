"""Remembered token counts: the same as tiktoken's, bounded by the characters they hold."""
from __future__ import annotations

from app.context.count_cache import CountCache
from app.context.tokens import count_message


def test_counts_equal_tiktoken_and_are_remembered_per_encoding():
    cache = CountCache()
    count = cache.counter("cl100k_base")
    texts = ["13:56 The billing service listens on port 8080.", "", "ok", "x" * 500]
    for text in texts:
        assert count("user", text) == count_message("user", text, "cl100k_base")
    assert cache.misses == 4 and cache.hits == 0
    assert [count("user", t) for t in texts] == [count_message("user", t) for t in texts] and cache.hits == 4
    assert cache.count("user", texts[0], "o200k_base") == count_message("user", texts[0], "o200k_base")
    assert cache.misses == 5


def test_the_least_recently_used_counts_leave_when_the_characters_run_over():
    cache = CountCache(max_chars=30)
    count = cache.counter("cl100k_base")
    count("user", "a" * 10)            # 14 characters with the role
    count("user", "b" * 10)            # 28
    count("user", "a" * 10)            # a is now the most recent
    count("user", "c" * 10)            # 42 > 30: b leaves
    hits = cache.hits
    count("user", "a" * 10)
    assert cache.hits == hits + 1
    count("user", "b" * 10)
    assert cache.hits == hits + 1      # b was recounted
    count("user", "z" * 100)           # larger than the whole cache: counted, never kept
    count("user", "z" * 100)
    assert cache.hits == hits + 1

"""Token counting is exact and offline: same rank table, regex and special tokens as
tiktoken's official constructors, and the cookbook's chat-overhead rule."""
import gzip
import hashlib

import pytest
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public
from hypothesis import given, settings
from hypothesis import strategies as st

from app.context import tokens


def _official(name: str, cache_dir, monkeypatch) -> dict:
    """The official constructor's output, fed our local rank file through tiktoken's own
    cache (keyed by sha1 of the blob URL). Any attempt to reach the network fails loudly."""
    url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    (cache_dir / hashlib.sha1(url.encode()).hexdigest()).write_bytes(tokens.read_rank_file(name))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache_dir))

    def no_network(blobpath):
        raise AssertionError(f"tried to read {blobpath}: the test must stay offline")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    return getattr(openai_public, name)()


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_local_encoding_is_identical_to_the_official_constructor(name, tmp_path, monkeypatch):
    official = _official(name, tmp_path, monkeypatch)
    ours = tokens.encoding_spec(name)
    assert ours["pat_str"] == official["pat_str"]
    assert ours["special_tokens"] == official["special_tokens"]
    assert ours["mergeable_ranks"] == official["mergeable_ranks"]
    enc_official = tiktoken.Encoding(**official)
    enc_ours = tokens.get_encoding(name)
    sample = "Hello, wörld! def f(x):\n    return x**2  # 日本語 🚀 https://example.com/a?b=1"
    assert enc_ours.encode(sample) == enc_official.encode(sample)
    assert enc_ours.n_vocab == enc_official.n_vocab


def test_rank_files_carry_the_hash_tiktoken_pins():
    # The same SHA-256 tiktoken_ext.openai_public checks after a download.
    raw = tokens.read_rank_file("cl100k_base")
    assert hashlib.sha256(raw).hexdigest() == "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
    assert gzip.compress(raw)  # decompressed, not the .gz bytes


def test_known_counts():
    assert tokens.get_encoding().encode("hello world") == [15339, 1917]
    assert tokens.count_text("hello world") == 2
    assert tokens.count_text("hello world", "o200k_base") == 2
    assert tokens.get_encoding("o200k_base").encode("hello world") == [24912, 2375]
    assert tokens.count_text("tiktoken is great!") == 6
    assert tokens.count_text("") == 0


def test_special_token_text_is_counted_as_plain_text():
    # User content must not be able to smuggle in <|endoftext|> as one control token.
    assert tokens.count_text("<|endoftext|>") > 1


def test_cookbook_chat_example_counts_129_prompt_tokens():
    """The OpenAI cookbook's example conversation is billed 129 prompt tokens by gpt-4 /
    gpt-3.5-turbo-0613: 3 per message + role + content (+1 + name when a name is set),
    plus 3 for reply priming."""
    example = [
        ("system", None, "You are a helpful, pattern-following assistant that translates corporate jargon "
                         "into plain English."),
        ("system", "example_user", "New synergies will help drive top-line growth."),
        ("system", "example_assistant", "Things working well together will increase revenue."),
        ("system", "example_user", "Let's circle back when we have more bandwidth to touch base on opportunities "
                                   "for increased leverage."),
        ("system", "example_assistant", "Let's talk later when we're less busy about how to do better."),
        ("user", None, "This late pivot means we don't have time to boil the ocean for the client deliverable."),
    ]
    names = sum(1 + tokens.count_text(n) for _, n, _ in example if n)
    assert tokens.count_view([(r, c) for r, _, c in example]) + names == 129


def test_count_message_is_framing_plus_role_plus_content():
    assert tokens.count_message("user", "hello world") == 3 + 1 + 2
    assert tokens.count_view([("user", "hello world")]) == 3 + 6


def test_unknown_encoding_is_refused_without_download():
    with pytest.raises(tokens.EncodingUnavailable):
        tokens.get_encoding("p50k_base")


def test_get_encoding_is_cached():
    assert tokens.get_encoding("cl100k_base") is tokens.get_encoding("cl100k_base")


@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=0, max_size=300), n=st.integers(min_value=0, max_value=80))
def test_truncate_to_tokens_is_a_prefix_within_the_bound(text, n):
    cut = tokens.truncate_to_tokens(text, n)
    assert text.startswith(cut)
    assert tokens.count_text(cut) <= n
    if tokens.count_text(text) <= n:
        assert cut == text


async def test_encoding_ready_builds_off_the_loop_and_refuses_what_get_encoding_refuses():
    import threading
    built_in: list[str] = []
    tokens._ready.discard("o200k_base")
    real = tokens._cached_encoding.__wrapped__

    def spy(name):   # the real build, noting which thread ran it
        built_in.append(threading.current_thread().name)
        return real(name)
    original, tokens._cached_encoding = tokens._cached_encoding, spy
    try:
        await tokens.encoding_ready("o200k_base")
        await tokens.encoding_ready("o200k_base")   # once per process
    finally:
        tokens._cached_encoding = original
    assert len(built_in) == 1 and built_in[0] != threading.main_thread().name
    assert "o200k_base" in tokens._ready
    with pytest.raises(tokens.EncodingUnavailable):
        await tokens.encoding_ready("p50k_base")
    assert "p50k_base" not in tokens._ready


async def test_a_long_append_is_counted_beside_the_event_loop_and_a_short_one_on_it(monkeypatch):
    import threading
    counted_in: list[str] = []
    real = tokens.count_message

    def spy(role, content, encoding=None):   # the real count, noting which thread ran it
        counted_in.append(threading.current_thread().name)
        return real(role, content, encoding)
    monkeypatch.setattr(tokens, "count_message", spy)
    long = ("x:1" * tokens.OFF_LOOP_CHARS)[:tokens.OFF_LOOP_CHARS]
    messages = [("user", long), ("tool", "short")]
    assert await tokens.count_messages(messages, "cl100k_base") == [real(r, c) for r, c in messages]
    assert counted_in and threading.main_thread().name not in counted_in
    counted_in.clear()
    assert await tokens.count_messages([("user", "hello")], "cl100k_base") == [real("user", "hello")]
    assert counted_in == [threading.main_thread().name]

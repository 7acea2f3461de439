"""Hybrid retrieval over one agent's messages: dense (MiniLM cosine, with neighbour
propagation) and lexical (BM25 from ``bm25s``, Snowball-stemmed), fused by reciprocal rank.

The retrieval unit is the single message (hot and cold alike). On conversations that no one
here wrote it recalls more evidence per token than ~200-token chunks, and a message
already carries its own time; the measurements are in docs/benchmarks/context.md.

Caches, both per agent and in process:
- ``VectorCache``: the agent's message vectors as one float32 matrix, extended as the
  indexer stores new rows (never re-read whole), dropped when the agent hibernates, and
  bounded in bytes (least recently used agents leave first; they reload from the table).
- ``LexicalCache``: the BM25 index of the agent's messages, keyed by the last seq it holds.
  Stemmed tokens are kept per message, and the index grows by the new messages
  (app.context.bm25_incremental) instead of being rebuilt.
"""
from __future__ import annotations

import heapq
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.domain.context.ranking import heads_first, ranked, reciprocal_rank_fusion, with_neighbours

# A reply scores 0.3 of its best neighbour's cosine on top of its own (see
# ranking.with_neighbours); measured on planted-fact sessions and one conversation set,
# the same for every budget and question.
NEIGHBOUR_WEIGHT = 0.3
# BM25 propagates further and more strongly: half of the best adjacent message's score,
# a quarter of the best one two turns away (the weight halves per turn). A message that
# shares no word with the query scores 0 on BM25 and would otherwise never be in the
# lexical ranking at all, however close it sits to one that matches. Chosen on one LoCoMo
# dev conversation and checked on the other (it raised recall on both at 1k, 2k and 4k);
# the same for every budget and question.
LEXICAL_NEIGHBOUR_WEIGHTS = (0.5, 0.25)
# Each ranking's own best hits (plain cosine, plain BM25: no neighbours) lead the fused
# order, two per ranking (ranking.heads_first). With the BM25 neighbour propagation the
# lexical list holds nearly every message, and RRF alone buries a paraphrased fact that the
# dense ranking puts first. The heads bring those back without costing LoCoMo's recall;
# why two per ranking: docs/benchmarks/context.md (the ranking heads).
RANKING_HEADS = 2
# Words of a question that name no topic: interrogatives, auxiliaries, personal pronouns.
# bm25s's English stopwords (Lucene's 33) keep them, so "What did she ..." matched, and
# through the neighbour propagation lent score to, every message with a "what" or "did" in
# it: a long lexical list of weak matches that crowds a small budget. They are dropped from
# the query only (the index keeps every word; a query of nothing else keeps them all).
QUESTION_WORDS = ("what", "which", "who", "whom", "whose", "where", "when", "why", "how",
                  "do", "does", "did", "has", "have", "had", "was", "were", "been", "would", "could", "should",
                  "i", "my", "we", "our", "you", "your", "he", "his", "she", "her")
EMBEDDING_DIM = 384
_WORD = re.compile(r"(?u)\b\w\w+\b")


def _stemmer():
    import Stemmer  # PyStemmer: Snowball in C
    return Stemmer.Stemmer("english")


_STOPWORDS: frozenset[str] | None = None
_QUESTION_STEMS: frozenset[str] | None = None


def _question_stems() -> frozenset[str]:
    global _QUESTION_STEMS
    if _QUESTION_STEMS is None:
        _QUESTION_STEMS = frozenset(_stemmer().stemWords(list(QUESTION_WORDS)))
    return _QUESTION_STEMS


def topical(query_tokens: Sequence[str]) -> list[str]:
    """``query_tokens`` (stemmed, as Tokenizer gives them) without the question words, or all
    of them if nothing else is left."""
    stems = _question_stems()
    kept = [t for t in query_tokens if t not in stems]
    return kept or list(query_tokens)


def _stopwords() -> frozenset[str]:
    global _STOPWORDS
    if _STOPWORDS is None:
        from bm25s.stopwords import STOPWORDS_EN
        _STOPWORDS = frozenset(STOPWORDS_EN)
    return _STOPWORDS


class Tokenizer:
    """Lower-cased words of two or more characters, English stopwords out, Snowball stems:
    what bm25s.tokenize does, kept per message so an index rebuild does not redo it."""

    def __init__(self) -> None:
        self._stem = _stemmer()
        self._lock = threading.Lock()  # a Snowball stemmer object is not thread-safe

    def __call__(self, text: str) -> list[str]:
        stop = _stopwords()
        words = [w for w in _WORD.findall(text.lower()) if w not in stop]
        with self._lock:
            return self._stem.stemWords(words)


@dataclass
class LexicalIndex:
    seqs: list[int]
    retriever: Any               # IncrementalBM25 (app.context.bm25_incremental), bm25s.BM25 or None

    def scores(self, query_tokens: list[str]) -> dict[int, float]:
        """BM25 score of every message (0 for one sharing no word with the query)."""
        if self.retriever is None or not query_tokens:
            return {seq: 0.0 for seq in self.seqs}
        vocab = self.retriever.vocab_dict
        known = [t for t in query_tokens if t in vocab]
        if not known:
            return {seq: 0.0 for seq in self.seqs}
        return {seq: float(score) for seq, score in zip(self.seqs, self.retriever.get_scores(known))}

    def ranking(self, query_tokens: list[str]) -> list[int]:
        """Seqs of messages sharing a word with the query, best BM25 score first."""
        return positive_ranking(self.scores(query_tokens))


class LexicalCache:
    """Per-agent BM25 indexes, the ``max_agents`` most recently used (an index costs a few
    hundred kB at 30k tokens; one evicted is rebuilt from the messages on its next use)."""

    def __init__(self, tokenizer: Tokenizer | None = None, max_agents: int = 1024) -> None:
        self.tokenize = tokenizer or Tokenizer()
        self.max_agents = max_agents
        self._tokens: dict[tuple[str, int], list[str]] = {}  # tokenized, not yet indexed
        self._index: OrderedDict[str, LexicalIndex] = OrderedDict()

    def holds(self, agent_id: str) -> bool:
        return agent_id in self._index

    def missing(self, agent_id: str, messages: Sequence[tuple[int, str]]) -> int:
        """How many of ``messages`` the agent's index lacks (all, if it has none)."""
        index = self._index.get(agent_id)
        last = index.seqs[-1] if index is not None and index.seqs else 0
        return sum(1 for seq, _ in messages if seq > last) if index is not None else len(messages)

    def tokenize_new(self, agent_id: str, messages: Sequence[tuple[int, str]]) -> None:
        """Tokenize the messages the index lacks (the costly part; safe in a thread, so
        the event loop only adds the tokens to the index)."""
        index = self._index.get(agent_id)
        last = index.seqs[-1] if index is not None and index.seqs else 0
        for seq, content in messages:
            key = (agent_id, seq)
            if seq > last and key not in self._tokens:
                self._tokens[key] = self.tokenize(content)

    def index_of(self, agent_id: str, messages: Sequence[tuple[int, str]]) -> LexicalIndex:
        """The BM25 index of ``messages`` ((seq, content), chronological). An agent's
        messages only grow at the end (compaction moves them between tiers, never out), so
        the cached index is extended by the new ones; anything else rebuilds it."""
        from .bm25_incremental import IncrementalBM25
        index = self._index.get(agent_id)
        held = len(index.seqs) if index is not None else 0
        if index is None or len(messages) < held or (held and messages[held - 1][0] != index.seqs[-1]):
            index, held = LexicalIndex([], IncrementalBM25()), 0
            self._index[agent_id] = index
        self._index.move_to_end(agent_id)
        new = messages[held:]
        self.tokenize_new(agent_id, new)
        for seq, _content in new:
            # an empty message gets a token no query can have (queries are tokenized the
            # same way, and "\x00" is no word)
            index.retriever.add(self._tokens.pop((agent_id, seq), None) or ["\x00"])
            index.seqs.append(seq)
        while len(self._index) > self.max_agents:
            self.drop(next(iter(self._index)))
        return index

    def drop(self, agent_id: str) -> None:
        self._index.pop(agent_id, None)
        for key in [k for k in self._tokens if k[0] == agent_id]:
            del self._tokens[key]


@dataclass
class AgentVectors:
    seqs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, EMBEDDING_DIM), dtype=np.float32))

    @property
    def through(self) -> int:
        return int(self.seqs[-1]) if len(self.seqs) else 0

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.seqs.nbytes)


class VectorCache:
    """Per-agent message vectors in process, bounded to ``max_bytes`` (LRU)."""

    def __init__(self, max_bytes: int = 512 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._agents: OrderedDict[str, AgentVectors] = OrderedDict()

    def get(self, agent_id: str) -> AgentVectors | None:
        entry = self._agents.get(agent_id)
        if entry is not None:
            self._agents.move_to_end(agent_id)
        return entry

    def extend(self, agent_id: str, seqs: Sequence[int], vectors: np.ndarray) -> AgentVectors:
        """Adds rows after the agent's last cached seq (rows at or before it are skipped:
        two indexers may both report them)."""
        entry = self._agents.get(agent_id) or AgentVectors()
        keep = [i for i, s in enumerate(seqs) if s > entry.through]
        if keep:
            order = sorted(keep, key=lambda i: seqs[i])
            entry = AgentVectors(
                seqs=np.concatenate([entry.seqs, np.asarray([seqs[i] for i in order], dtype=np.int64)]),
                matrix=np.concatenate([entry.matrix, np.asarray(vectors, dtype=np.float32)[order]]))
        self._agents[agent_id] = entry
        self._agents.move_to_end(agent_id)
        self._evict()
        return entry

    def drop(self, agent_id: str) -> None:
        self._agents.pop(agent_id, None)

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._agents.values())

    def _evict(self) -> None:
        total = self.nbytes
        while total > self.max_bytes and len(self._agents) > 1:
            _, entry = self._agents.popitem(last=False)
            total -= entry.nbytes


def to_bytes(vector: np.ndarray) -> bytes:
    """A vector as stored: little-endian float32, 4 x 384 bytes."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_bytes(blobs: Sequence[bytes]) -> np.ndarray:
    if not blobs:
        return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1).astype(np.float32)


def _best(scores: dict[int, float], n: int) -> list[int]:
    """The ``n`` best-scored seqs, in ``ranked`` order (ties: the newer first), without
    sorting them all."""
    if n <= 0:
        return []
    return heapq.nsmallest(n, scores, key=lambda seq: (-scores[seq], -seq))


def positive_ranking(scores: dict[int, float]) -> list[int]:
    """Seqs with a positive score, best first; ties: the newer message first."""
    return [seq for seq in ranked(scores) if scores[seq] > 0]


def hybrid_ranking(query_vector: np.ndarray | None, query_tokens: list[str], chronological: Sequence[int],
                   vectors: AgentVectors | None, lexical: LexicalIndex,
                   neighbour_weight: float = NEIGHBOUR_WEIGHT, dense: bool = True, bm25: bool = True,
                   lexical_neighbours: Sequence[float] = LEXICAL_NEIGHBOUR_WEIGHTS,
                   heads: int = RANKING_HEADS, question_words: bool = False) -> list[int]:
    """Message seqs, most relevant first: RRF of the dense ranking (cosine plus neighbour
    propagation, over messages that have a vector) and the BM25 ranking (BM25 plus
    neighbour propagation, ``lexical_neighbours`` per distance; messages scoring above 0),
    led by the first ``heads`` messages of each ranking before propagation (plain cosine,
    plain BM25 above 0). The query's question words are left out of BM25 unless
    ``question_words`` (``topical``). A message the indexer has not reached yet competes on
    BM25 alone; messages in neither come last."""
    rankings: list[list[int]] = []
    direct: list[list[int]] = []      # each ranking before neighbour propagation, for its heads
    if dense and query_vector is not None and vectors is not None and len(vectors.seqs):
        wanted = set(chronological)
        cosines = vectors.matrix @ np.asarray(query_vector, dtype=np.float32)
        scores = {int(s): float(c) for s, c in zip(vectors.seqs, cosines) if int(s) in wanted}
        in_order = [s for s in chronological if s in scores]
        rankings.append(ranked(with_neighbours(scores, in_order, neighbour_weight)))
        direct.append(_best(scores, heads))
    if bm25:
        scores = lexical.scores(list(query_tokens) if question_words else topical(query_tokens))
        in_order = [s for s in chronological if s in scores]
        rankings.append(positive_ranking(with_neighbours(scores, in_order, lexical_neighbours)
                                         if any(lexical_neighbours) else scores))
        direct.append([s for s in _best(scores, heads) if scores[s] > 0])
    fused = heads_first(reciprocal_rank_fusion(rankings), direct, heads)
    # A message no ranking holds (no query word, and no vector yet, or dense off) still
    # competes for the budget the ranked ones leave, newest first: under a budget that fits
    # everything, the view must not drop a message because the indexer has not reached it.
    ranked_seqs = set(fused)
    return fused + [s for s in reversed(chronological) if s not in ranked_seqs]

"""BM25 over one agent's messages that grows by appending, instead of being rebuilt.

``bm25s`` precomputes every (term, document) score, so one new message means rebuilding
the whole index (~15-30 ms at 30k tokens, for every agent that appends). Here the index
keeps postings (term -> documents and term frequencies) and document lengths, and scores
a query's few terms at query time: an append costs its own tokens, a query a few hundred multiplications.

The scores are bm25s's default ("lucene": k1 = 1.5, b = 0.75, idf = ln(1 + (N - df + 0.5)
/ (df + 0.5)), tf / (tf + k1 (1 - b + b |d| / avgdl)), float32), so rankings are the ones
bm25s gives on the same corpus (tests/unit/test_context_bm25_incremental.py compares them).
A query term that occurs twice counts twice, as in bm25s.
"""
from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Sequence

import numpy as np


class IncrementalBM25:
    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.vocab_dict: dict[str, int] = {}            # term -> id (what bm25s calls it)
        # per term id: document indexes and the term's frequency there, as C int arrays
        # (4 bytes a posting, where a list of ints costs ~36): 1,000 agents' indexes fit
        self._docs: list[array] = []
        self._tfs: list[array] = []
        self._lengths = array("i")
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, tokens: Sequence[str]) -> None:
        """One more document, after the others. It must have at least one token (bm25s
        needs that too; callers give an empty message a token no query can have)."""
        if not tokens:
            raise ValueError("a document needs at least one token")
        doc = len(self._lengths)
        for term, tf in Counter(tokens).items():
            term_id = self.vocab_dict.get(term)
            if term_id is None:
                term_id = self.vocab_dict[term] = len(self._docs)
                self._docs.append(array("i"))
                self._tfs.append(array("i"))
            self._docs[term_id].append(doc)
            self._tfs[term_id].append(tf)
        self._lengths.append(len(tokens))
        self._total_length += len(tokens)

    def get_scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """One BM25 score per document, in the order they were added (0 where no query
        term occurs)."""
        n = len(self._lengths)
        scores = np.zeros(n, dtype=np.float32)
        if n == 0:
            return scores
        lengths = np.array(self._lengths, dtype=np.float32)
        norm = np.float32(self.k1) * (np.float32(1 - self.b) + np.float32(self.b) * lengths
                                      / np.float32(self._total_length / n))
        for term in query_tokens:
            term_id = self.vocab_dict.get(term)
            if term_id is None:
                continue
            docs = np.array(self._docs[term_id], dtype=np.int32)  # copies: add() may grow it
            tf = np.array(self._tfs[term_id], dtype=np.float32)
            idf = np.float32(math.log(1 + (n - len(docs) + 0.5) / (len(docs) + 0.5)))
            scores[docs] += idf * (tf / (norm[docs] + tf))
        return scores

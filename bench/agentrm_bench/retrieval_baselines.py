"""Plain retrieval baselines for context views, and the budget filler they share.

Each baseline ranks the agent's messages (single messages: the unit the issue's
measurement used, and the strongest one we found for them) and fills the budget greedily in
rank order, skipping a message that does not fit (a shorter one further down may). Every
baseline counts tokens as the view does (tiktoken, chat framing, 3 reply-priming tokens),
uses the same MiniLM model and the same BM25 tokenizer as AgentRM, so a difference in
recall is the policy's, not the tooling's.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from app.context.retrieval import LexicalCache, topical
from app.domain.context.ranking import reciprocal_rank_fusion

Message = tuple[int, str, str]   # seq, role, content

BASELINES = ("recency", "bm25", "dense", "hybrid")
# Not a plain baseline but a fairness check: the hybrid baseline given AgentRM's query
# processing (question words out of the BM25 query), so that what that step alone is worth
# shows apart from the rest of AgentRM's ranking.
REFERENCES = ("hybrid -question words",)


def fill(order: Sequence[int], messages: dict[int, Message], budget: int,
         count_message: Callable[[str, str], int]) -> list[int]:
    """Seqs taken in ``order`` while they fit ``budget`` (3 reply-priming tokens included)."""
    remaining = budget - 3
    taken = []
    for seq in order:
        _, role, content = messages[seq]
        cost = count_message(role, content)
        if cost <= remaining:
            taken.append(seq)
            remaining -= cost
    return sorted(taken)


class Baselines:
    """Rankings of one conversation's messages; vectors are computed once, by the caller."""

    def __init__(self, messages: Sequence[Message], vectors: np.ndarray, lexical: LexicalCache, key: str):
        self.messages = {seq: m for seq, m in zip((m[0] for m in messages), messages)}
        self.seqs = [m[0] for m in messages]
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.lexical = lexical
        self.index = lexical.index_of(key, [(seq, content) for seq, _, content in messages])

    def ranking(self, name: str, query: str, query_vector: np.ndarray) -> list[int]:
        if name == "recency":
            return self.seqs[::-1]
        if name == "bm25":
            return self.index.ranking(self.lexical.tokenize(query))
        dense = [self.seqs[i] for i in np.lexsort((-np.asarray(self.seqs), -(self.vectors @ query_vector)))]
        if name == "dense":
            return dense
        if name == "hybrid":
            return reciprocal_rank_fusion([dense, self.index.ranking(self.lexical.tokenize(query))])
        if name == "hybrid -question words":
            return reciprocal_rank_fusion([dense, self.index.ranking(topical(self.lexical.tokenize(query)))])
        raise ValueError(f"unknown baseline {name!r}")

"""Ranking the agent's messages for a query: reciprocal-rank fusion of several rankings,
and neighbour propagation of similarity scores. Pure: the shell computes the scores (dense
cosine from the embedding model, BM25 from the lexical index) and passes them in.

Why reciprocal rank (Cormack et al., SIGIR 2009): dense cosines and BM25 scores live on
unrelated scales, and RRF needs no calibration between them, only each list's order.
k = 60 is the paper's constant; it was not tuned here.
"""
from __future__ import annotations

from typing import Mapping, Sequence

RRF_K = 60


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], k: int = RRF_K,
                           weights: Sequence[float] | None = None) -> list[int]:
    """The items of all ``rankings`` (best first), ordered by sum of weight / (k + rank).
    An item missing from a ranking gets nothing from it. Ties: the larger item first (for
    message seqs, the newer message), so the order is total and deterministic."""
    weights = weights if weights is not None else [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    fused: dict[int, float] = {}
    for weight, ranking in zip(weights, rankings):
        for position, item in enumerate(ranking):
            fused[item] = fused.get(item, 0.0) + weight / (k + position + 1)
    return sorted(fused, key=lambda item: (-fused[item], -item))


def with_neighbours(scores: Mapping[int, float], seqs: Sequence[int], weight: float) -> dict[int, float]:
    """score(i) + weight x max(score of the message before i, score of the one after).

    Conversations answer across turns: "where did you go?" / "Paris, last May". A reply
    that names none of the query's words still scores through the question next to it.
    ``seqs`` is the chronological order of the scored messages (neighbours are adjacent
    there, whatever their seq numbers)."""
    out: dict[int, float] = {}
    for index, seq in enumerate(seqs):
        around = [scores[seqs[j]] for j in (index - 1, index + 1) if 0 <= j < len(seqs)]
        out[seq] = scores[seq] + (weight * max(around) if around else 0.0)
    return out


def ranked(scores: Mapping[int, float]) -> list[int]:
    """Items by descending score; ties: the larger item (newer message) first."""
    return sorted(scores, key=lambda item: (-scores[item], -item))

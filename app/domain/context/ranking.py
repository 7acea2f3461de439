"""Ranking the agent's messages for a query: reciprocal-rank fusion of several rankings,
and neighbour propagation of similarity and BM25 scores. Pure: the shell computes the scores (dense
cosine from the embedding model, BM25 from the lexical index) and passes them in.

Why reciprocal rank (Cormack et al., SIGIR 2009): dense cosines and BM25 scores live on
unrelated scales, and RRF needs no calibration between them, only each list's order.
k = 60 is the paper's constant; it is not tuned here.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

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


def with_neighbours(scores: Mapping[int, float], seqs: Sequence[int],
                    weight: float | Sequence[float]) -> dict[int, float]:
    """score(i) + sum over d of weight[d-1] x max(score of the message d before i, score of
    the one d after); a single ``weight`` means distance 1 only.

    Conversations answer across turns: "where did you go?" / "Paris, last May". A reply
    that names none of the query's words still scores through the question next to it, and
    (with a second weight) through the one two turns away: a question, a counter-question,
    then the answer. ``seqs`` is the chronological order of the scored messages (neighbours
    are adjacent there, whatever their seq numbers); a neighbour that does not exist adds
    nothing."""
    weights = (float(weight),) if isinstance(weight, (int, float)) else tuple(weight)
    out: dict[int, float] = {}
    for index, seq in enumerate(seqs):
        total = scores[seq]
        for distance, w in enumerate(weights, start=1):
            around = [scores[seqs[j]] for j in (index - distance, index + distance) if 0 <= j < len(seqs)]
            if around and w:
                total += w * max(around)
        out[seq] = total
    return out


def heads_first(fused: Sequence[int], rankings: Sequence[Sequence[int]], heads: int) -> list[int]:
    """``fused`` with the first ``heads`` items of every one of ``rankings`` moved to its
    front, taken by rank and then by list (the first of each list, then the second of each,
    ...), each once; the rest keep their fused order. Items of ``rankings`` that ``fused``
    does not hold are not added.

    Why: RRF rewards agreement. A message that one ranking puts first and the other misses
    entirely (a paraphrase shares no word with the query, so BM25 scores it 0) gets
    1/(k + 1), which any message ranked within the top k of both lists beats; once the
    lexical list is long (weak matches on common words, and their neighbours), such a hit
    falls out of a small budget. A ranking's own best hits are its strongest evidence, so
    they are taken before the fused order decides the rest."""
    if heads <= 0:
        return list(fused)
    held = set(fused)
    front: list[int] = []
    seen: set[int] = set()
    for position in range(heads):
        for ranking in rankings:
            if position < len(ranking):
                item = ranking[position]
                if item in held and item not in seen:
                    front.append(item)
                    seen.add(item)
    return front + [item for item in fused if item not in seen]


def ranked(scores: Mapping[int, float]) -> list[int]:
    """Items by descending score; ties: the larger item (newer message) first."""
    return sorted(scores, key=lambda item: (-scores[item], -item))

"""The incremental BM25 index scores like bm25s (its default, "lucene") on the same corpus,
however the corpus was built up: all at once or one message at a time."""
from __future__ import annotations

import random

import bm25s
import numpy as np
import pytest

from app.context.bm25_incremental import IncrementalBM25

WORDS = ["port", "billing", "deploy", "kafka", "vault", "rotat", "password", "tenant", "zone",
         "semicolon", "error", "retri", "batch", "slow", "export", "worker", "upstream", "test"]


def corpus(seed: int, n: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(rng.randint(1, 30))] for _ in range(n)]


@pytest.mark.parametrize("seed", range(8))
def test_scores_equal_bm25s_on_the_same_corpus(seed):
    docs = corpus(seed, random.Random(seed).randint(1, 300))
    reference = bm25s.BM25()
    reference.index(docs, show_progress=False)
    mine = IncrementalBM25()
    for doc in docs:
        mine.add(doc)
    rng = random.Random(seed + 100)
    for _ in range(20):
        query = [rng.choice(WORDS + ["unknown"]) for _ in range(rng.randint(1, 6))]
        known = [t for t in query if t in reference.vocab_dict]
        assert set(known) == {t for t in query if t in mine.vocab_dict}
        if not known:
            assert not mine.get_scores(query).any()
            continue
        expected = reference.get_scores(known)
        got = mine.get_scores(known)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-6)


def test_a_document_needs_a_token_and_an_empty_index_scores_nothing():
    index = IncrementalBM25()
    assert index.get_scores(["port"]).shape == (0,)
    with pytest.raises(ValueError):
        index.add([])
    index.add(["port", "port", "billing"])
    assert len(index) == 1 and index.get_scores(["zone"]).tolist() == [0.0]
    assert index.get_scores(["port", "port"])[0] == pytest.approx(2 * index.get_scores(["port"])[0])

"""Hybrid retrieval's parts: the float32 codec, the per-agent vector cache (incremental,
bounded), the BM25 cache (extended by new messages) and the fused ranking with a
message the indexer has not reached yet."""
from __future__ import annotations

import numpy as np

from app.context.retrieval import LexicalCache, VectorCache, from_bytes, hybrid_ranking, to_bytes, topical
from app.domain.context.ranking import heads_first


def unit(*values):
    v = np.zeros(384, dtype=np.float32)
    v[:len(values)] = values
    return v / np.linalg.norm(v)


def test_vectors_are_stored_as_little_endian_float32_and_read_back_exactly():
    rows = np.random.default_rng(1).standard_normal((3, 384)).astype(np.float32)
    blobs = [to_bytes(r) for r in rows]
    assert {len(b) for b in blobs} == {1536}
    assert np.array_equal(from_bytes(blobs), rows)
    assert from_bytes([]).shape == (0, 384)


def test_the_vector_cache_grows_incrementally_skips_rows_it_holds_and_evicts_the_least_recent():
    one = 384 * 4 + 8  # a row and its seq
    cache = VectorCache(max_bytes=5 * one)
    cache.extend("a", [2, 1], np.stack([unit(0, 1), unit(1)]))
    entry = cache.get("a")
    assert list(entry.seqs) == [1, 2] and np.array_equal(entry.matrix[0], unit(1)) and entry.through == 2
    cache.extend("a", [2, 3], np.stack([unit(9), unit(0, 0, 1)]))  # 2 again: skipped
    assert list(cache.get("a").seqs) == [1, 2, 3] and np.array_equal(cache.get("a").matrix[1], unit(0, 1))
    cache.extend("b", [1, 2], np.stack([unit(1), unit(1)]))
    assert cache.nbytes == 5 * one
    cache.get("a")                       # a is now the most recently used
    cache.extend("c", [1], np.stack([unit(1)]))
    assert cache.get("b") is None and cache.get("a") is not None and cache.nbytes <= 5 * one
    cache.drop("a")
    assert cache.get("a") is None


def test_the_bm25_index_grows_by_new_messages_and_is_rebuilt_when_they_differ():
    lexical = LexicalCache()
    first = lexical.index_of("a", [(1, "The billing service listens on port 8080"), (2, "ok thanks")])
    assert lexical.index_of("a", [(1, "The billing service listens on port 8080"), (2, "ok thanks")]) is first
    assert first.ranking(lexical.tokenize("Which port does billing listen on?")) == [1]
    second = lexical.index_of("a", [(1, "The billing service listens on port 8080"), (2, "ok thanks"),
                                    (3, "billing moved to port 9090")])
    assert second is first and second.seqs == [1, 2, 3]                   # extended, not rebuilt
    assert second.ranking(lexical.tokenize("billing ports")) == [1, 3] or \
        second.ranking(lexical.tokenize("billing ports")) == [3, 1]
    assert second.ranking(lexical.tokenize("the and of")) == []          # stopwords only
    assert lexical.index_of("b", [(1, "!!"), (2, "")]).ranking(["x"]) == []  # no words at all
    other = lexical.index_of("a", [(1, "The billing service listens on port 8080"), (4, "kafka consumers")])
    assert other is not first and other.seqs == [1, 4]                    # not an extension: rebuilt
    assert other.ranking(lexical.tokenize("kafka")) == [4]


def test_a_message_without_a_vector_yet_competes_on_bm25_alone():
    lexical = LexicalCache()
    messages = [(1, "We chose Kafka for the event bus."), (2, "Lunch was good."),
                (3, "The vault-sync job rotates the database password.")]
    index = lexical.index_of("a", messages)
    cache = VectorCache()
    cache.extend("a", [1, 2], np.stack([unit(1), unit(0, 1)]))  # 3 not indexed yet
    query = unit(0, 1)                                           # dense prefers message 2
    ranking = hybrid_ranking(query, lexical.tokenize("when does vault-sync rotate the password"),
                             [1, 2, 3], cache.get("a"), index)
    assert set(ranking) == {1, 2, 3} and ranking[0] in (2, 3)
    assert hybrid_ranking(query, [], [1, 2, 3], cache.get("a"), index, bm25=False)[0] == 2
    # BM25 alone ranks only 3; the others still come after it, newest first, for the budget left.
    assert hybrid_ranking(None, lexical.tokenize("vault password"), [1, 2, 3], None, index) == [3, 2, 1]


def test_a_reply_sharing_no_query_word_enters_the_lexical_ranking_through_its_neighbours():
    lexical = LexicalCache()
    messages = [(1, "Lunch was good."), (2, "Where did you go on holiday last May?"), (3, "Paris, with my sister."),
                (4, "Nice. The weather here is grey."), (5, "Fonts are hard."), (6, "Agreed.")]
    index = lexical.index_of("a", messages)
    query = lexical.tokenize("Where did she go on holiday?")
    assert index.ranking(query) == [2]                                    # BM25 alone: only the question
    scores = index.scores(query)
    assert scores[2] > 0 and all(scores[s] == 0.0 for s in (1, 3, 4, 5, 6))
    # 0.5 of the question's score one turn away, 0.25 two turns away, nothing further
    ranking = hybrid_ranking(None, query, [1, 2, 3, 4, 5, 6], None, index, dense=False)
    assert ranking == [2, 3, 1, 4, 6, 5]       # 3 and 1 tie at half the question's score: the newer first
    plain = hybrid_ranking(None, query, [1, 2, 3, 4, 5, 6], None, index, dense=False, lexical_neighbours=())
    assert plain == [2, 6, 5, 4, 3, 1]                     # the rest only newest first, for the budget left


def test_each_rankings_best_hits_lead_the_fused_order_once_each():
    fused = [5, 6, 7, 1, 2, 3, 4]
    assert heads_first(fused, [[1, 2, 3], [2, 4, 6]], 2) == [1, 2, 4, 5, 6, 7, 3]   # 1, 2; then 2 (taken), 4
    assert heads_first(fused, [[1, 2, 3], [2, 4, 6]], 0) == fused
    assert heads_first(fused, [[9, 1]], 1) == fused          # a head the fused order lacks is not added
    assert heads_first(fused, [[], [3]], 3) == [3, 5, 6, 7, 1, 2, 4]


def test_a_paraphrase_the_dense_ranking_puts_first_is_not_buried_by_weak_lexical_matches():
    # The fact shares no word with the question (BM25 0), while many messages match its
    # common words; dense ranks the fact first. RRF alone ranks it behind every message in
    # the top ~60 of both lists; as the dense ranking's best hit it leads.
    lexical = LexicalCache()
    fact = (1, "Everything in vendor/gen/ is produced by codegen, leave those files alone.")
    noise = [(seq, f"Please summarise what changed in module {seq} so far.") for seq in range(2, 60)]
    messages = [fact] + noise
    index = lexical.index_of("a", messages)
    cache = VectorCache()
    vectors = [unit(1, 0.2)] + [unit(0.3, 1, seq / 100) for seq in range(2, 60)]
    cache.extend("a", [s for s, _ in messages], np.stack(vectors))
    tokens = lexical.tokenize("Which folder is generated and what changed so far?")
    assert index.scores(tokens)[1] == 0.0 and len(index.ranking(tokens)) == len(noise)
    chronological = [s for s, _ in messages]
    buried = hybrid_ranking(unit(1), tokens, chronological, cache.get("a"), index, heads=0)
    assert buried.index(1) >= 10
    assert hybrid_ranking(unit(1), tokens, chronological, cache.get("a"), index)[0] == 1


def test_question_words_are_left_out_of_the_lexical_query_unless_nothing_else_is_left():
    lexical = LexicalCache()
    assert topical(lexical.tokenize("What did we decide about the cache, and why?")) == ["decid", "about", "cach"]
    assert topical(lexical.tokenize("What did you do?")) == lexical.tokenize("What did you do?")
    messages = [(1, "What did the team say about lunch?"), (2, "Lunch was fine."),
                (3, "We moved the cache to KeyDB."), (4, "Why did the build fail?"), (5, "ok")]
    index = lexical.index_of("a", messages)
    query = lexical.tokenize("What did we do with the cache?")
    # Without the question words only the cache message matches (and its neighbours, by
    # propagation); with them, "what" and "did" pull in both questions as well.
    ranking = hybrid_ranking(None, query, [1, 2, 3, 4, 5], None, index, dense=False, lexical_neighbours=())
    assert ranking[0] == 3 and ranking[1:] == [5, 4, 2, 1]          # the rest only newest first
    asked = hybrid_ranking(None, query, [1, 2, 3, 4, 5], None, index, dense=False, lexical_neighbours=(),
                           question_words=True)
    assert set(asked[:3]) == {1, 3, 4}

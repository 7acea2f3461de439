"""The embedding lane: one model call at a time, a query ahead of every waiting background
batch, background work in small length-sorted batches returned in the caller's order, and
query vectors remembered. The model is the real MiniLM; the recorder around it only notes
each call and can hold the worker at the first one, so the queue's order is deterministic."""
from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from app.context.embedder import default_embedder
from app.context.embedding_lane import EmbeddingLane


class Recording:
    """The real model, with each call's texts noted; the first call waits for ``release``."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed(self, texts):
        self.calls.append(list(texts))
        if len(self.calls) == 1:
            self.entered.set()
            self.release.wait(60)
        return default_embedder().embed(texts)


async def test_a_query_overtakes_waiting_background_batches_and_results_keep_their_order():
    model = Recording()
    lane = EmbeddingLane(lambda: model, chunk=2)
    texts = ["a much longer sentence about the deployment checklist", "short", "the port is 8080",
             "tenant acme-eu", "x", "the time zone is Europe/Lisbon"]
    background = asyncio.ensure_future(lane.embed_background(texts))
    assert await asyncio.to_thread(model.entered.wait, 60)   # the worker holds the first batch
    assert lane.pending() == 2                            # two more batches wait behind it
    query = asyncio.ensure_future(lane.query("which port?"))
    await asyncio.sleep(0)
    while lane.pending() < 3:                             # the query is queued too
        await asyncio.sleep(0)
    model.release.set()
    vectors, q = await background, await query
    assert model.calls[1] == ["which port?"]              # ahead of the two waiting batches
    assert all(len(c) <= 2 for c in model.calls)
    assert [len(t) for c in model.calls if c != ["which port?"] for t in c] == sorted(len(t) for t in texts)
    expected = default_embedder().embed(texts)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)   # in the caller's order
    np.testing.assert_allclose(q, default_embedder().embed(["which port?"])[0], atol=1e-5)


async def test_query_vectors_are_cached_and_read_only():
    model = Recording()
    model.release.set()
    lane = EmbeddingLane(lambda: model, query_cache=1)
    first = await lane.query("where is parse_row defined?")
    again = await lane.query("where is parse_row defined?")
    assert again is first and len(model.calls) == 1 and lane.query_hits == 1
    with pytest.raises(ValueError):
        first[0] = 1.0
    await lane.query("another question")                  # evicts the first (cache of one)
    await lane.query("where is parse_row defined?")
    assert len(model.calls) == 3


def test_blocking_background_embeds_and_errors_reach_the_caller():
    lane = EmbeddingLane(default_embedder)
    assert lane.embed([]).shape == (0, 384)
    np.testing.assert_allclose(lane.embed(["one", "two three"]), default_embedder().embed(["one", "two three"]),
                               atol=1e-5)

    class Broken:
        def embed(self, texts):
            raise RuntimeError("model files missing")
    with pytest.raises(RuntimeError, match="model files missing"):
        EmbeddingLane(Broken).embed(["x"])
    with pytest.raises(ValueError):
        EmbeddingLane(default_embedder, chunk=0)


def test_the_embedding_thread_count_defaults_to_one_and_bad_values_are_refused():
    from app.context.embedder import embedding_threads
    assert embedding_threads({}) == 1 and embedding_threads({"AGENTRM_EMBEDDING_THREADS": " "}) == 1
    assert embedding_threads({"AGENTRM_EMBEDDING_THREADS": "2"}) == 2
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValueError, match="AGENTRM_EMBEDDING_THREADS"):
            embedding_threads({"AGENTRM_EMBEDDING_THREADS": bad})


async def test_with_a_background_model_a_query_waits_for_no_background_batch():
    held = Recording()                                   # the background model, held at its first batch
    lane = EmbeddingLane(default_embedder, background_of=lambda: held, chunk=2)
    try:
        background = asyncio.ensure_future(lane.embed_background(["one two", "three four", "five six"]))
        await asyncio.to_thread(held.entered.wait, 60)
        q = await lane.query("which port?")              # answered while the batch is still held
        assert not background.done() and held.calls == [["one two", "five six"]]  # length-sorted
        np.testing.assert_allclose(q, default_embedder().embed(["which port?"])[0], atol=1e-5)
        held.release.set()
        vectors = await background
        np.testing.assert_allclose(vectors, default_embedder().embed(["one two", "three four", "five six"]),
                                   atol=1e-5)
        assert ["which port?"] not in held.calls         # queries never reach the background model
    finally:
        held.release.set()
        lane.close()


async def test_close_stops_the_workers_and_fails_the_calls_still_waiting():
    from app.context.embedding_lane import LaneClosed
    held = Recording()
    lane = EmbeddingLane(default_embedder, background_of=lambda: held, chunk=1)
    await lane.query("start the query worker")
    background = asyncio.ensure_future(lane.embed_background(["first", "second", "third"]))
    assert await asyncio.to_thread(held.entered.wait, 60), "the background worker never took its batch"
    workers = lane.workers
    assert len(workers) == 2 and all(w.is_alive() for w in workers)
    closing = asyncio.ensure_future(asyncio.to_thread(lane.close))
    while lane.pending():                               # close fails the two batches still waiting
        await asyncio.sleep(0)
    held.release.set()                                  # the batch in progress finishes
    await closing
    assert not any(w.is_alive() for w in workers) and lane.workers == []
    with pytest.raises(LaneClosed):
        await background
    with pytest.raises(LaneClosed):
        await lane.query("after the close")
    lane.close()                                        # idempotent
    lane.open()                                         # a service started again
    assert (await lane.embed_background(["again"])).shape == (1, 384)
    lane.close()
    assert lane.workers == []


def test_loading_the_model_takes_its_objects_out_of_the_collectors_way():
    import gc

    from app.context.embedder import MiniLMEmbedder
    gc.unfreeze()                                       # whatever an earlier load froze
    assert gc.get_freeze_count() == 0
    model = MiniLMEmbedder()
    model.embed(["load it"])
    frozen = gc.get_freeze_count()
    assert frozen > 10_000                              # the model's modules, tensors, tokenizer
    assert not any(o is model._model for o in gc.get_objects())   # not walked by a collection

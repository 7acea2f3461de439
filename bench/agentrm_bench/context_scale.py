"""Scale of the context tier: N agents with T tokens of history each, in one process.

``agentrm bench context --scale`` folds N synthetic agent histories (ContextAppended
events through the real fold, the same message mix as the planted-fact sessions), fills
the indexer's vector cache with one vector per message (random unit vectors: the cache's
cost does not depend on their values; embedding 600k messages would take this machine
most of an hour, so the indexer's own throughput is measured on a sample instead), and
reports:

- memory: Python heap of the folded contexts (tracemalloc) and the vector cache's bytes
  (float32, 1,536 per message; the cache is bounded, so only that many agents stay hot);
- view latency: relevance-first views (real query embedding, BM25, dense ranking,
  assembly) for random agents at 2k and 4k, p50/p95, cache hit and miss;
- indexer lag: the model's throughput (messages/s on this machine) against the fleet's
  append rate, i.e. how long a message waits for its vector at that rate.
"""
from __future__ import annotations

import random
import statistics
import time
import tracemalloc

import numpy as np

from app.context.embedder import default_embedder
from app.context.retrieval import LexicalCache, VectorCache, hybrid_ranking
from app.domain import context as domain
from app.stats import percentile

from .agentrm_context import cached_count_message
from .context_bench import _filler


def _history(rng: random.Random, agent_id: str, tokens: int) -> tuple[domain.AgentContext, int]:
    state = domain.new_context(agent_id)
    at, total = 1_700_000_000.0, 0
    while total < tokens:
        role, content = _filler(rng, state.last_seq)
        n = cached_count_message(role, content)
        at += rng.uniform(4.0, 40.0)
        state = domain.apply(state, domain.CONTEXT_APPENDED, {
            "agent_id": agent_id, "seq": state.last_seq + 1, "role": role, "content": content,
            "tokens": n, "at": at})
        total += n
    return state, total


def run(agents: int = 1_000, tokens: int = 30_000, cache_bytes: int = 512 * 1024 * 1024,
        appends_per_agent_per_minute: float = 6.0, seed: int = 5, views: int = 200) -> dict:
    rng = random.Random(seed)
    tracemalloc.start()
    started = time.perf_counter()
    states = {}
    messages = 0
    for i in range(agents):
        state, _ = _history(rng, f"a{i}", tokens)
        states[state.agent_id] = state
        messages += len(state.hot)
    fold_seconds = time.perf_counter() - started
    heap_contexts, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    cache = VectorCache(cache_bytes)
    vrng = np.random.default_rng(seed)
    for agent_id, state in states.items():
        v = vrng.standard_normal((len(state.hot), 384)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        cache.extend(agent_id, [m.seq for m in state.hot], v)
    cached_agents = sum(1 for a in states if cache.get(a) is not None)

    model = default_embedder()
    sample = [m.content for m in next(iter(states.values())).hot[:256]]
    model.embed(sample[:8])
    t = time.perf_counter()
    model.embed(sample)
    per_second = len(sample) / (time.perf_counter() - t)
    arrival = agents * appends_per_agent_per_minute / 60.0

    lexical = LexicalCache()
    queries = ["why is the billing batch slow?", "which tests failed in the auth suite?",
               "what did the upstream return when the export worker failed?", "where is parse_row defined?"]
    latencies: dict[int, list[float]] = {2_000: [], 4_000: []}
    names = list(states)
    for k in range(views):
        agent_id = rng.choice(names)
        state = states[agent_id]
        budget = 2_000 if k % 2 else 4_000
        t = time.perf_counter()
        query = queries[k % len(queries)]
        msgs = [m for m in state.hot if not m.pinned]
        index = lexical.index_of(agent_id, [(m.seq, m.content) for m in msgs])
        ranking = hybrid_ranking(model.embed([query])[0], lexical.tokenize(query), [m.seq for m in msgs],
                                 cache.get(agent_id), index)
        domain.assemble_view(state, budget, None, cached_count_message, state.last_activity_at, ranking=ranking)
        latencies[budget].append((time.perf_counter() - t) * 1000)
        lexical.drop(agent_id)  # a cold lexical cache: the worst case, every view rebuilds BM25
    return {
        "agents": agents, "tokens_per_agent": tokens, "messages": messages,
        "fold_seconds": fold_seconds,
        "context_heap_mb": heap_contexts / 2**20,
        "vector_cache_mb": cache.nbytes / 2**20, "vector_cache_limit_mb": cache_bytes / 2**20,
        "vectors_all_agents_mb": messages * 384 * 4 / 2**20, "agents_cached": cached_agents,
        "embed_messages_per_second": per_second, "fleet_appends_per_second": arrival,
        "indexer_utilisation": arrival / per_second,
        "indexer_lag_seconds_at_rate": (1.0 / (per_second - arrival)) if per_second > arrival else None,
        "view_ms": {b: {"p50": percentile(v, 50), "p95": percentile(v, 95), "mean": statistics.fmean(v)}
                    for b, v in latencies.items()},
    }


def render_markdown(r: dict) -> str:
    lag = r["indexer_lag_seconds_at_rate"]
    return "\n".join([
        "## Scale: one deployment",
        "",
        f"{r['agents']} agents x {r['tokens_per_agent']} tokens of history ({r['messages']} messages), "
        f"folded in {r['fold_seconds']:.0f} s.",
        "",
        "| measure | value |", "|---|---:|",
        f"| folded contexts, Python heap | {r['context_heap_mb']:.0f} MB |",
        f"| message vectors, all agents (float32) | {r['vectors_all_agents_mb']:.0f} MB |",
        f"| vector cache held (limit {r['vector_cache_limit_mb']:.0f} MB) | {r['vector_cache_mb']:.0f} MB, "
        f"{r['agents_cached']} agents |",
        f"| view p50 / p95 at 2k (cold BM25 cache) | {r['view_ms'][2000]['p50']:.1f} / {r['view_ms'][2000]['p95']:.1f} ms |",
        f"| view p50 / p95 at 4k (cold BM25 cache) | {r['view_ms'][4000]['p50']:.1f} / {r['view_ms'][4000]['p95']:.1f} ms |",
        f"| indexer throughput (MiniLM, this machine) | {r['embed_messages_per_second']:.0f} messages/s |",
        f"| fleet append rate assumed | {r['fleet_appends_per_second']:.0f} messages/s |",
        f"| indexer utilisation | {r['indexer_utilisation']:.0%} |",
        f"| indexer lag at that rate | {'%.2f s' % lag if lag is not None else 'unbounded (falls behind)'} |",
        "",
    ])

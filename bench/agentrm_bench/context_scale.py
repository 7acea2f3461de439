"""Scale of the context tier: N agents with T tokens of history each, in one process.

``agentrm bench context --scale`` folds N synthetic agent histories (ContextAppended
events through the real fold, the same message mix as the planted-fact sessions), fills
the indexer's vector cache with one vector per message (random unit vectors: the cache's
cost does not depend on their values; embedding 600k messages would take this machine
most of an hour, so the indexer's own throughput is measured on a sample instead), and
reports:

- memory: Python heap of the folded contexts (tracemalloc), of the BM25 indexes (measured
  on a sample of agents and scaled) and the vector cache's bytes (float32, 1,536 per
  message; the cache is bounded, so only that many agents stay hot);
- view latency: relevance-first views (real query embedding of a distinct question, BM25,
  dense ranking, assembly with remembered counts) for random agents at 2k and 4k, p50/p95,
  with the agent's BM25 index built and (one view in four) not yet built;
- indexer lag: the model's throughput (messages/s on this machine) against the fleet's
  append rate, i.e. how long a message waits for its vector at that rate.
"""
from __future__ import annotations

import random
import statistics
import time
import tracemalloc

import numpy as np

from app.context.count_cache import CountCache
from app.context.embedder import default_embedder
from app.context.embedding_lane import EmbeddingLane
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
        appends_per_agent_per_minute: float = 6.0, seed: int = 5, views: int = 200,
        lexical_sample: int = 50) -> dict:
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

    # BM25 indexes: built for a sample of agents (tokenizing 600k messages would take this
    # machine most of an hour), their heap measured and scaled to the fleet.
    lexical = LexicalCache(max_agents=agents)
    names = list(states)
    sample = names[:min(lexical_sample, agents)]
    lexical.index_of("warm-up", [(1, "load the stemmer and the stopwords first")])
    lexical.drop("warm-up")
    before, _ = tracemalloc.get_traced_memory()
    build = []
    for agent_id in sample:
        msgs = [(m.seq, m.content) for m in states[agent_id].hot if not m.pinned]
        t = time.process_time()
        lexical.index_of(agent_id, msgs)
        build.append((time.process_time() - t) * 1000)
    lexical_mb_per_agent = (tracemalloc.get_traced_memory()[0] - before) / 2**20 / len(sample)
    tracemalloc.stop()

    cache = VectorCache(cache_bytes)
    vrng = np.random.default_rng(seed)
    for agent_id, state in states.items():
        v = vrng.standard_normal((len(state.hot), 384)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        cache.extend(agent_id, [m.seq for m in state.hot], v)
    cached_agents = sum(1 for a in states if cache.get(a) is not None)

    # The indexer's model throughput as it runs in the service: one new message from each
    # of many agents, embedded together in the lane's small length-sorted batches.
    model = default_embedder()
    backlog = [states[names[i % agents]].hot[(i // agents) % len(states[names[i % agents]].hot)].content
               for i in range(256)]
    lane = EmbeddingLane(lambda: model)
    lane.embed(backlog[:8])
    t, cpu = time.perf_counter(), time.process_time()
    lane.embed(backlog)
    per_second = len(backlog) / (time.perf_counter() - t)
    cpu_per_message_ms = (time.process_time() - cpu) * 1000 / len(backlog)
    arrival = agents * appends_per_agent_per_minute / 60.0

    counts = CountCache()
    latencies: dict[str, list[float]] = {"hit": [], "miss": []}
    for k in range(views):
        warm = k % 4 != 3   # one view in four is an agent whose BM25 index is not built yet
        agent_id = rng.choice(sample) if warm else rng.choice(names[len(sample):] or sample)
        state = states[agent_id]
        budget = 2_000 if k % 2 else 4_000
        words = [w for w in rng.choice(state.hot).content.split() if len(w) > 3]
        query = "what happened with " + " ".join(words[:5]) + f" ({k})"   # distinct: never cached
        t = time.perf_counter()
        unpinned = [m for m in state.hot if not m.pinned]
        index = lexical.index_of(agent_id, [(m.seq, m.content) for m in unpinned])
        ranking = hybrid_ranking(model.embed([query])[0], lexical.tokenize(query), [m.seq for m in unpinned],
                                 cache.get(agent_id), index)
        domain.assemble_view(state, budget, None, counts.counter("cl100k_base"), state.last_activity_at,
                             ranking=ranking)
        latencies["hit" if warm else "miss"].append((time.perf_counter() - t) * 1000)
    return {
        "agents": agents, "tokens_per_agent": tokens, "messages": messages,
        "fold_seconds": fold_seconds,
        "context_heap_mb": heap_contexts / 2**20,
        "lexical_mb_per_agent": lexical_mb_per_agent, "lexical_mb_all_agents": lexical_mb_per_agent * agents,
        "lexical_build_cpu_ms_p50": percentile(build, 50),
        "vector_cache_mb": cache.nbytes / 2**20, "vector_cache_limit_mb": cache_bytes / 2**20,
        "vectors_all_agents_mb": messages * 384 * 4 / 2**20, "agents_cached": cached_agents,
        "embed_messages_per_second": per_second, "embed_cpu_ms_per_message": cpu_per_message_ms,
        "fleet_appends_per_second": arrival,
        "indexer_utilisation": arrival / per_second,
        "indexer_lag_seconds_at_rate": (1.0 / (per_second - arrival)) if per_second > arrival else None,
        "view_ms": {kind: {"p50": percentile(v, 50), "p95": percentile(v, 95), "mean": statistics.fmean(v)}
                    for kind, v in latencies.items() if v},
    }


def render_markdown(r: dict) -> str:
    lag = r["indexer_lag_seconds_at_rate"]
    rows = [
        "## Scale: one deployment",
        "",
        f"{r['agents']} agents x {r['tokens_per_agent']} tokens of history ({r['messages']} messages), "
        f"folded in {r['fold_seconds']:.0f} s.",
        "",
        "| measure | value |", "|---|---:|",
        f"| folded contexts, Python heap | {r['context_heap_mb']:.0f} MB |",
        f"| BM25 indexes, all agents (measured on a sample, per agent {r['lexical_mb_per_agent']:.2f} MB) "
        f"| {r['lexical_mb_all_agents']:.0f} MB |",
        f"| message vectors, all agents (float32) | {r['vectors_all_agents_mb']:.0f} MB |",
        f"| vector cache held (limit {r['vector_cache_limit_mb']:.0f} MB) | {r['vector_cache_mb']:.0f} MB, "
        f"{r['agents_cached']} agents |",
    ]
    for kind, label in (("hit", "BM25 index built"), ("miss", "first view of the agent: BM25 built in it")):
        if kind in r["view_ms"]:
            v = r["view_ms"][kind]
            rows.append(f"| view p50 / p95, new query ({label}) | {v['p50']:.1f} / {v['p95']:.1f} ms |")
    rows += [
        f"| indexer throughput (MiniLM, one torch thread, lane batches) | {r['embed_messages_per_second']:.0f} "
        f"messages/s ({r['embed_cpu_ms_per_message']:.1f} ms CPU each) |",
        f"| fleet append rate assumed | {r['fleet_appends_per_second']:.0f} messages/s |",
        f"| indexer utilisation | {r['indexer_utilisation']:.0%} |",
        f"| indexer lag at that rate | {f'{lag:.2f} s' if lag is not None else 'unbounded (falls behind)'} |",
        "",
    ]
    return "\n".join(rows)

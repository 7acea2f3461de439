"""Context latency through the real service: `agentrm serve` (one worker) on PostgreSQL,
driven over loopback HTTP as agents drive it.

Phases, repeated ``--repeat`` times on a fresh set of agents each time:
1. **append**: each agent appends its history one message per `appendContext` (closed
   loop, agents concurrently) until it holds ``tokens`` tokens, crossing the compaction
   watermark many times (budget 8,192: compaction starts at ~4.5k hot tokens). Every
   append's round trip is recorded; the ones whose answer shows hot tokens at or over the
   lowest high watermark the adaptive rule allows (40% of the budget) are the ones that
   hand the agent to the compaction worker, and are reported apart.
2. **indexer**: the time from the last append until every message has a stored vector
   (polled in ``context_vectors``), and the messages/s that makes.
3. **view**: relevance-first views with a query (each a distinct question made of words of
   the agent's own messages, so the query cache does not help; then the same questions
   again, so it does) at 2k and 4k, on the agents' full histories.
4. **view under indexing**: the same views while another agent appends a burst that keeps
   the indexer busy, so a query must get past indexing batches to the model.
5. **lag at a rate**: agents append at ``rate`` messages/s (open loop) for ``seconds``; the
   indexer's backlog (messages appended without a stored vector) is sampled throughout.

The server's CPU seconds per phase come from /proc; the machine is shared, so the CPU per
operation is the figure to compare between runs, and wall-clock percentiles are reported
with their spread over the repeats.
"""
from __future__ import annotations

import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx

from .context_bench import _filler
from .load_bench import _start_server, cpu_seconds
from .processes import stop_process
from .system_bench import pct

APPEND = ("mutation($c: String!, $r: String!) { appendContext(input: {role: $r, content: $c, pinned: false}) "
          "{ hotTokens warmTokens messages } }")
VIEW = "query($b: Int!, $q: String) { context(budgetTokens: $b, query: $q) { tokens } }"
BUDGET = 8192
LOWEST_HIGH_WATERMARK = 0.40   # 0.55, lowered by at most 0.15 as the growth rate rises


async def _gql(http: httpx.AsyncClient, token: str, query: str, **variables) -> dict:
    r = await http.post("/graphql", json={"query": query, "variables": variables},
                        headers={"Authorization": f"Bearer {token}"})
    body = r.json()
    if body.get("errors"):
        raise RuntimeError(f"GraphQL error: {body['errors']}")
    return body["data"]


async def _agents(http: httpx.AsyncClient, operator: str, prefix: str, n: int) -> list[str]:
    out = []
    for i in range(n):
        data = await _gql(http, operator, 'mutation($n: String!) { registerAgent(input: {name: $n, pool: "ctx", '
                          f'contextBudgetTokens: {BUDGET}}}) {{ token }} }}', n=f"{prefix}{i}")
        out.append(data["registerAgent"]["token"])
    return out


def _history(rng: random.Random, tokens: int) -> list[tuple[str, str]]:
    from .agentrm_context import cached_count_message
    out: list[tuple[str, str]] = []
    total = 0
    while total < tokens:
        role, content = _filler(rng, len(out))
        out.append((role, content))
        total += cached_count_message(role, content)
    return out


def _questions(rng: random.Random, history: list[tuple[str, str]], n: int) -> list[str]:
    """Questions made of words of the agent's own messages (distinct, so never cached)."""
    out: list[str] = []
    while len(out) < n:
        words = [w.strip(".,:;()[]'\"") for w in rng.choice(history)[1].split()]
        words = [w for w in words if len(w) > 3]
        if len(words) >= 3:
            q = "what happened with " + " ".join(rng.sample(words, min(5, len(words)))) + f"? ({len(out)})"
            out.append(q)
    return out


async def _stored(db: asyncpg.Connection) -> int:
    return await db.fetchval("SELECT count(*) FROM context_vectors")


async def _appended(db: asyncpg.Connection) -> int:
    return await db.fetchval("SELECT count(*) FROM events WHERE type = 'ContextAppended'")


def _summ(values: list[float]) -> dict:
    return {"n": len(values), "p50": pct(values, 50), "p95": pct(values, 95), "p99": pct(values, 99),
            "max": max(values) if values else None}


async def _one_repeat(base: str, operator: str, db: asyncpg.Connection, pid: int, r: int, *, agents: int,
                      tokens: int, views: int, rate: float, seconds: float, seed: int) -> dict:
    limits = httpx.Limits(max_connections=agents + 4)
    load_before = os.getloadavg()[0]   # the machine is shared: each repeat states its load
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as http:
        fleet = await _agents(http, operator, f"r{r}a", agents)
        histories = [_history(random.Random(seed * 1000 + r * 100 + i), tokens) for i in range(agents)]

        # 1. appends, crossing the watermark
        appends: list[tuple[float, bool]] = []

        async def feed(token: str, history: list[tuple[str, str]]) -> None:
            for role, content in history:
                t = time.perf_counter()
                stats = (await _gql(http, token, APPEND, r=role, c=content))["appendContext"]
                appends.append((time.perf_counter() - t, stats["hotTokens"] >= LOWEST_HIGH_WATERMARK * BUDGET))
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        await asyncio.gather(*(feed(tok, h) for tok, h in zip(fleet, histories)))
        append_wall, append_cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0

        # 2. the indexer catches up with the history
        target = await _appended(db)
        t_last, stored0 = time.perf_counter(), await _stored(db)
        cpu0 = cpu_seconds(pid)
        while await _stored(db) < target:
            await asyncio.sleep(0.2)
        catch_up = time.perf_counter() - t_last
        index_cpu = cpu_seconds(pid) - cpu0

        # 3. views with a query: distinct questions (cache misses), then the same again (hits)
        questions = [_questions(random.Random(seed + i), h, views) for i, h in enumerate(histories)]

        async def view_round(qs: list[list[str]]) -> dict[int, list[float]]:
            out: dict[int, list[float]] = {2000: [], 4000: []}
            for k in range(views):
                for token, q in zip(fleet, qs):
                    budget = 2000 if k % 2 else 4000
                    t = time.perf_counter()
                    got = (await _gql(http, token, VIEW, b=budget, q=q[k]))["context"]
                    out[budget].append(time.perf_counter() - t)
                    assert got["tokens"] <= budget
            return out
        cpu0 = cpu_seconds(pid)
        miss = await view_round(questions)
        view_cpu = (cpu_seconds(pid) - cpu0) / (views * agents)
        hit = await view_round(questions)

        # 4. the same distinct-question views while a burst keeps the indexer busy
        busy_token = (await _agents(http, operator, f"r{r}busy", 1))[0]
        burst = _history(random.Random(seed + 99 + r), 12_000)
        stop = asyncio.Event()

        async def keep_busy() -> None:
            for role, content in burst:
                if stop.is_set():
                    return
                await _gql(http, busy_token, APPEND, r=role, c=content)
        busy = asyncio.create_task(keep_busy())
        await asyncio.sleep(1.0)  # let the backlog build
        fresh = [_questions(random.Random(seed + 50 + i), h, views) for i, h in enumerate(histories)]
        under_load = await view_round(fresh)
        stop.set()
        await busy

        # 5. indexer lag at a fixed append rate (open loop, Poisson), after it caught up
        while await _stored(db) < await _appended(db):
            await asyncio.sleep(0.2)
        lagging = await _agents(http, operator, f"r{r}lag", 20)
        lag_samples: list[int] = []
        sent = 0
        lrng = random.Random(seed + 7 + r)
        pending: set[asyncio.Task] = set()
        t0 = time.perf_counter()
        next_at = t0
        sample_at = t0
        while time.perf_counter() - t0 < seconds:
            now = time.perf_counter()
            if now >= next_at:
                role, content = _filler(lrng, sent)
                task = asyncio.create_task(_gql(http, lagging[sent % len(lagging)], APPEND, r=role, c=content))
                pending.add(task)
                task.add_done_callback(pending.discard)
                sent += 1
                next_at += lrng.expovariate(rate)
            if now >= sample_at:
                lag_samples.append(await _appended(db) - await _stored(db))
                sample_at += 0.5
            await asyncio.sleep(max(0.0, min(next_at, sample_at) - time.perf_counter()))
        if pending:
            await asyncio.gather(*pending)
        t_end = time.perf_counter()
        while await _stored(db) < await _appended(db):
            await asyncio.sleep(0.2)
        drain = time.perf_counter() - t_end

    lat = [a for a, _ in appends]
    over = [a for a, crossing in appends if crossing]
    return {
        "append_ms": _summ([x * 1000 for x in lat]), "append_over_watermark_ms": _summ([x * 1000 for x in over]),
        "append_server_cpu_ms": append_cpu * 1000 / max(len(lat), 1),
        "append_wall_s": append_wall,
        "index_catch_up_s": catch_up, "index_messages": target - stored0,
        "index_messages_per_s": (target - stored0) / catch_up if catch_up > 0 else None,
        "index_server_cpu_s": index_cpu,
        "view_ms_miss": {b: _summ([x * 1000 for x in v]) for b, v in miss.items()},
        "view_ms_hit": {b: _summ([x * 1000 for x in v]) for b, v in hit.items()},
        "view_ms_while_indexing": {b: _summ([x * 1000 for x in v]) for b, v in under_load.items()},
        "view_server_cpu_ms": view_cpu * 1000,
        "lag_rate_per_s": rate, "lag_sent": sent, "lag_max_messages": max(lag_samples, default=0),
        "lag_p50_messages": statistics.median(lag_samples) if lag_samples else 0,
        "lag_drain_s": drain,
        "load_average_1m": [load_before, os.getloadavg()[0]],
    }


def _spread(values: list[float | None]) -> dict:
    vs = [v for v in values if v is not None]
    return {"median": statistics.median(vs) if vs else None, "min": min(vs, default=None),
            "max": max(vs, default=None), "runs": [round(v, 2) for v in vs]}


FIGURES = {
    "append p50 ms": lambda r: r["append_ms"]["p50"],
    "append p99 ms": lambda r: r["append_ms"]["p99"],
    "append p99 ms, over the watermark": lambda r: r["append_over_watermark_ms"]["p99"],
    "append server CPU ms per append": lambda r: r["append_server_cpu_ms"],
    "view p50 ms at 4k, new query": lambda r: r["view_ms_miss"][4000]["p50"],
    "view p95 ms at 4k, new query": lambda r: r["view_ms_miss"][4000]["p95"],
    "view p50 ms at 2k, new query": lambda r: r["view_ms_miss"][2000]["p50"],
    "view p50 ms at 4k, repeated query": lambda r: r["view_ms_hit"][4000]["p50"],
    "view p50 ms at 4k, new query, indexer busy": lambda r: r["view_ms_while_indexing"][4000]["p50"],
    "view p95 ms at 4k, new query, indexer busy": lambda r: r["view_ms_while_indexing"][4000]["p95"],
    "view server CPU ms per view (new query)": lambda r: r["view_server_cpu_ms"],
    "indexer messages/s (catching up)": lambda r: r["index_messages_per_s"],
    "indexer server CPU ms per message (catching up)": lambda r: (
        r["index_server_cpu_s"] * 1000 / r["index_messages"] if r["index_messages"] else None),
    "indexer backlog p50 at the rate (messages)": lambda r: r["lag_p50_messages"],
    "indexer backlog max at the rate (messages)": lambda r: r["lag_max_messages"],
    "indexer drain after the rate phase s": lambda r: r["lag_drain_s"],
}


async def run_async(url: str, *, agents: int = 2, tokens: int = 30_000, views: int = 20, repeat: int = 3,
                    rate: float = 10.0, seconds: float = 20.0, seed: int = 3) -> dict:
    token = "op_bench_" + os.urandom(8).hex()
    with tempfile.TemporaryDirectory(prefix="agentrm-context-") as tmp:
        proc, base = await _start_server(url, 1, token, Path(tmp))
        db = await asyncpg.connect(url)
        try:
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                await _gql(http, token, 'mutation { createPool(input: {name: "ctx", lanes: 8, rpm: 1000000, '
                           'tpm: 1000000000, leaseSeconds: 300}) { name } }')
            runs = []
            for r in range(repeat):
                runs.append(await _one_repeat(base, token, db, proc.pid, r, agents=agents, tokens=tokens,
                                              views=views, rate=rate, seconds=seconds, seed=seed))
        finally:
            await db.close()
            stop_process(proc)
    return {"settings": {"agents": agents, "tokens": tokens, "views": views, "repeat": repeat, "rate": rate,
                         "seconds": seconds, "seed": seed, "budget": BUDGET},
            "figures": {name: _spread([f(r) for r in runs]) for name, f in FIGURES.items()},
            "runs": runs}


def render_markdown(result: dict) -> str:
    s = result["settings"]
    lines = [
        "## Latency through the service (HTTP, PostgreSQL, one worker)", "",
        f"{s['agents']} agents x {s['tokens']} tokens of history appended one message per `appendContext` "
        f"(budget {s['budget']}, so every agent is compacted many times); {s['views']} views per agent and "
        f"budget; indexer lag at {s['rate']:.0f} appends/s for {s['seconds']:.0f} s; {s['repeat']} repeats "
        "(median, range).", "",
        "Load average (1 min) at the start and end of each repeat: " + "; ".join(
            f"{a:.1f} -> {b:.1f}" for a, b in (r.get("load_average_1m", (0.0, 0.0)) for r in result["runs"]))
        + " (2 cores; the wall-clock figures are comparable only between runs at low load).", "",
        "| figure | median | min | max |", "|---|---:|---:|---:|",
    ]
    for name, v in result["figures"].items():
        if v["median"] is None:
            continue
        lines.append(f"| {name} | {v['median']:.1f} | {v['min']:.1f} | {v['max']:.1f} |")
    return "\n".join(lines) + "\n"

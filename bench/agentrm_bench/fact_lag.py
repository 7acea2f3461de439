"""`agentrm bench fact-lag`: how soon an append's key facts are in the agent's views, what
that costs appends and views, and whether a query-less view keeps held-out planted facts.

Against a real `agentrm serve` (one worker) on PostgreSQL, over loopback HTTP. Each repeat,
on fresh agents:

1. **lag**: ``agents`` agents each append one message per `appendContext` at ``rate``
   appends/s (a fixed schedule: a late append is sent at once, never skipped) for
   ``seconds``, budget 8,192 (so compactions run meanwhile). A message's lag is the time
   from its append's answer to the commit of the `ContextFactsExtracted` event that
   covers it, as seen by a watcher polling the log every 10 ms: from then on the server's
   views draw on its facts (the event is folded before the worker serves the next view).
   A fact event committed before the append's answer reached the client counts as 0.
   Every append's round trip is recorded too.
2. **views**: each agent then reads ``views`` views of 4,000 tokens without a query and as
   many with a (distinct) query.
3. **probe**: a fresh agent appends the probe session (app-agnostic chatter with the 22
   held-out facts of ``data/heldout_planted_facts.json``, agentrm_bench.fact_probe) as fast
   as it can, one message per call; its query-less 4k view is read 0.5 s after the last
   append returns, and again once the log shows no new event of its context for 3 s
   (compaction and extraction settled).

``--server-root`` runs the server of another checkout (the baseline: the main branch),
with the same client, database and scenario; a server without append-time facts records
no fact event, so its lag is reported as absent.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from .context_latency import _gql, _questions
from .fact_probe import DATA, chatter, planted_facts, present, probe_session
from .load_bench import _start_server
from .processes import stop_process
from .system_bench import pct

APPEND = ("mutation($c: String!, $r: String!) { appendContext(input: {role: $r, content: $c, pinned: false}) "
          "{ messages } }")
VIEW = "query($b: Int!, $q: String) { context(budgetTokens: $b, query: $q) { tokens items { kind content } } }"
BUDGET = 8192
VIEW_BUDGET = 4000
FACT_EVENT = "ContextFactsExtracted"


async def _register(http: httpx.AsyncClient, operator: str, name: str) -> tuple[str, str]:
    data = await _gql(http, operator, 'mutation($n: String!) { registerAgent(input: {name: $n, pool: "facts", '
                      f'contextBudgetTokens: {BUDGET}}}) {{ agent {{ id }} token }} }}', n=name)
    return data["registerAgent"]["agent"]["id"], data["registerAgent"]["token"]


def _summ(values: list[float]) -> dict:
    return {"n": len(values), "p50": pct(values, 50), "p99": pct(values, 99), "max": max(values, default=None)}


class FactWatcher:
    """Polls the log for fact events; the moment each (agent, seq) was first seen covered."""

    def __init__(self, db: asyncpg.Connection, after: int) -> None:
        self.db, self.after = db, after
        self.seen: dict[tuple[str, int], float] = {}
        self._stop = asyncio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            rows = await self.db.fetch("SELECT position, data FROM events WHERE position > $1 AND type = $2 "
                                       "ORDER BY position", self.after, FACT_EVENT)
            now = time.perf_counter()
            for row in rows:
                data = row["data"] if isinstance(row["data"], dict) else json.loads(row["data"])
                for seq in data["seqs"]:
                    self.seen.setdefault((data["agent_id"], int(seq)), now)
                self.after = row["position"]
            await asyncio.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()


async def _head(db: asyncpg.Connection) -> int:
    return await db.fetchval("SELECT coalesce(max(position), 0) FROM events")


async def _lag_phase(http: httpx.AsyncClient, operator: str, db: asyncpg.Connection, r: int, *, agents: int,
                     rate: float, seconds: float, seed: int, expect_facts: bool) -> dict:
    fleet = [await _register(http, operator, f"lag{r}_{i}_{os.urandom(2).hex()}") for i in range(agents)]
    watcher = FactWatcher(db, await _head(db))
    watching = asyncio.create_task(watcher.run())
    returned: dict[tuple[str, int], float] = {}
    append_ms: list[float] = []

    async def agent_loop(i: int, agent_id: str, token: str) -> None:
        rng = random.Random(seed * 1000 + r * 100 + i)
        start = time.perf_counter() + rng.uniform(0, 1.0 / rate)   # agents out of phase
        n = 0
        while True:
            due = start + n / rate
            if due - start >= seconds:
                return
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            role, content = chatter(rng, n)
            t = time.perf_counter()
            seq = (await _gql(http, token, APPEND, r=role, c=content))["appendContext"]["messages"]
            done = time.perf_counter()
            append_ms.append((done - t) * 1000)
            returned[(agent_id, seq)] = done
            n += 1
    await asyncio.gather(*(agent_loop(i, a, t) for i, (a, t) in enumerate(fleet)))
    if expect_facts:
        deadline = time.perf_counter() + 30
        while set(returned) - set(watcher.seen) and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
    watcher.stop()
    await watching
    lags = [max(0.0, watcher.seen[k] - at) * 1000 for k, at in returned.items() if k in watcher.seen]
    return {"fleet": fleet, "append_ms": _summ(append_ms), "appends": len(append_ms),
            "lag_ms": _summ(lags) if lags else None, "not_covered": len(set(returned) - set(watcher.seen))}


async def _view_phase(http: httpx.AsyncClient, fleet: list[tuple[str, str]], views: int, seed: int) -> dict:
    plain: list[float] = []
    queried: list[float] = []
    for i, (_agent_id, token) in enumerate(fleet):
        rng = random.Random(seed + i)
        history = [chatter(rng, n) for n in range(60)]
        questions = _questions(random.Random(seed + 50 + i), history, views)
        for k in range(views):
            t = time.perf_counter()
            got = (await _gql(http, token, VIEW, b=VIEW_BUDGET, q=None))["context"]
            plain.append((time.perf_counter() - t) * 1000)
            assert got["tokens"] <= VIEW_BUDGET
            t = time.perf_counter()
            got = (await _gql(http, token, VIEW, b=VIEW_BUDGET, q=questions[k]))["context"]
            queried.append((time.perf_counter() - t) * 1000)
    return {"view_ms_no_query": _summ(plain), "view_ms_query": _summ(queried)}


async def _settled(http: httpx.AsyncClient, token: str, db: asyncpg.Connection, stream: str, quiet: float = 3.0,
                   limit: float = 180.0) -> float:
    """Seconds until compaction caught up (hot tokens at most the resting high watermark,
    55% of the budget) and the stream then had no new event for ``quiet`` seconds."""
    t0 = time.perf_counter()
    last, since = None, time.perf_counter()
    while time.perf_counter() - t0 < limit:
        head = await db.fetchval("SELECT coalesce(max(version), 0) FROM events WHERE stream = $1", stream)
        hot = (await _gql(http, token, "{ contextStats { hotTokens } }"))["contextStats"]["hotTokens"]
        if head != last or hot > 0.55 * BUDGET:
            last, since = head, time.perf_counter()
        elif time.perf_counter() - since >= quiet:
            return since - t0
        await asyncio.sleep(0.2)
    return limit


def _kinds_with(view: dict, strings: tuple[str, ...]) -> list[str]:
    return sorted({i["kind"] for i in view["items"] if any(s in i["content"] for s in strings)})


async def _probe(http: httpx.AsyncClient, operator: str, db: asyncpg.Connection, r: int, seed: int,
                 facts_path: Path) -> dict:
    agent_id, token = await _register(http, operator, f"probe{r}_{os.urandom(2).hex()}")
    facts = planted_facts(facts_path)
    session = probe_session(seed, facts=facts)
    t0 = time.perf_counter()
    for role, content in session.messages:
        await _gql(http, token, APPEND, r=role, c=content)
    appended_s = time.perf_counter() - t0
    last = time.perf_counter()
    await asyncio.sleep(max(0.0, last + 0.5 - time.perf_counter()))
    early = (await _gql(http, token, VIEW, b=VIEW_BUDGET, q=None))["context"]
    settle_s = await _settled(http, token, db, f"context-{agent_id}")
    late = (await _gql(http, token, VIEW, b=VIEW_BUDGET, q=None))["context"]
    out: dict[str, Any] = {"appended_s": appended_s, "settle_s": settle_s}
    for name, view in (("after_0_5_s", early), ("settled", late)):
        text = "\n".join(i["content"] for i in view["items"])
        found = present(text, facts)
        out[name] = {"present": sum(found.values()), "of": len(facts), "tokens": view["tokens"],
                     "missed": [{"id": f.id, "kind": f.kind} for f in facts if not found[f.id]],
                     "where": {f.id: _kinds_with(view, f.present_if) for f in facts if found[f.id]}}
    return out


async def _one_repeat(base: str, operator: str, db: asyncpg.Connection, r: int, *, agents: int, rate: float,
                      seconds: float, views: int, seed: int, expect_facts: bool, probe: bool,
                      facts_path: Path) -> dict:
    load_before = os.getloadavg()[0]
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=httpx.Limits(max_connections=agents + 4)) as http:
        lag = await _lag_phase(http, operator, db, r, agents=agents, rate=rate, seconds=seconds, seed=seed,
                               expect_facts=expect_facts)
        fleet = lag.pop("fleet")
        viewed = await _view_phase(http, fleet, views, seed + r)
        probed = await _probe(http, operator, db, r, seed, facts_path) if probe else None
    return {**lag, **viewed, "probe": probed, "load_average_1m": [load_before, os.getloadavg()[0]]}


def _spread(values: list[float | None]) -> dict:
    vs = [v for v in values if v is not None]
    return {"median": statistics.median(vs) if vs else None, "min": min(vs, default=None),
            "max": max(vs, default=None), "runs": [round(v, 2) for v in vs]}


FIGURES = {
    "fact lag p50 ms": lambda r: (r["lag_ms"] or {}).get("p50"),
    "fact lag p99 ms": lambda r: (r["lag_ms"] or {}).get("p99"),
    "fact lag max ms": lambda r: (r["lag_ms"] or {}).get("max"),
    "append p50 ms": lambda r: r["append_ms"]["p50"],
    "append p99 ms": lambda r: r["append_ms"]["p99"],
    "view p50 ms at 4k, no query": lambda r: r["view_ms_no_query"]["p50"],
    "view p99 ms at 4k, no query": lambda r: r["view_ms_no_query"]["p99"],
    "view p50 ms at 4k, query": lambda r: r["view_ms_query"]["p50"],
    "planted facts in the 4k view 0.5 s after the last append (of 22)":
        lambda r: r["probe"]["after_0_5_s"]["present"] if r["probe"] else None,
    "planted facts in the 4k view once settled (of 22)":
        lambda r: r["probe"]["settled"]["present"] if r["probe"] else None,
}


async def run_async(url: str, *, agents: int = 4, rate: float = 5.0, seconds: float = 30.0, views: int = 10,
                    repeat: int = 3, seed: int = 29, server_root: Path | None = None, probe: bool = True,
                    facts_path: Path = DATA) -> dict:
    token = "op_bench_" + os.urandom(8).hex()
    expect_facts = server_root is None
    with tempfile.TemporaryDirectory(prefix="agentrm-fact-lag-") as tmp:
        proc, base = await _start_server(url, 1, token, Path(tmp), root=server_root)
        db = await asyncpg.connect(url)
        try:
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                await _gql(http, token, 'mutation { createPool(input: {name: "facts", lanes: 8, rpm: 1000000, '
                           'tpm: 1000000000, leaseSeconds: 300}) { name } }')
            runs = [await _one_repeat(base, token, db, r, agents=agents, rate=rate, seconds=seconds, views=views,
                                      seed=seed, expect_facts=expect_facts, probe=probe, facts_path=facts_path)
                    for r in range(repeat)]
        finally:
            await db.close()
            stop_process(proc)
    return {"settings": {"agents": agents, "rate": rate, "seconds": seconds, "views": views, "repeat": repeat,
                         "seed": seed, "budget": BUDGET, "view_budget": VIEW_BUDGET, "facts": facts_path.name,
                         "server": "baseline (" + server_root.name + ")" if server_root else "this checkout"},
            "figures": {name: _spread([f(r) for r in runs]) for name, f in FIGURES.items()},
            "runs": runs}


def render_markdown(result: dict) -> str:
    s = result["settings"]
    lines = [
        f"## Fact lag, append and view latency, planted facts ({s['server']})", "",
        f"{s['agents']} agents appending at {s['rate']:g} appends/s each for {s['seconds']:g} s (budget "
        f"{s['budget']}); {s['views']} views per agent at {s['view_budget']} tokens with and without a query; the "
        f"planted-facts probe (300 messages, facts of `{s.get('facts', 'heldout_planted_facts.json')}`); "
        f"{s['repeat']} repeats (median, range).", "",
        "Load average (1 min) at the start and end of each repeat: " + "; ".join(
            f"{a:.1f} -> {b:.1f}" for a, b in (r["load_average_1m"] for r in result["runs"])) + ".", "",
        "| figure | median | min | max | runs |", "|---|---:|---:|---:|---|",
    ]
    for name, v in result["figures"].items():
        if v["median"] is None:
            lines.append(f"| {name} | n/a | | | |")
            continue
        lines.append(f"| {name} | {v['median']:.1f} | {v['min']:.1f} | {v['max']:.1f} | "
                     f"{', '.join(str(x) for x in v['runs'])} |")
    probes = [r["probe"] for r in result["runs"] if r["probe"]]
    if probes:
        lines += ["", "Planted facts missed (id, kind), per repeat:", ""]
        for i, p in enumerate(probes):
            for moment in ("after_0_5_s", "settled"):
                missed = ", ".join(f"{m['id']} {m['kind']}" for m in p[moment]["missed"]) or "none"
                lines.append(f"- repeat {i + 1}, {moment.replace('_', ' ')}: {p[moment]['present']}/22; "
                             f"missed: {missed}")
    return "\n".join(lines) + "\n"

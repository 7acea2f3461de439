"""`agentrm bench system`: what the machinery costs, each figure against a baseline
measured in the same run on the same database.

| figure | baseline it is divided by |
|---|---|
| grant latency (requestTurn -> GRANTED, lanes free), 1/100/1000 agents | one durable single-row INSERT + COMMIT (1) |
| sustained turns per second (request, grant, complete) | raw INSERT loop, events/s, over the events of one turn |
| EventStore.append events/s (8 concurrent single appends; batches of 100) | raw INSERTs on 8 connections, and COPY |
| projection rebuild events/s | reading the same log back with JSON decoding and nothing else |
| subscription delivery latency P99 | a bare LISTEN/NOTIFY round trip |

(1) The floor any event-sourced grant pays twice: the request and the decision.
The raw INSERT loops and COPY are asyncpg's own, into the same table.

The in-process service is driven directly (no HTTP) so the figures isolate the event store,
the scheduler loop and the projector; the HTTP layer is exercised by the test suite.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import asyncpg

from app.auth import OPERATOR, Principal
from app.bootstrap import Runtime
from app.domain import events as ev
from app.domain.settings import PoolSettings
from app.eventstore.listener import follow
from app.eventstore.model import NewEvent
from app.eventstore.store import init_connection
from app.replay import rebuild


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    index = min(len(values) - 1, max(0, int(round(q / 100 * (len(values) - 1)))))
    return values[index]


async def _raw_insert_rate(url: str, connections: int, per_conn: int) -> float:
    conns = [await asyncpg.connect(url) for _ in range(connections)]
    for c in conns:
        await init_connection(c)
    payload = {"bench": True, "n": 1, "text": "x" * 64}

    async def loop(c, k):
        for _i in range(per_conn):
            await c.execute("INSERT INTO events (stream, version, type, data, metadata) VALUES ($1,$2,$3,$4,$5)",
                            f"raw-{k}-{uuid.uuid4().hex}", 0, "Raw", payload, {})
    start = time.perf_counter()
    await asyncio.gather(*(loop(c, k) for k, c in enumerate(conns)))
    elapsed = time.perf_counter() - start
    for c in conns:
        await c.close()
    return connections * per_conn / elapsed


async def _copy_rate(url: str, rows: int) -> float:
    conn = await asyncpg.connect(url)
    payload = json.dumps({"bench": True, "n": 1, "text": "x" * 64})
    records = [(f"copy-{uuid.uuid4().hex}", 0, "Copied", payload, "{}") for _ in range(rows)]
    start = time.perf_counter()
    await conn.copy_records_to_table("events", records=records,
                                     columns=["stream", "version", "type", "data", "metadata"])
    elapsed = time.perf_counter() - start
    await conn.close()
    return rows / elapsed


async def _single_commit_latency(url: str, samples: int) -> list[float]:
    conn = await asyncpg.connect(url)
    await init_connection(conn)
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        await conn.execute("INSERT INTO events (stream, version, type, data, metadata) VALUES ($1,0,'Raw',$2,'{}')",
                           f"lat-{uuid.uuid4().hex}", {"x": 1})
        out.append(time.perf_counter() - t)
    await conn.close()
    return out


async def _store_append_rate(rt: Runtime, tasks: int, per_task: int, batch: int = 1) -> float:
    run = uuid.uuid4().hex[:8]  # fresh streams per run: a repeat must not append to the last run's

    async def loop(k):
        for i in range(per_task):
            await rt.store.append([NewEvent(f"bench-{run}-{k}-{i}", "Bench", {"n": j, "text": "x" * 64})
                                   for j in range(batch)])
    start = time.perf_counter()
    await asyncio.gather(*(loop(k) for k in range(tasks)))
    return tasks * per_task * batch / (time.perf_counter() - start)


async def _fleet(rt: Runtime, prefix: str, size: int) -> list[Principal]:
    """A pool with a free lane per agent and limits nobody reaches, and its agents. Adaptive
    lanes are off: they start a pool on a few lanes and learn the rest from streaming turns'
    first chunks, which these turns never send, so a thousand simultaneous requests would
    wait for lanes (and the grant-latency rounds, which complete nothing before every turn
    is granted, would never finish)."""
    name = f"{prefix}_{uuid.uuid4().hex[:6]}"
    await rt.service.create_pool(OPERATOR, PoolSettings(name=name, lanes=max(size, 1), rpm=10_000_000,
                                                        tpm=10_000_000_000, lease_seconds=300,
                                                        adaptive_lanes=False))
    agents = []
    for i in range(size):
        view, _ = await rt.service.register_agent(OPERATOR, f"{prefix}{i}", name)
        agents.append(Principal("agent", view["agent_id"]))
    await asyncio.sleep(0.5)  # let the pool's scheduler admit them before timing starts
    return agents


async def _grant_latency(rt: Runtime, concurrent: int, rounds: int) -> list[float]:
    agents = await _fleet(rt, f"bench{concurrent}", concurrent)
    latencies: list[float] = []

    async def one(p: Principal):
        t = time.perf_counter()
        turn = await rt.service.request_turn(p, 100, 100, wait_seconds=30)
        latencies.append(time.perf_counter() - t)
        assert turn["status"] == ev.GRANTED, turn
        return turn

    for _ in range(rounds):
        turns = await asyncio.gather(*(one(p) for p in agents))
        await asyncio.gather(*(rt.service.complete_turn(p, t["turn_id"], ev.OK, 100, 10)
                               for p, t in zip(agents, turns)))
    return latencies


async def _sustained_turns(rt: Runtime, agents_n: int, seconds: float) -> tuple[float, int]:
    agents = await _fleet(rt, "sustain", agents_n)
    start_pos = await rt.store.head()
    done = 0
    stop = time.perf_counter() + seconds

    async def loop(p):
        nonlocal done
        while time.perf_counter() < stop:
            turn = await rt.service.request_turn(p, 50, 10, wait_seconds=30)
            await rt.service.complete_turn(p, turn["turn_id"], ev.OK, 50, 10)
            done += 1
    start = time.perf_counter()
    await asyncio.gather(*(loop(p) for p in agents))
    elapsed = time.perf_counter() - start
    events = await rt.store.head() - start_pos
    return done / elapsed, round(events / max(done, 1))


async def _read_rate(rt: Runtime) -> tuple[float, int]:
    start = time.perf_counter()
    after, n = 0, 0
    while True:
        batch = await rt.store.read(after, 5000)
        n += len(batch)
        if len(batch) < 5000:
            break
        after = batch[-1].position
    return n / (time.perf_counter() - start), n


async def _rebuild_rate(rt: Runtime) -> float:
    start = time.perf_counter()
    _model, n = await rebuild(rt.store)
    return n / (time.perf_counter() - start)


async def _notify_roundtrip(url: str, samples: int) -> list[float]:
    listener = await asyncpg.connect(url)
    sender = await asyncpg.connect(url)
    got: asyncio.Queue = asyncio.Queue()
    await listener.add_listener("bench_rt", lambda *a: got.put_nowait(time.perf_counter()))
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        await sender.execute("SELECT pg_notify('bench_rt', 'x')")
        out.append(await got.get() - t)
    await listener.close()
    await sender.close()
    return out


async def _delivery_latency(rt: Runtime, samples: int) -> list[float]:
    start = await rt.store.head()
    sent: dict[int, float] = {}
    out: list[float] = []
    done = asyncio.Event()

    async def reader():
        async for e in follow(rt.store, rt.listener, start, accept=lambda e: e.type == "Ping"):
            out.append(time.perf_counter() - sent[e.data["n"]])
            if len(out) == samples:
                done.set()
                return
    task = asyncio.create_task(reader())
    for n in range(samples):
        sent[n] = time.perf_counter()
        await rt.store.append([NewEvent(f"ping-{n}", "Ping", {"n": n})])
        await asyncio.sleep(0.002)
    await asyncio.wait_for(done.wait(), 30)
    task.cancel()
    return out


async def run_async(url: str, quick: bool = False) -> dict:
    scale = 0.2 if quick else 1.0
    rt = await Runtime(url).start()
    results: dict = {"quick": quick}
    try:
        commit = await _single_commit_latency(url, int(300 * scale) + 20)
        commit_p50 = pct(commit, 50)
        results["commit_latency_ms"] = {"p50": commit_p50 * 1000, "p99": pct(commit, 99) * 1000}
        grants = {}
        for n, rounds in ((1, int(200 * scale) + 10), (100, max(2, int(10 * scale))), (1000, 1 if quick else 3)):
            lat = await _grant_latency(rt, n, rounds)
            grants[n] = {"p50_ms": pct(lat, 50) * 1000, "p99_ms": pct(lat, 99) * 1000,
                         "p50_ratio": pct(lat, 50) / commit_p50, "p99_ratio": pct(lat, 99) / commit_p50,
                         "samples": len(lat)}
        results["grant_latency"] = grants
        raw8 = await _raw_insert_rate(url, 8, int(400 * scale) + 20)
        copy = await _copy_rate(url, int(50_000 * scale) + 1000)
        append8 = await _store_append_rate(rt, 8, int(400 * scale) + 20)
        append_batch = await _store_append_rate(rt, 8, int(40 * scale) + 2, batch=100)
        results["appends_per_s"] = {"event_store_single": append8, "event_store_batch100": append_batch,
                                    "raw_insert_8conn": raw8, "copy": copy,
                                    "single_vs_raw": append8 / raw8, "batch_vs_raw": append_batch / raw8,
                                    "batch_vs_copy": append_batch / copy}
        turns_s, events_per_turn = await _sustained_turns(rt, 16, 10 * scale + 2)
        raw1 = await _raw_insert_rate(url, 1, int(500 * scale) + 50)
        results["sustained"] = {"turns_per_s": turns_s, "events_per_turn": events_per_turn,
                                "raw_insert_events_per_s_8conn": raw8,
                                "ratio_events_vs_raw": turns_s * events_per_turn / raw8,
                                "raw_insert_events_per_s_1conn": raw1}
        read_rate, n_events = await _read_rate(rt)
        rebuild_rate = await _rebuild_rate(rt)
        results["rebuild"] = {"events": n_events, "rebuild_events_per_s": rebuild_rate,
                              "read_events_per_s": read_rate, "ratio": rebuild_rate / read_rate}
        notify = await _notify_roundtrip(url, int(300 * scale) + 20)
        delivery = await _delivery_latency(rt, int(300 * scale) + 20)
        results["subscription"] = {"delivery_p50_ms": pct(delivery, 50) * 1000,
                                   "delivery_p99_ms": pct(delivery, 99) * 1000,
                                   "notify_p99_ms": pct(notify, 99) * 1000,
                                   "p99_ratio": pct(delivery, 99) / pct(notify, 99)}
    finally:
        await rt.stop()
    return results


def to_markdown(r: dict) -> str:
    g = r["grant_latency"]
    a, s, rb, sub = r["appends_per_s"], r["sustained"], r["rebuild"], r["subscription"]
    lines = ["# System overhead (`agentrm bench system`)", "",
             f"Baseline for latencies: one durable INSERT+COMMIT, p50 {r['commit_latency_ms']['p50']:.2f} ms.", "",
             "| figure | AgentRM | baseline | ratio |", "|---|---|---|---|"]
    for n, v in g.items():
        lines.append(f"| grant latency p50, {n} concurrent agents | {v['p50_ms']:.2f} ms | "
                     f"{r['commit_latency_ms']['p50']:.2f} ms (1 commit) | {v['p50_ratio']:.1f}x |")
        lines.append(f"| grant latency p99, {n} concurrent agents | {v['p99_ms']:.2f} ms | "
                     f"{r['commit_latency_ms']['p50']:.2f} ms (1 commit) | {v['p99_ratio']:.1f}x |")
    lines += [
        f"| sustained turns/s (16 agents; {s['events_per_turn']} events per turn) | {s['turns_per_s']:.0f} turns/s "
        f"= {s['turns_per_s'] * s['events_per_turn']:.0f} events/s | "
        f"{a['raw_insert_8conn']:.0f} raw inserts/s (8 conn) | "
        f"{s['ratio_events_vs_raw']:.2f} |",
        f"| EventStore.append, single events, 8 tasks | {a['event_store_single']:.0f}/s | "
        f"{a['raw_insert_8conn']:.0f}/s raw INSERT (8 conn) | {a['single_vs_raw']:.2f} |",
        f"| EventStore.append, batches of 100, 8 tasks | {a['event_store_batch100']:.0f}/s | "
        f"{a['copy']:.0f}/s COPY | {a['batch_vs_copy']:.2f} |",
        f"| projection rebuild ({rb['events']} events) | {rb['rebuild_events_per_s']:.0f} events/s | "
        f"{rb['read_events_per_s']:.0f} events/s read+decode | {rb['ratio']:.2f} |",
        f"| subscription delivery p99 | {sub['delivery_p99_ms']:.2f} ms | "
        f"{sub['notify_p99_ms']:.2f} ms LISTEN/NOTIFY | "
        f"{sub['p99_ratio']:.1f}x |", ""]
    return "\n".join(lines)


# The figures whose spread over repeated runs is reported: one lucky run must not stand
# as the figure. (name, how to read it from one run's results)
SPREAD_FIGURES = (
    ("EventStore.append single events, 8 tasks, /s", lambda r: r["appends_per_s"]["event_store_single"]),
    ("  the same against raw INSERT (8 conn)", lambda r: r["appends_per_s"]["single_vs_raw"]),
    ("raw INSERT, 8 connections, /s", lambda r: r["appends_per_s"]["raw_insert_8conn"]),
    ("sustained turns/s (16 agents)", lambda r: r["sustained"]["turns_per_s"]),
    ("  the same as events against raw INSERT", lambda r: r["sustained"]["ratio_events_vs_raw"]),
    ("subscription delivery p99, ms", lambda r: r["subscription"]["delivery_p99_ms"]),
    ("grant p99 with 1,000 concurrent agents, ms", lambda r: r["grant_latency"][1000]["p99_ms"]),
)


def spread(runs: list[dict]) -> list[dict]:
    import statistics
    out = []
    for name, read in SPREAD_FIGURES:
        values = [read(r) for r in runs]
        out.append({"figure": name, "median": statistics.median(values), "min": min(values), "max": max(values),
                    "runs": values})
    return out


def spread_markdown(rows: list[dict], n: int) -> str:
    lines = [f"Spread over {n} runs (median, then min to max; the table above is the median run of the first figure):",
             "", "| figure | median | min to max |", "|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['figure']} | {row['median']:.2f} | {row['min']:.2f} to {row['max']:.2f} |")
    return "\n".join(lines) + "\n"


def run(out_dir: Path, url: str, quick: bool = False, repeat: int = 3) -> dict:
    runs = [asyncio.run(run_async(url, quick)) for _ in range(max(1, repeat))]
    by_append = sorted(runs, key=lambda r: r["appends_per_s"]["event_store_single"])
    results = dict(by_append[len(by_append) // 2])   # the median run, whole
    results["spread"] = spread(runs)
    results["repeat"] = len(runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "system.md").write_text(to_markdown(results) + "\n" + spread_markdown(results["spread"], len(runs)))
    (out_dir / "system.json").write_text(json.dumps({**results, "runs": runs}, indent=2, default=str))
    return results


__all__ = ["run", "run_async", "to_markdown"]

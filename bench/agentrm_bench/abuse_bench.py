"""`agentrm bench abuse`: do honest agents keep their grant and context-view latency while
four agents of their pool abuse it, and does the server's memory stay bounded under hostile
requests?

One `agentrm serve --no-demo` (one worker) on a fresh embedded database, one pool (the
scenario in abuse_scenario.py). Each phase registers fresh honest agents (8 by default) that
run their fixed loop for `--seconds`:
- clean: the honest agents alone;
- abuse: the same honest loop (same seeds) while, in a process of their own (abusers.py),
  (1) a flooder asks for turns at 100x an honest agent's rate, (2) a junk appender sends
  20k-100k-character pathological messages and asks for compactions, (3) a subscriber
  opens 200 `events` subscriptions and holds them, (4) a claimant completes every turn
  RATE_LIMITED with an hour's retry-after and headers saying nothing remains.
Clean and abuse phases alternate (`--repeat` pairs), so the machine's noise falls on both
alike; between phases the server is let settle (no turn queued or held in the pool, the
indexer caught up, at most 30 s), and whatever backlog is left is reported. The targets:
the honest agents' grant P95 and view P95 under abuse within 1.2x of the clean run's (the
median over the pairs of the per-pair ratio; the spread is reported beside it), and the
server's RSS growing less than 5 MB over 1,000 hostile requests (hostile_requests.py: five
passes of the 1,000, judged on each of the last three).

A grant not given within the 30 s an honest agent waits counts as a 30 s sample (and is
counted apart): an agent starved past its wait must raise the P95, not leave it.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx

from app.config import child_environment

from . import abuse_scenario as s
from . import hostile_requests
from .abuse_scenario import graphql
from .context_bench import _filler
from .load_bench import _children, _start_server, cpu_seconds, postmaster_pid, rss_mb
from .processes import stop_process
from .system_bench import pct

TARGET_RATIO = 1.2
TARGET_RSS_GROWTH_MB = 5.0
WARMUP_S = 10.0          # a clean phase, not measured: first calls, the embedding model's load
SETTLE_CAP_S = 30.0
START_DELAY_S = 1.5      # the abusers' process is started this long before the phase begins
PAUSE_TYPES = ["AgentPaused", "PoolPaused", "ModelPaused"]
JSON_KEYS = ("grant_p95_ms", "view_p95_ms", "grant_p95_ratio", "view_p95_ratio", "abusers", "memory",
             "verdicts", "runs", "settings")


@dataclass
class Samples:
    grants: list[float] = field(default_factory=list)    # seconds, request to GRANTED
    views: list[float] = field(default_factory=list)
    appends: list[float] = field(default_factory=list)
    not_granted: int = 0
    turns: int = 0
    errors: Counter = field(default_factory=Counter)
    turn_ids: list[str] = field(default_factory=list)


async def honest_agent(http: httpx.AsyncClient, token: str, until: float, seed: int, out: Samples) -> None:
    """The fixed loop: a turn, a think; every VIEW_EVERY-th turn two ordinary messages and a
    context read."""
    rng = random.Random(seed)
    n = 0
    while time.time() < until:
        started = time.perf_counter()
        data, code = await graphql(http, token, s.REQUEST, {"wait": s.WAIT_S})
        if data is None:
            out.errors[f"requestTurn {code}"] += 1
        else:
            turn = data["requestTurn"]
            out.grants.append(time.perf_counter() - started)
            if turn["status"] == "GRANTED":
                out.turn_ids.append(turn["id"])
                await asyncio.sleep(s.HOLD_S)
                _, code = await graphql(http, token, s.COMPLETE_OK, {"id": turn["id"]})
                if code is None:
                    out.turns += 1
                else:
                    out.errors[f"completeTurn {code}"] += 1
            else:
                out.not_granted += 1
                await graphql(http, token, s.CANCEL, {"id": turn["id"]})
        n += 1
        if n % s.VIEW_EVERY == 0:
            for _ in range(s.MESSAGES_PER_VIEW):
                role, content = _filler(rng, n)
                started = time.perf_counter()
                _, code = await graphql(http, token, s.APPEND, {"r": role, "c": content})
                out.appends.append(time.perf_counter() - started)
                if code is not None:
                    out.errors[f"appendContext {code}"] += 1
            started = time.perf_counter()
            data, code = await graphql(http, token, s.VIEW, {"b": s.VIEW_BUDGET})
            if data is None:
                out.errors[f"context {code}"] += 1
            else:
                out.views.append(time.perf_counter() - started)
        await asyncio.sleep(rng.uniform(s.THINK_MIN_S, s.THINK_MAX_S))


def _ms(values: list[float]) -> dict:
    return {"n": len(values), "p50": round(pct(values, 50) * 1000, 1) if values else None,
            "p95": round(pct(values, 95) * 1000, 1) if values else None,
            "max": round(max(values) * 1000, 1) if values else None}


class Bench:
    def __init__(self, base: str, http: httpx.AsyncClient, operator: str, db: asyncpg.Connection, pid: int,
                 db_pid: int | None, *, agents: int, seed: int, roles: tuple[str, ...] = ()):
        self.base, self.http, self.operator, self.db, self.pid, self.db_pid = base, http, operator, db, pid, db_pid
        self.agents, self.seed = agents, seed
        self.roles = roles    # the abusers that play (all four when empty): a diagnostic
        self.honest_turns: list[str] = []     # for the hostile requests' foreign turn ids

    async def op(self, query: str, **variables) -> dict:
        data, code = await graphql(self.http, self.operator, query, variables)
        if data is None:
            raise RuntimeError(f"operator query failed ({code}): {query[:80]}")
        return data

    async def create_pool(self) -> None:
        await self.op("mutation($n: String!, $l: Int!, $r: Int!, $t: Int!, $lease: Float!) { createPool(input: "
                      "{name: $n, lanes: $l, rpm: $r, tpm: $t, leaseSeconds: $lease}) { name } }",
                      n=s.POOL, l=s.POOL_LANES, r=s.POOL_RPM, t=s.POOL_TPM, lease=s.POOL_LEASE_S)

    async def register(self, name: str) -> str:
        return (await self.register_with_id(name))[1]

    async def register_with_id(self, name: str) -> tuple[str, str]:
        data = await self.op('mutation($n: String!, $p: String!) { registerAgent(input: {name: $n, pool: $p}) '
                             '{ token agent { id } } }', n=name, p=s.POOL)
        return data["registerAgent"]["agent"]["id"], data["registerAgent"]["token"]

    async def sweep(self, agent_ids: set[str]) -> int:
        """Cancel every turn the abusers left queued or held in the pool (the flood's
        requests still waiting when it stopped): how many."""
        state = (await self.op("query($p: String!) { scheduler(pool: $p) { lanes { turnId agentId } "
                               "levels { queued { turnId agentId } } } }", p=s.POOL))["scheduler"]
        turns = [lane for lane in state["lanes"] if lane["turnId"]] + [
            queued for level in state["levels"] for queued in level["queued"]]
        left = [t["turnId"] for t in turns if t["agentId"] in agent_ids]
        for turn in left:
            await graphql(self.http, self.operator, s.CANCEL, {"id": turn})
        return len(left)

    async def head(self) -> int:
        return (await self.op("{ logHead }"))["logHead"]

    def rss(self) -> dict:
        """The server process's RSS, and its children's (the embedding model's process)."""
        return {"server": round(rss_mb(self.pid), 1),
                "children": round(sum(rss_mb(c) for c in _children(self.pid)), 1)}

    async def backlog(self) -> int:
        """Messages appended that the indexer has not stored a vector for yet."""
        appended = await self.db.fetchval("SELECT count(*) FROM events WHERE type = 'ContextAppended'")
        return appended - await self.db.fetchval("SELECT count(*) FROM context_vectors")

    async def busy(self) -> int:
        state = (await self.op("query($p: String!) { scheduler(pool: $p) { lanes { turnId } "
                               "levels { queued { turnId } } } }", p=s.POOL))["scheduler"]
        return (sum(lane["turnId"] is not None for lane in state["lanes"])
                + sum(len(level["queued"]) for level in state["levels"]))

    async def settle(self) -> dict:
        """Until no turn is queued or held in the pool and the indexer has caught up, at
        most SETTLE_CAP_S: what was left, and how long it took."""
        started = time.monotonic()
        while True:
            busy, backlog = await self.busy(), await self.backlog()
            if (not busy and backlog <= 0) or time.monotonic() - started > SETTLE_CAP_S:
                return {"seconds": round(time.monotonic() - started, 1), "turns_left": busy,
                        "index_backlog_left": backlog}
            await asyncio.sleep(0.5)

    async def pauses(self, after: int) -> dict:
        counts: Counter = Counter()
        while True:
            events = (await self.op("query($a: Int!, $t: [String!]) { events(after: $a, limit: 1000, types: $t) "
                                    "{ position type } }", a=after, t=PAUSE_TYPES))["events"]
            counts.update(e["type"] for e in events)
            if len(events) < 1000:
                return dict(counts)
            after = events[-1]["position"]

    async def phase(self, name: str, repeat: int, seconds: float, abuse: bool) -> dict:
        tokens = [await self.register(f"{name}{repeat}-honest{i}") for i in range(self.agents)]
        abusers_spec, abuser_ids = None, set()
        if abuse:
            subscribe_after = await self.head()
            registered = {role: await self.register_with_id(f"{name}{repeat}-{role}")
                          for role in ("subscriber", "flooder", "junk", "claimant")}
            abuser_ids = {agent_id for agent_id, _ in registered.values()}
            abusers_spec = {"base": self.base, "seed": self.seed * 1000 + repeat,
                            "tokens": {role: token for role, (_, token) in registered.items()},
                            "subscribe_after": subscribe_after, "roles": list(self.roles)}
        start = time.time() + START_DELAY_S
        until = start + seconds
        abusers = None
        if abusers_spec is not None:
            abusers = asyncio.create_task(_run_abusers({**abusers_spec, "start": start, "until": until}))
        await asyncio.sleep(max(0.0, start - time.time()))
        print(f"{name} {repeat}: started", file=sys.stderr, flush=True)
        head0, rss0, load0 = await self.head(), self.rss(), os.getloadavg()[0]
        cpu0 = (cpu_seconds(self.pid), cpu_seconds(self.db_pid), time.process_time(),
                cpu_seconds(self.pid, tree=False))
        samples = Samples()
        honest = asyncio.gather(*(honest_agent(self.http, t, until, self.seed * 7919 + repeat * 101 + i, samples)
                                  for i, t in enumerate(tokens)))
        abused = None
        if abusers is not None:
            abused = await abusers
            abused["flooder"]["turns cancelled by the benchmark at the end"] = await self.sweep(abuser_ids)
        await honest
        elapsed = time.time() - start
        cpu = (cpu_seconds(self.pid) - cpu0[0], cpu_seconds(self.db_pid) - cpu0[1], time.process_time() - cpu0[2],
               cpu_seconds(self.pid, tree=False) - cpu0[3])
        self.honest_turns += samples.turn_ids
        return {"phase": name, "repeat": repeat, "seconds": round(elapsed, 1),
                "grant_ms": _ms(samples.grants), "view_ms": _ms(samples.views), "append_ms": _ms(samples.appends),
                "not_granted_in_wait": samples.not_granted, "turns": samples.turns,
                "errors": dict(samples.errors), "pauses": await self.pauses(head0),
                "rss_mb": {"start": rss0, "end": self.rss()}, "load_average_1m": [load0, os.getloadavg()[0]],
                # the server with its children (the model's processes), and its own process alone:
                # work moved to a child leaves the second, not the first
                "cpu_s": {"server": round(cpu[0], 1), "server_process": round(cpu[3], 1),
                          "postgres": round(cpu[1], 1), "driver": round(cpu[2], 1)},
                "abusers": abused}


async def _run_abusers(spec: dict) -> dict:
    """The abusers' process (abusers.py), given `spec`; what it reports."""
    env = child_environment(PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "agentrm_bench.abusers",
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await proc.communicate(json.dumps(spec).encode())
    if proc.returncode != 0:
        raise RuntimeError(f"the abusers' process failed: {err.decode()[-2000:]}")
    return json.loads(out.decode().strip().splitlines()[-1])


def _spread(values: list[float | None]) -> dict:
    """Median, min and max of the figures a phase had (a phase too short for a view has none)."""
    vs = [v for v in values if v is not None]
    if not vs:
        return {"median": None, "min": None, "max": None, "runs": []}
    return {"median": round(statistics.median(vs), 2), "min": round(min(vs), 2), "max": round(max(vs), 2),
            "runs": [round(v, 2) for v in vs]}


def _ratio(runs: list[dict], key: str) -> dict:
    return _spread([r["abuse"][key]["p95"] / r["clean"][key]["p95"] if r["abuse"][key]["p95"] is not None
                    and r["clean"][key]["p95"] else None for r in runs])


def _abuser_totals(runs: list[dict]) -> dict:
    """Each abuser's answers summed over the abuse phases."""
    totals: dict[str, Counter] = {}
    for run in runs:
        for role, counts in run["abuse"]["abusers"].items():
            if isinstance(counts, dict):
                totals.setdefault(role, Counter()).update({k: v for k, v in counts.items()
                                                          if isinstance(v, int) and not k.endswith("_ms")})
    return {role: dict(c) for role, c in totals.items()}


def summarise(runs: list[dict], memory: dict, settings: dict, warmup: dict) -> dict:
    grant_ratio, view_ratio = _ratio(runs, "grant_ms"), _ratio(runs, "view_ms")
    # The memory target on the passes after the first (hostile_requests.py says why): each
    # of the last passes of 1,000 grew the server's RSS by less than the target.
    growth = memory["late_growth_max_mb"]
    verdicts = {"grant_p95_within_1.2x": grant_ratio["median"] is not None and grant_ratio["median"] <= TARGET_RATIO,
                "view_p95_within_1.2x": view_ratio["median"] is not None and view_ratio["median"] <= TARGET_RATIO,
                "rss_growth_under_5_mb": growth < TARGET_RSS_GROWTH_MB}
    verdicts["all_met"] = all(verdicts.values())
    return {
        "grant_p95_ms": {phase: _spread([r[phase]["grant_ms"]["p95"] for r in runs]) for phase in ("clean", "abuse")},
        "view_p95_ms": {phase: _spread([r[phase]["view_ms"]["p95"] for r in runs]) for phase in ("clean", "abuse")},
        "grant_p95_ratio": grant_ratio, "view_p95_ratio": view_ratio,
        "abusers": _abuser_totals(runs), "memory": memory, "verdicts": verdicts, "runs": runs,
        "warmup": warmup, "settings": settings,
        "targets": {"ratio": TARGET_RATIO, "rss_growth_mb": TARGET_RSS_GROWTH_MB},
    }


async def run_async(url: str, *, agents: int = 8, seconds: float = 30.0, repeat: int = 3, seed: int = 1,
                    hostile_per_kind: int = hostile_requests.PER_KIND, only: str | None = None,
                    server_root: Path | None = None) -> dict:
    operator = "op_bench_" + os.urandom(8).hex()
    settings = {"agents": agents, "seconds": seconds, "repeat": repeat, "seed": seed, "pool": {
        "lanes": s.POOL_LANES, "rpm": s.POOL_RPM, "tpm": s.POOL_TPM}, "flood_rate_per_s": round(s.FLOOD_RATE_PER_S, 1),
        "subscriptions_attempted": s.SUB_CONNECTIONS * s.SUBS_PER_CONNECTION, "hostile_per_kind": hostile_per_kind,
        "only": only, "server": f"baseline ({server_root.name})" if server_root else "this checkout"}
    with tempfile.TemporaryDirectory(prefix="agentrm-abuse-") as tmp:
        proc, base = await _start_server(url, 1, operator, Path(tmp), root=server_root)
        db = await asyncpg.connect(url)
        limits = httpx.Limits(max_connections=agents + 8, max_keepalive_connections=agents + 8)
        try:
            async with httpx.AsyncClient(base_url=base, timeout=s.WAIT_S + 60, limits=limits) as http:
                bench = Bench(base, http, operator, db, proc.pid, postmaster_pid(url), agents=agents, seed=seed,
                              roles=(only,) if only else ())
                await bench.create_pool()
                # The first append starts the embedding model's process, which takes seconds
                # to load: started now, it loads while the warm-up runs (and settles after it).
                await graphql(http, await bench.register("first-append"), s.APPEND, {"r": "user", "c": "hello"})
                warmup = await bench.phase("warmup", 0, min(seconds, WARMUP_S), abuse=False)
                warmup["settle"] = await bench.settle()
                runs = []
                for r in range(repeat):
                    pair = {}
                    for name, abuse in (("clean", False), ("abuse", True)):
                        pair[name] = await bench.phase(name, r, seconds, abuse)
                        pair[name]["settle"] = await bench.settle()
                        print(f"repeat {r + 1}/{repeat} {name}: grant p95 {pair[name]['grant_ms']['p95']} ms, "
                              f"view p95 {pair[name]['view_ms']['p95']} ms", file=sys.stderr, flush=True)
                    runs.append(pair)
                hostile_agent = await bench.register("hostile")
                memory = await hostile_requests.measure(base, hostile_agent, bench.honest_turns[-200:], bench.rss,
                                                        per_kind=hostile_per_kind)
        finally:
            await db.close()
            stop_process(proc)
    return summarise(runs, memory, settings, {"grant_ms": warmup["grant_ms"], "view_ms": warmup["view_ms"],
                                              "settle": warmup["settle"]})


def _row(label: str, figure: dict) -> str:
    if figure["median"] is None:
        return f"| {label} | none | none | "
    return f"| {label} | {figure['median']:g} | {figure['min']:g} to {figure['max']:g} | "


def _counts(counts: dict) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"


def to_markdown(r: dict) -> str:
    st = r["settings"]
    ok = {True: "met", False: "**missed**"}
    v = r["verdicts"]
    lines = [f"# Fairness under abuse (`agentrm bench abuse`): {st['agents']} honest agents, "
             f"{st['repeat']} clean/abuse pairs of {st['seconds']:g} s", "",
             f"One server (one worker), one pool of {st['pool']['lanes']} lanes, {st['pool']['rpm']} requests and "
             f"{st['pool']['tpm']:,} tokens a minute. Abusers: a flooder at {st['flood_rate_per_s']} requests/s "
             f"(100x an honest agent), a junk appender, a subscriber trying {st['subscriptions_attempted']} "
             "subscriptions, a false 429 claimant. Figures: median over the pairs, spread min to max.", "",
             "| figure | median | spread | target |", "|---|---:|---:|---|",
             _row("honest grant P95, clean, ms", r["grant_p95_ms"]["clean"]) + " |",
             _row("honest grant P95, abuse, ms", r["grant_p95_ms"]["abuse"]) + " |",
             _row("grant P95 ratio abuse/clean", r["grant_p95_ratio"]) + f"at most {TARGET_RATIO}: "
             f"{ok[v['grant_p95_within_1.2x']]} |",
             _row("honest view P95, clean, ms", r["view_p95_ms"]["clean"]) + " |",
             _row("honest view P95, abuse, ms", r["view_p95_ms"]["abuse"]) + " |",
             _row("view P95 ratio abuse/clean", r["view_p95_ratio"]) + f"at most {TARGET_RATIO}: "
             f"{ok[v['view_p95_within_1.2x']]} |"]
    m = r["memory"]
    series = " -> ".join(f"{sample['server']:g}" for sample in m["rss_series_mb"])
    lines += [f"| server RSS growth over {m['requests']:,} hostile requests, MB, most of the last "
              f"{m['late_passes']} passes | {m['late_growth_max_mb']:g} | "
              f"per pass {', '.join(f'{g:+g}' for g in m['growth_per_pass_mb'])} | under {TARGET_RSS_GROWTH_MB:g}: "
              f"{ok[v['rss_growth_under_5_mb']]} |", "",
              f"Server RSS after the warm-up and after each pass of {m['requests']:,} hostile requests, MB: "
              f"{series}; the first pass {m['growth_mb']:+g}, the last {m['late_passes']} "
              f"{m['late_growth_mb']:+g} in all.", "",
              "Each phase (honest agents' figures; the abusers' own answers below):", "",
              "| repeat | phase | grants | grant P50 / P95 / max ms | not granted in 30 s | views | "
              "view P50 / P95 ms | append P95 ms | errors | pauses | server CPU s (its own process) | load 1m | "
              "settle s, left |",
              "|---|---|---:|---|---:|---:|---|---:|---|---|---:|---|---|"]
    for i, run in enumerate(r["runs"], 1):
        for name in ("clean", "abuse"):
            p = run[name]
            g, w = p["grant_ms"], p["view_ms"]
            left = p["settle"]
            lines.append(f"| {i} | {name} | {g['n']} | {g['p50']} / {g['p95']} / {g['max']} | "
                         f"{p['not_granted_in_wait']} | {w['n']} | {w['p50']} / {w['p95']} | {p['append_ms']['p95']} | "
                         f"{_counts(p['errors'])} | {_counts(p['pauses'])} | {p['cpu_s']['server']} "
                         f"({p['cpu_s'].get('server_process', '-')}) | "
                         f"{p['load_average_1m'][0]:.1f} -> {p['load_average_1m'][1]:.1f} | "
                         f"{left['seconds']}, {left['turns_left']} turns, {left['index_backlog_left']} messages |")
    lines += ["", "What the abusers did, and what the server answered (summed over the abuse phases):", ""]
    for role, counts in r["abusers"].items():
        lines.append(f"- **{role}**: {_counts(counts)}")
    junk = [run["abuse"]["abusers"]["junk"] for run in r["runs"]]
    lines += ["", "The junk appender's own appends, P50 / max ms per abuse phase: " + "; ".join(
        f"{j.get('append_p50_ms')} / {j.get('append_max_ms')}" for j in junk) + ". The abusers' process CPU s "
        "per abuse phase: " + ", ".join(str(run["abuse"]["abusers"]["cpu_s"]) for run in r["runs"]) + "."]
    first, last = m["rss_series_mb"][0], m["rss_series_mb"][-1]
    lines += ["", f"Hostile requests ({m['per_kind']} of each kind after a warm-up of {m['warmup_per_kind']} each, "
              f"{m['passes']} passes of {', '.join(f'{x:g}' for x in m['seconds'])} s): the embedding model's "
              f"process {first['children']:g} -> {last['children']:g} MB over them. The first pass's answers:", ""]
    for kind, counts in m["answers"].items():
        lines.append(f"- {kind}: {_counts(counts)}")
    missed = [k for k, met in v.items() if k != "all_met" and not met]
    lines += ["", f"Verdict: {'every target met' if not missed else 'targets missed: ' + ', '.join(missed)}.", ""]
    return "\n".join(lines)


def run(out_dir: Path, url: str, **kwargs) -> dict:
    result = asyncio.run(run_async(url, **kwargs))
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"abuse-only-{kwargs['only']}" if kwargs.get("only") else "abuse"
    (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=2, sort_keys=True, default=str), encoding="utf-8")
    (out_dir / f"{stem}.md").write_text(to_markdown(result), encoding="utf-8")
    return result

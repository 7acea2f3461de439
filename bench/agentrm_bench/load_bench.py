"""`agentrm bench load`: N agents over loopback HTTP against `agentrm serve --workers W`.

The driver is one asyncio process (on uvloop when it is installed), not locust. The machine
has two cores that the server, PostgreSQL and the driver share, so the driver must cost as
little CPU per request as possible and must not add processes of its own; locust runs a
greenlet per user, and its open-loop pacing (`constant_throughput`) is per user, where this
benchmark needs one Poisson arrival process for the whole fleet. One event loop with a
keep-alive connection per agent does both. Its HTTP client is `raw_http` (pre-encoded
requests, Content-Length framing: see there why), `--client httpx` a general-purpose client,
for comparison. The driver's own CPU is measured and reported beside the
server's, so a reader can see when the driver was the bottleneck.

Phases, each `--seconds` long, repeated `--repeat` times on the same server:
1. saturation: every agent requests (waiting for the grant) and completes in a closed
   loop; sustained turns/s is the saturation rate;
2. open loop at 50% and at 90% of that rate: Poisson arrivals, each taken by an idle
   agent; grant latency is requestTurn's round trip as the agent sees it.
Then `agentrm audit verify` runs over the whole log. The raw-insert anchor (single-row
INSERTs over 8 connections) is measured in the same run, on the same database.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from app.config import child_environment

from .processes import stop_process
from .raw_http import GraphQLConnection, HTTPError
from .system_bench import _raw_insert_rate, pct

REQUEST = ("mutation { requestTurn(input: {estimatedTokens: 50, maxOutputTokens: 10, waitSeconds: 30}) "
           "{ id status } }")
REQUEST_BODY = orjson.dumps({"query": REQUEST, "variables": {}})
COMPLETE = ("mutation($id: ID!) { completeTurn(input: {turnId: $id, outcome: OK, promptTokens: 50, "
            "completionTokens: 10}) { status } }")
COMPLETE_QUERY_JSON = orjson.dumps(COMPLETE)
CANCEL = "mutation($id: ID!) { cancelTurn(turnId: $id) { status } }"
CANCEL_QUERY_JSON = orjson.dumps(CANCEL)
CLIENTS = ("raw", "httpx")
JSON_KEYS = ("turns_per_s", "grant_p50_ms_at_half", "grant_p99_ms_at_half", "grant_p99_ms_at_90",
             "errors", "verify_ok", "raw_insert_per_s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- processes: CPU and memory from /proc ------------------------------------------------
def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid``: /proc lists a child under the thread that
    started it (the server's embedding process is started by a worker thread)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def cpu_seconds(root: int | None, *, tree: bool = True) -> float:
    """CPU seconds of ``root`` and its descendants (with ``tree``), or of ``root`` alone."""
    if root is None:
        return 0.0
    total = 0
    for p in (_tree(root) if tree else [root]):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])   # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def postmaster_pid(url: str) -> int | None:
    """The embedded cluster's postmaster, when the benchmark runs on it (else None)."""
    from app.bootstrap import data_dir, external_database_url
    if external_database_url():
        return None
    from app.db.embedded import EmbeddedPostgres
    try:
        return int((EmbeddedPostgres(data_dir()).cluster / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# -- the driver --------------------------------------------------------------------------
@contextlib.contextmanager
def quiet_collector():
    """No cyclic collection in the driver while a phase is measured. The driver holds a
    thousand connections and their buffers; a full collection of them took 53-82 ms (gc
    callbacks, in 2 of 6 half-rate phases), and every request in flight then looked that
    much slower, although the server had answered it: one such pause decides a phase's P99.
    What is alive is frozen out of the collector's sight first; the few cycles a phase makes
    wait for its end (reference counting frees the rest as it goes)."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


@dataclass
class Phase:
    name: str
    offered_per_s: float | None
    seconds: float
    turns: int = 0
    errors: int = 0
    backlogged: int = 0               # arrivals that found no idle agent (the driver's queue)
    error_kinds: dict = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    server_cpu_s: float = 0.0
    db_cpu_s: float = 0.0
    driver_cpu_s: float = 0.0
    elapsed: float = 0.0

    def error(self, kind: str) -> None:
        self.errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def summary(self) -> dict:
        per_turn = 1000 / max(self.turns, 1)
        return {"phase": self.name, "offered_per_s": self.offered_per_s, "turns": self.turns,
                "turns_per_s": self.turns / self.elapsed if self.elapsed else 0.0,
                "errors": self.errors, "error_kinds": self.error_kinds, "backlogged": self.backlogged,
                "grant_p50_ms": pct(self.latencies, 50) * 1000, "grant_p99_ms": pct(self.latencies, 99) * 1000,
                "server_cpu_ms_per_turn": self.server_cpu_s * per_turn,
                "db_cpu_ms_per_turn": self.db_cpu_s * per_turn,
                "driver_cpu_ms_per_turn": self.driver_cpu_s * per_turn}


class Driver:
    def __init__(self, base: str, tokens: list[str], server_pid: int, db_pid: int | None, seed: int,
                 client: str = "raw"):
        if client not in CLIENTS:
            raise ValueError(f"client must be one of {CLIENTS}")
        self.base, self.tokens, self.client = base, tokens, client
        self.server_pid, self.db_pid = server_pid, db_pid
        self.rng = random.Random(seed)
        self.http = httpx.AsyncClient(base_url=base, timeout=60,
                                      limits=httpx.Limits(max_connections=len(tokens) + 10,
                                                          max_keepalive_connections=len(tokens) + 10))
        host, port = base.removeprefix("http://").rsplit(":", 1)
        self.connections = {t: GraphQLConnection(host, int(port), t) for t in tokens}
        self.prepared_request = {t: c.prepare(REQUEST_BODY) for t, c in self.connections.items()}
        self.turns_total = 0
        self.last_error = ""   # why the latest failed request failed (the errors' kinds)
        self.rss: list[dict] = []
        # Opt-in (grant_timing): (phase, turn id, wall-clock send, wall-clock receive) of each grant.
        self.timing: list[tuple[str, str, float, float]] | None = None

    async def close(self) -> None:
        await self.http.aclose()
        for connection in self.connections.values():
            connection.close()

    async def _gql(self, token: str, query: str, variables: dict | None = None) -> dict | None:
        try:
            response = await self.http.post("/graphql",
                                            content=orjson.dumps({"query": query, "variables": variables or {}}),
                                            headers={"Authorization": f"Bearer {token}",
                                                     "Content-Type": "application/json"})
            body = orjson.loads(response.content)
        except (httpx.HTTPError, orjson.JSONDecodeError) as exc:
            self.last_error = type(exc).__name__
            return None
        return self._data(body)

    def _data(self, body: dict) -> dict | None:
        if body.get("errors"):
            self.last_error = str(body["errors"][0].get("extensions", {}).get("code", "error"))
            return None
        return body.get("data")

    async def _raw(self, token: str, request: bytes) -> dict | None:
        try:
            body = await self.connections[token].post(request)
        except HTTPError as exc:
            self.last_error = str(exc)[:40]
            return None
        return self._data(body)

    async def _request_turn(self, token: str) -> dict | None:
        if self.client == "raw":
            return await self._raw(token, self.prepared_request[token])
        return await self._gql(token, REQUEST)

    async def _complete_turn(self, token: str, turn_id: str) -> dict | None:
        if self.client == "raw":
            body = b'{"query":%b,"variables":{"id":%b}}' % (COMPLETE_QUERY_JSON, orjson.dumps(turn_id))
            return await self._raw(token, self.connections[token].prepare(body))
        return await self._gql(token, COMPLETE, {"id": turn_id})

    async def _cancel_turn(self, token: str, turn_id: str) -> None:
        if self.client == "raw":
            body = b'{"query":%b,"variables":{"id":%b}}' % (CANCEL_QUERY_JSON, orjson.dumps(turn_id))
            await self._raw(token, self.connections[token].prepare(body))
        else:
            await self._gql(token, CANCEL, {"id": turn_id})

    async def one_turn(self, token: str, phase: Phase) -> None:
        started = time.perf_counter()
        sent = time.time() if self.timing is not None else 0.0
        data = await self._request_turn(token)
        turn = data and data["requestTurn"]
        if not turn or turn["status"] != "GRANTED":
            phase.error(f"requestTurn: {turn['status'] if turn else self.last_error}")
            if turn and turn.get("id"):
                # Still queued after the wait: give it up, as an honest client does. Left
                # queued, it would be granted later with nobody to complete it, and hold
                # its lane for a whole lease (300 s here) while the others queue behind it.
                await self._cancel_turn(token, turn["id"])
            return
        phase.latencies.append(time.perf_counter() - started)
        if self.timing is not None:
            self.timing.append((phase.name, turn["id"], sent, time.time()))
        done = await self._complete_turn(token, turn["id"])
        if not done or done["completeTurn"]["status"] != "COMPLETED":
            phase.error(f"completeTurn: {done['completeTurn']['status'] if done else self.last_error}")
            return
        phase.turns += 1
        self.turns_total += 1

    async def _measured(self, phase: Phase, body) -> Phase:
        cpu0 = (cpu_seconds(self.server_pid), cpu_seconds(self.db_pid), time.process_time())
        start = time.perf_counter()
        sampler = asyncio.create_task(self._sample_rss())
        try:
            with quiet_collector():
                await body()
        finally:
            sampler.cancel()
        phase.elapsed = time.perf_counter() - start
        phase.server_cpu_s = cpu_seconds(self.server_pid) - cpu0[0]
        phase.db_cpu_s = cpu_seconds(self.db_pid) - cpu0[1]
        phase.driver_cpu_s = time.process_time() - cpu0[2]
        return phase

    async def _sample_rss(self) -> None:
        while True:
            workers = _children(self.server_pid) or [self.server_pid]
            self.rss.append({"turns": self.turns_total, "rss_mb": [round(rss_mb(p), 1) for p in workers]})
            await asyncio.sleep(1.0)

    async def closed_loop(self, seconds: float) -> Phase:
        phase = Phase("saturation", None, seconds)
        stop = time.perf_counter() + seconds

        async def agent(token: str) -> None:
            while time.perf_counter() < stop:
                await self.one_turn(token, phase)

        async def body() -> None:
            await asyncio.gather(*(agent(t) for t in self.tokens))
        return await self._measured(phase, body)

    async def open_loop(self, name: str, rate: float, seconds: float) -> Phase:
        phase = Phase(name, rate, seconds)
        idle = deque(self.tokens)

        async def arrival(token: str) -> None:
            try:
                await self.one_turn(token, phase)
            finally:
                idle.append(token)

        async def body() -> None:
            running: set[asyncio.Task] = set()
            start = time.perf_counter()
            at = 0.0
            while at < seconds:
                at += self.rng.expovariate(rate)
                delay = start + at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)   # the arrival schedule: open loop
                if not idle:
                    phase.backlogged += 1
                    continue
                task = asyncio.create_task(arrival(idle.popleft()))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.gather(*running)
        return await self._measured(phase, body)


# -- the server and the fleet ------------------------------------------------------------
async def _start_server(url: str, workers: int, token: str, tmp: Path, *,
                        root: Path | None = None) -> tuple[subprocess.Popen, str]:
    """`agentrm serve` of this checkout, or of the one at ``root`` (a baseline's)."""
    port = _free_port()
    env = child_environment(DATABASE_URL=url, AGENTRM_OPERATOR_TOKEN=token, AGENTRM_DATA_DIR=str(tmp))
    root = root or Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers",
                             str(workers), "--no-demo", "--no-migrate"], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp / "serve.log", "ab"))
    base = f"http://127.0.0.1:{port}"
    import asyncpg
    watcher = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + 180
        while True:   # a real process must come up: poll for it, with a deadline
            if proc.poll() is not None:
                raise SystemExit(f"agentrm serve exited: {(tmp / 'serve.log').read_text()[-2000:]}")
            listening = await watcher.fetchval("SELECT count(*) FROM pg_stat_activity WHERE "
                                               "datname = current_database() AND query LIKE 'LISTEN%'")
            if listening >= workers:
                try:
                    async with httpx.AsyncClient() as http:
                        if (await http.get(f"{base}/healthz", timeout=2)).json()["ok"]:
                            return proc, base
                except httpx.HTTPError:
                    pass
            if time.monotonic() > deadline:
                raise SystemExit("agentrm serve did not come up within 180 s")
            await asyncio.sleep(0.2)
    finally:
        await watcher.close()


async def _fleet(base: str, token: str, agents: int) -> list[str]:
    async with httpx.AsyncClient(base_url=base, timeout=60, headers={"Authorization": f"Bearer {token}"}) as http:
        body = (await http.post("/graphql", json={"query": (
            f'mutation {{ createPool(input: {{name: "load", lanes: {agents}, rpm: 10000000, '
            'tpm: 2000000000, leaseSeconds: 300}) { name } }')})).json()
        if body.get("errors"):
            raise SystemExit(f"could not create the pool: {body['errors']}")
        gate = asyncio.Semaphore(32)

        async def register(i: int) -> str:
            async with gate:
                body = (await http.post("/graphql", json={"query": (
                    f'mutation {{ registerAgent(input: {{name: "load{i}", pool: "load"}}) {{ token }} }}')})).json()
                return body["data"]["registerAgent"]["token"]
        return await asyncio.gather(*(register(i) for i in range(agents)))


async def _head(url: str) -> int:
    """The log's head, as the event store itself reads it."""
    from app.eventstore.store import EventStore, create_pool
    pg = await create_pool(url, min_size=1, max_size=1)
    try:
        return await EventStore(pg).head()
    finally:
        await pg.close()


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": [round(v, 2) for v in values]}


async def run_async(url: str, *, agents: int = 1000, workers: int = 2, seconds: float = 10.0,
                    repeat: int = 3, seed: int = 1, client: str = "raw") -> dict:
    token = "op_bench_" + os.urandom(8).hex()
    with tempfile.TemporaryDirectory(prefix="agentrm-load-") as tmp:
        proc, base = await _start_server(url, workers, token, Path(tmp))
        try:
            tokens = await _fleet(base, token, agents)
            driver = Driver(base, tokens, proc.pid, postmaster_pid(url), seed, client)
            try:
                await driver.closed_loop(min(3.0, seconds))   # warm-up: connections, caches
                raw, runs, per_turn = [], [], []
                for _ in range(repeat):
                    raw.append(await _raw_insert_rate(url, 8, 300))
                    head_before = await _head(url)
                    sat = await driver.closed_loop(seconds)
                    per_turn.append((await _head(url) - head_before) / max(sat.turns, 1))
                    rate = sat.summary()["turns_per_s"]
                    half = await driver.open_loop("half", max(rate * 0.5, 1.0), seconds)
                    ninety = await driver.open_loop("ninety", max(rate * 0.9, 1.0), seconds)
                    runs.append([sat.summary(), half.summary(), ninety.summary()])
                rss = driver.rss
                events_per_turn = statistics.median(per_turn)
            finally:
                await driver.close()
        finally:
            stop_process(proc)
    verify = subprocess.run([sys.executable, "-m", "app.cli", "audit", "verify"], capture_output=True, text=True,
                            env=child_environment(DATABASE_URL=url), cwd=Path(__file__).resolve().parents[2])
    turns = _spread([r[0]["turns_per_s"] for r in runs])
    p50_half = _spread([r[1]["grant_p50_ms"] for r in runs])
    p99_half = _spread([r[1]["grant_p99_ms"] for r in runs])
    p99_90 = _spread([r[2]["grant_p99_ms"] for r in runs])
    raw_spread = _spread(raw)
    return {
        "turns_per_s": turns["median"], "grant_p50_ms_at_half": p50_half["median"],
        "grant_p99_ms_at_half": p99_half["median"], "grant_p99_ms_at_90": p99_90["median"],
        "errors": sum(p["errors"] for r in runs for p in r), "verify_ok": verify.returncode == 0,
        "raw_insert_per_s": raw_spread["median"],
        "events_per_turn": round(events_per_turn, 2),
        "ratio_turn_events_to_raw_insert": turns["median"] * events_per_turn / max(raw_spread["median"], 1e-9),
        "spread": {"turns_per_s": turns, "grant_p50_ms_at_half": p50_half, "grant_p99_ms_at_half": p99_half,
                   "grant_p99_ms_at_90": p99_90, "raw_insert_per_s": raw_spread},
        "runs": runs, "rss_mb_against_turns": rss,
        "verify_output": (verify.stdout + verify.stderr).strip()[-500:],
        "settings": {"agents": agents, "workers": workers, "seconds": seconds, "repeat": repeat, "seed": seed,
                     "client": client},
    }


def to_markdown(r: dict) -> str:
    s = r["settings"]
    lines = [f"# Load (`agentrm bench load`): {s['agents']} agents, {s['workers']} workers, "
             f"{s['repeat']} runs of {s['seconds']:.0f} s per phase", "",
             "| figure | median | spread (min to max) |", "|---|---|---|"]
    for key, label in (("turns_per_s", "sustained turns/s (closed loop, saturation)"),
                       ("grant_p50_ms_at_half", "grant P50 at 50% of saturation, ms"),
                       ("grant_p99_ms_at_half", "grant P99 at 50% of saturation, ms"),
                       ("grant_p99_ms_at_90", "grant P99 at 90% of saturation, ms"),
                       ("raw_insert_per_s", "raw single-row INSERTs/s, 8 connections (same run)")):
        sp = r["spread"][key]
        lines.append(f"| {label} | {sp['median']:.1f} | {sp['min']:.1f} to {sp['max']:.1f} |")
    sat = [run[0] for run in r["runs"]]
    lines += ["", f"Turn events per second against the raw-insert anchor: {r['ratio_turn_events_to_raw_insert']:.2f} "
              f"({r['events_per_turn']} events appended per turn).",
              "CPU per turn at saturation (median): "
              f"server {statistics.median(p['server_cpu_ms_per_turn'] for p in sat):.1f} ms, "
              f"PostgreSQL {statistics.median(p['db_cpu_ms_per_turn'] for p in sat):.1f} ms, "
              f"driver {statistics.median(p['driver_cpu_ms_per_turn'] for p in sat):.1f} ms.",
              f"Errors: {r['errors']}. `agentrm audit verify`: {'ok' if r['verify_ok'] else 'FAILED'}.", "",
              "RSS of each worker against turns served:", "", "| turns | RSS MB per worker |", "|---|---|"]
    samples = r["rss_mb_against_turns"]
    step = max(1, len(samples) // 12)
    for sample in samples[::step] + samples[-1:]:
        lines.append(f"| {sample['turns']} | {', '.join(f'{m:.0f}' for m in sample['rss_mb'])} |")
    return "\n".join(lines) + "\n"


def run_loop(coroutine):
    """Run the driver on uvloop when it is installed (uvicorn[standard] brings it): its
    event loop is a share of the driver's CPU per request like the client's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def run(out_dir: Path, url: str, **kwargs) -> dict:
    result = run_loop(run_async(url, **kwargs))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "load.md").write_text(to_markdown(result))
    (out_dir / "load.json").write_text(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return result

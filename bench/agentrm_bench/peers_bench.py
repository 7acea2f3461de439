"""`agentrm bench peers`: AgentRM beside the LiteLLM proxy and the Portkey gateway, each in
front of the same fake OpenAI-compatible provider, driven by the same client in one run.

Workloads (fixed before any tuning):
- overhead: closed loops of 1, 8, 32 and 128 clients, streaming and not, against a provider
  that answers at once (no rate limit that binds): each gateway's added latency over calling
  the provider directly (p50, p99), calls/s, and CPU seconds per 1,000 calls with every
  process of the gateway counted (its children; AgentRM's PostgreSQL too).
- rate limits: the provider allows 120 requests a minute, limited by a token bucket, a
  60 s sliding window or 60 s fixed windows; 8 clients call it in a closed loop (each call
  takes 0.5 s, so they offer about 16 calls/s); a client that gets a 429 waits its
  retry-after (at most 10 s) and calls again. Reported: the 429s the provider served, the
  429s the clients saw, the calls the provider admitted and those the clients got.
  Each gateway is configured per its documentation to hold the limit: LiteLLM with `rpm`
  on the deployment under usage-based-routing-v2; Portkey has no rate limiter in its
  open-source gateway, so it is given its documented retry on 429; AgentRM with the pool's
  rpm. Direct is the clients alone.

The client is httpx (one AsyncClient per phase, a kept-alive connection per client), the
same for every target, in the driver's process, which also runs the fake providers: its CPU
is reported beside the gateways'. The figures are preliminary on a shared two-core machine:
the load average is recorded with each phase and the spread over --repeat runs is given.
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.config import child_environment

from . import peers as peerlib
from .fake_provider import LIMITERS, FakeProvider
from .load_bench import cpu_seconds, postmaster_pid
from .processes import stop_process
from .system_bench import pct

ALL_PEERS = ("direct", "litellm", "portkey", "agentrm")
ALL_WORKLOADS = ("overhead", "rates", "faults", "priority", "replicas", "validate")
CLIENTS = (1, 8, 32, 128)

@dataclass(frozen=True)
class WorkloadRun:
    """What a workload of its own module is given to run."""
    database_url: str | None
    work: Path
    peers: tuple[str, ...]
    workloads: tuple[str, ...]
    repeat: int
    install: bool
    rate_seconds: float
    overhead_url: str


@dataclass(frozen=True)
class ExtraWorkload:
    names: tuple[str, ...]                                   # the --workloads names it serves
    run: Callable[[WorkloadRun], Awaitable[dict]]            # result keys to merge into the run's
    markdown: Callable[[dict], str | None]                   # its section of peers.md, if it ran


# The faults, priority, replicas and validate workloads live in modules of their own that use
# this one's clients and helpers; each registers itself here (agentrm_bench.peers_suite imports
# them all), so this module never imports them back.
EXTRA_WORKLOADS: list[ExtraWorkload] = []


QUICK_CLIENTS = (1, 8)
RPM = 120
RATE_CLIENTS = 8
RATE_CALL_S = 0.5
MAX_RETRY_WAIT_S = 10.0
BIG = 10_000_000


@dataclass
class Route:
    """How a client reaches the provider through one gateway for one workload."""
    base: str
    model: str
    headers: list[dict]          # client i uses headers[i % len]
    extra: dict = field(default_factory=dict)     # body fields by call class (LiteLLM's priority)

    def for_client(self, i: int) -> dict:
        return self.headers[i % len(self.headers)]


@dataclass
class Peer:
    name: str
    version: str = ""
    config: dict = field(default_factory=dict)
    status: str = "ok"
    reason: str = ""
    cpu_roots: list[int] = field(default_factory=list)
    routes: dict[str, Route] = field(default_factory=dict)
    stoppers: list = field(default_factory=list)

    def stop(self) -> None:
        for stop in self.stoppers:
            with contextlib.suppress(Exception):
                stop()


def _body(model: str, stream: bool) -> dict:
    return {"model": model, "stream": stream, "max_tokens": 16,
            "messages": [{"role": "user", "content": "Say hello to the benchmark."}]}


async def _call(http: httpx.AsyncClient, route: Route, i: int, stream: bool) -> tuple[int, float]:
    """One call: (status, retry-after seconds or 0). A stream counts as 200 only when it
    reached `data: [DONE]`."""
    url = route.base + "/chat/completions"
    body = _body(route.model, stream)
    if not stream:
        r = await http.post(url, json=body, headers=route.for_client(i))
        ok = r.status_code == 200 and bool(r.json().get("choices"))
        return (200 if ok else r.status_code or 599), _retry_after(r)
    async with http.stream("POST", url, json=body, headers=route.for_client(i)) as r:
        if r.status_code != 200:
            await r.aread()
            return r.status_code, _retry_after(r)
        async for line in r.aiter_lines():
            if line.strip() == "data: [DONE]":
                return 200, 0.0
    return 598, 0.0   # a stream that ended without [DONE]


def _retry_after(r: httpx.Response) -> float:
    try:
        return float(r.headers.get("retry-after", "0"))
    except ValueError:
        return 0.0


def _client(n: int, timeout: float = 120.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=n + 4,
                                                                 max_keepalive_connections=n + 4))


def _cpu(roots: list[int]) -> float:
    return sum(cpu_seconds(r) for r in roots)


# -- overhead ---------------------------------------------------------------------------------
async def overhead_phase(peer: Peer, clients: int, stream: bool, calls: int) -> dict:
    route = peer.routes["overhead"]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    async with _client(clients) as http:
        await asyncio.gather(*(_call(http, route, i, stream) for i in range(clients)))   # warm: connections
        issued = 0
        load = os.getloadavg()[0]
        cpu0, driver0, start = _cpu(peer.cpu_roots), time.process_time(), time.perf_counter()

        async def client(i: int) -> None:
            nonlocal issued
            while issued < calls:
                issued += 1
                t0 = time.perf_counter()
                status: int | str
                try:
                    status, _ = await _call(http, route, i, stream)
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                if status == 200:
                    latencies.append(time.perf_counter() - t0)
                else:
                    errors[str(status)] = errors.get(str(status), 0) + 1
        await asyncio.gather(*(client(i) for i in range(clients)))
        elapsed = time.perf_counter() - start
        cpu, driver = _cpu(peer.cpu_roots) - cpu0, time.process_time() - driver0
    done = len(latencies)
    return {"peer": peer.name, "clients": clients, "stream": stream, "calls": done, "errors": errors,
            "p50_ms": pct(latencies, 50) * 1000 if done else None,
            "p99_ms": pct(latencies, 99) * 1000 if done else None,
            "calls_per_s": done / elapsed if elapsed else 0.0,
            "cpu_s_per_1000": cpu * 1000 / done if done else None,
            "driver_cpu_s_per_1000": driver * 1000 / done if done else None, "load_average": load}


# -- rate limits --------------------------------------------------------------------------------
async def closed_loop(routes: list[Route], seconds: float) -> dict:
    """RATE_CLIENTS clients calling for ``seconds``, client i through ``routes[i % len(routes)]``,
    each waiting out a 429's retry-after (at most MAX_RETRY_WAIT_S) and 1 s after any other
    failure: what they saw, the calls that succeeded, and those still open at the end."""
    seen: dict[str, int] = {}
    completed = inflight = 0
    async with _client(RATE_CLIENTS, timeout=seconds + 60) as http:
        stop_at = time.monotonic() + seconds

        async def client(i: int) -> None:
            nonlocal completed, inflight
            route = routes[i % len(routes)]
            while time.monotonic() < stop_at:
                inflight += 1
                status: int | str
                try:
                    status, wait = await _call(http, route, i, False)
                except httpx.HTTPError as exc:
                    status, wait = type(exc).__name__, 1.0
                finally:
                    inflight -= 1
                seen[str(status)] = seen.get(str(status), 0) + 1
                if status == 200:
                    completed += 1
                elif status == 429:
                    await asyncio.sleep(min(max(wait, 1.0), MAX_RETRY_WAIT_S))
                else:
                    await asyncio.sleep(1.0)
        tasks = [asyncio.create_task(client(i)) for i in range(RATE_CLIENTS)]
        _done, pending = await asyncio.wait(tasks, timeout=seconds)
        unfinished = inflight   # calls still open: in a gateway's queue, its retries, or the provider
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return {"client_429": seen.get("429", 0), "client_ok": completed,
            "client_other": {k: v for k, v in seen.items() if k not in ("200", "429")},
            "unfinished_at_end": unfinished}


async def rate_phase(peer: Peer, limiter: str, route: Route, provider: FakeProvider, seconds: float) -> dict:
    provider.reset()
    load = os.getloadavg()[0]
    clients = await closed_loop([route], seconds)
    stats = provider.stats()
    return {"peer": peer.name, "limiter": limiter, "seconds": seconds, "provider_429": stats["rate_limited"],
            "provider_admitted": stats["admitted"], **clients, "load_average": load}


# -- the peers ---------------------------------------------------------------------------------
async def _gql(http: httpx.AsyncClient, query: str) -> dict:
    body = (await http.post("/graphql", json={"query": query})).json()
    if body.get("errors"):
        raise peerlib.PeerUnavailable(f"AgentRM GraphQL: {body['errors'][0].get('message')}")
    return body["data"]


async def _agentrm_pool(http: httpx.AsyncClient, name: str, provider_url: str, lanes: int, rpm: int,
                        agents: int) -> list[dict]:
    await _gql(http, f'mutation {{ createPool(input: {{name: "{name}", lanes: {lanes}, rpm: {rpm}, tpm: {BIG * 100}, '
                     f'leaseSeconds: 120, upstreamBaseUrl: "{provider_url}/v1", upstreamApiKey: "sk-fake"}}) '
                     '{ name } }')
    gate = asyncio.Semaphore(16)

    async def register(i: int) -> dict:
        async with gate:
            data = await _gql(http, f'mutation {{ registerAgent(input: {{name: "{name}.{i}", pool: "{name}"}}) '
                                    '{ token } }')
            return {"Authorization": f"Bearer {data['registerAgent']['token']}"}
    return list(await asyncio.gather(*(register(i) for i in range(agents))))


def spawn_agentrm(url: str, token: str, work: Path, log_name: str) -> tuple[subprocess.Popen, str, Path]:
    """`agentrm serve` (one worker, no demo fleet) on a free loopback port over ``url``, with
    ``token`` as its operator token: the process, its base URL and its log (not yet ready)."""
    port = peerlib.free_port()
    env = child_environment(DATABASE_URL=url, AGENTRM_OPERATOR_TOKEN=token, AGENTRM_DATA_DIR=str(work),
                            AGENTRM_UPSTREAM_ALLOWED_HOSTS="127.0.0.1")
    log = work / log_name
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1", "--no-demo"], cwd=peerlib.ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=open(log, "ab"))
    return proc, f"http://127.0.0.1:{port}", log


async def start_agentrm(url: str, tmp: Path, overhead_url: str, rate_urls: dict[str, str], repeat: int,
                        max_clients: int) -> Peer:
    token = "op_bench_" + secrets.token_hex(8)
    proc, base, log = spawn_agentrm(url, token, tmp, "serve.log")
    peer = Peer("agentrm", stoppers=[lambda: stop_process(proc)])
    try:
        await asyncio.to_thread(peerlib._wait_http, proc, f"{base}/readyz", log, "agentrm serve")
        async with httpx.AsyncClient(base_url=base, timeout=60, headers={"Authorization": f"Bearer {token}"}) as http:
            headers = await _agentrm_pool(http, "overhead", overhead_url, max_clients + 8, BIG, max_clients)
            peer.routes["overhead"] = Route(f"{base}/v1", peerlib.MODEL, headers)
            for r in range(repeat):
                for limiter, provider_url in rate_urls.items():
                    pool = f"{limiter}_{r}"
                    headers = await _agentrm_pool(http, pool, provider_url, RATE_CLIENTS, RPM, RATE_CLIENTS)
                    peer.routes[f"{limiter}/{r}"] = Route(f"{base}/v1", peerlib.MODEL, headers)
    except BaseException:
        peer.stop()
        raise
    db = postmaster_pid(url)
    peer.version = f"{importlib.metadata.version('agentrm')} ({_git_head()})"
    peer.cpu_roots = [proc.pid] + ([db] if db else [])
    peer.config = {"cli": "agentrm serve --host 127.0.0.1 --workers 1 --no-demo",
                   "env": {"AGENTRM_UPSTREAM_ALLOWED_HOSTS": "127.0.0.1"},
                   "pools": {"overhead": {"lanes": max_clients + 8, "rpm": BIG, "agents": max_clients},
                             "rate (one per limiter and run)": {"lanes": RATE_CLIENTS, "rpm": RPM,
                                                                "agents": RATE_CLIENTS}},
                   "docs": {"pool rpm, lanes, upstreamBaseUrl": "docs/guides/gateway.md, "
                                                                "docs/concepts/rate-admission.md"}}
    return peer


def _git_head() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=peerlib.ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
    return ""


def start_litellm(work: Path, install: bool, overhead_url: str, rate_urls: dict[str, str], repeat: int) -> Peer:
    peer = Peer("litellm")
    # Two instances: the overhead one as the proxy is set up by default (simple-shuffle),
    # the rate one with usage-based-routing-v2, the strategy that enforces `rpm`. A deployment
    # per limiter and run, so each run meets a deployment with no usage counted yet.
    overhead = peerlib.start_litellm("litellm-overhead",
                                     peerlib.litellm_config({peerlib.MODEL: (overhead_url, None)},
                                                            rate_limited=False), install, work)
    peer.stoppers.append(overhead.stop)
    try:
        models: dict[str, tuple[str, int | None]] = {
            f"{limiter}-{r}": (url, RPM) for r in range(repeat) for limiter, url in rate_urls.items()}
        # A deployment without a limit on the overhead provider, to warm the instance up
        # (its first calls are slow) without spending any limited deployment's minute.
        models["warmup"] = (overhead_url, None)
        rate = peerlib.start_litellm("litellm-rate", peerlib.litellm_config(models, rate_limited=True), install,
                                     work)
    except BaseException:
        peer.stop()
        raise
    peer.stoppers.append(rate.stop)
    peer.version, peer.cpu_roots = overhead.version, overhead.cpu_roots()
    peer.routes["overhead"] = Route(overhead.base, peerlib.MODEL, [overhead.headers])
    peer.routes["warmup"] = Route(rate.base, "warmup", [rate.headers])
    for r in range(repeat):
        for limiter in rate_urls:
            peer.routes[f"{limiter}/{r}"] = Route(rate.base, f"{limiter}-{r}", [rate.headers])
    peer.config = {"overhead instance": overhead.config["file"], "rate instance": rate.config["file"],
                   "cli": overhead.config["cli"], "docs": overhead.config["docs"]}
    return peer


def start_portkey(work: Path, install: bool, overhead_url: str, rate_urls: dict[str, str], repeat: int) -> Peer:
    target = peerlib.start_portkey(install, work)
    peer = Peer("portkey", version=target.version, cpu_roots=target.cpu_roots(), stoppers=[target.stop])
    peer.routes["overhead"] = Route(target.base, peerlib.MODEL, [peerlib.portkey_headers(overhead_url, False)])
    for r in range(repeat):
        for limiter, url in rate_urls.items():
            peer.routes[f"{limiter}/{r}"] = Route(target.base, peerlib.MODEL, [peerlib.portkey_headers(url, True)])
    peer.config = {"overhead": json.loads(peerlib.portkey_headers("PROVIDER", False)["x-portkey-config"]),
                   "rate": json.loads(peerlib.portkey_headers("PROVIDER", True)["x-portkey-config"]),
                   "hono_node_server": peerlib.hono_version(), "cli": target.config["cli"],
                   "docs": target.config["docs"]}
    return peer


def direct(overhead_url: str, rate_urls: dict[str, str], repeat: int) -> Peer:
    peer = Peer("direct", version="-", config={"client": "httpx straight to the fake provider"})
    peer.routes["overhead"] = Route(f"{overhead_url}/v1", peerlib.MODEL, [{"Authorization": "Bearer sk-fake"}])
    for r in range(repeat):
        for limiter, url in rate_urls.items():
            peer.routes[f"{limiter}/{r}"] = Route(f"{url}/v1", peerlib.MODEL, [{"Authorization": "Bearer sk-fake"}])
    return peer


async def _smoke(peer: Peer) -> str:
    """'' when the peer proxies a call streamed and not; else why not. Also its warm-up."""
    async with _client(1, timeout=60) as http:
        if "warmup" in peer.routes:
            for _ in range(RATE_CLIENTS):
                await _call(http, peer.routes["warmup"], 0, False)
        for stream in (False, True):
            try:
                status, _ = await _call(http, peer.routes["overhead"], 0, stream)
            except httpx.HTTPError as exc:
                return f"{'a streamed' if stream else 'a'} call failed: {exc!r}"
            if status != 200:
                return f"{'a streamed' if stream else 'a'} call answered {status}"
    return ""


# -- the run -----------------------------------------------------------------------------------
async def run_async(database_url: str | None, *, peers: tuple[str, ...] = ALL_PEERS, quick: bool = False,
                    repeat: int = 3, install: bool = True, rate_seconds: float | None = None,
                    workloads: tuple[str, ...] = ALL_WORKLOADS) -> dict:
    clients = QUICK_CLIENTS if quick else CLIENTS
    seconds = rate_seconds if rate_seconds is not None else (12.0 if quick else 30.0)
    overhead = await FakeProvider(BIG, BIG * 100, honour_stream=True, defaults={"output_tokens": 16}).start()
    rate_providers = {kind: await FakeProvider(RPM, BIG * 100, honour_stream=True, limiter_kind=kind,
                                               defaults={"output_tokens": 16, "latency_s": RATE_CALL_S}).start()
                      for kind in LIMITERS}
    rate_urls = {kind: p.url for kind, p in rate_providers.items()}
    started: dict[str, Peer] = {}
    skipped: dict[str, Peer] = {}
    load_at_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="agentrm-peers-"))
    extra: dict = {}
    try:
        for name in (peers if {"overhead", "rates"} & set(workloads) else ()):
            try:
                if name == "direct":
                    peer = direct(overhead.url, rate_urls, repeat)
                elif name == "litellm":
                    peer = await asyncio.to_thread(start_litellm, work, install, overhead.url, rate_urls, repeat)
                elif name == "portkey":
                    peer = await asyncio.to_thread(start_portkey, work, install, overhead.url, rate_urls, repeat)
                else:
                    if database_url is None:
                        raise peerlib.PeerUnavailable("no database for agentrm serve")
                    peer = await start_agentrm(database_url, work, overhead.url, rate_urls, repeat, max(clients))
            except peerlib.PeerUnavailable as exc:
                skipped[name] = Peer(name, status="skipped", reason=str(exc))
                print(f"peers: {name} skipped: {exc}", file=sys.stderr)
                continue
            problem = await _smoke(peer)
            if problem:
                peer.stop()
                skipped[name] = Peer(name, peer.version, peer.config, "skipped", f"does not proxy: {problem}")
                print(f"peers: {name} skipped: does not proxy: {problem}", file=sys.stderr)
                continue
            started[name] = peer
        overhead_runs: list[dict] = []
        rate_runs: list[dict] = []
        for r in range(repeat if "overhead" in workloads else 0):
            for n in clients:
                calls = (20 if n == 1 else 5 * n) if quick else max(200, 4 * n)
                for stream in (False, True):
                    for peer in started.values():   # the peers in turn, so drift in the noise hits all
                        result = await overhead_phase(peer, n, stream, calls)
                        overhead_runs.append({**result, "run": r})
        for r in range(repeat if "rates" in workloads else 0):
            for limiter, provider in rate_providers.items():
                for peer in started.values():
                    result = await rate_phase(peer, limiter, peer.routes[f"{limiter}/{r}"], provider, seconds)
                    rate_runs.append({**result, "run": r})
        for peer in started.values():
            peer.stop()   # the next workloads start fleets of their own
        context = WorkloadRun(database_url, work, peers, workloads, repeat, install, seconds, overhead.url)
        for workload in EXTRA_WORKLOADS:
            if set(workload.names) & set(workloads):
                extra.update(await workload.run(context))
    finally:
        for peer in started.values():
            peer.stop()
        await overhead.stop()
        for provider in rate_providers.values():
            await provider.stop()
    every = {**started, **skipped}
    return {
        "settings": {"peers": list(peers), "workloads": list(workloads), "quick": quick, "repeat": repeat,
                     "clients": list(clients),
                     "rate_seconds": seconds, "rpm": RPM, "rate_clients": RATE_CLIENTS, "rate_call_s": RATE_CALL_S,
                     "cores": os.cpu_count()},
        "load_average": {"start": load_at_start, "end": os.getloadavg()},
        "peers": {name: {"status": p.status, "reason": p.reason, "version": p.version, "config": p.config}
                  for name, p in ((n, every[n]) for n in peers if n in every)},
        "overhead": summarise_overhead(overhead_runs), "overhead_runs": overhead_runs,
        "rate_limits": summarise_rates(rate_runs), "rate_runs": rate_runs, **extra,
    }


def _spread(values: Sequence[float | None]) -> dict | None:
    known = [v for v in values if v is not None]
    if not known:
        return None
    return {"median": statistics.median(known), "min": min(known), "max": max(known)}


def summarise_overhead(runs: list[dict]) -> list[dict]:
    rows = []
    keys = sorted({(r["clients"], r["stream"]) for r in runs})
    for clients, stream in keys:
        here = [r for r in runs if r["clients"] == clients and r["stream"] == stream]
        direct = {r["run"]: r for r in here if r["peer"] == "direct"}
        for name in dict.fromkeys(r["peer"] for r in here):
            mine = [r for r in here if r["peer"] == name]
            added50 = [r["p50_ms"] - direct[r["run"]]["p50_ms"] for r in mine
                       if r["run"] in direct and r["p50_ms"] is not None and direct[r["run"]]["p50_ms"] is not None]
            added99 = [r["p99_ms"] - direct[r["run"]]["p99_ms"] for r in mine
                       if r["run"] in direct and r["p99_ms"] is not None and direct[r["run"]]["p99_ms"] is not None]
            rows.append({"peer": name, "clients": clients, "stream": stream,
                         "calls": sum(r["calls"] for r in mine),
                         "errors": sum(sum(r["errors"].values()) for r in mine),
                         "p50_ms": _spread([r["p50_ms"] for r in mine]),
                         "p99_ms": _spread([r["p99_ms"] for r in mine]),
                         "added_p50_ms": _spread(added50), "added_p99_ms": _spread(added99),
                         "calls_per_s": _spread([r["calls_per_s"] for r in mine]),
                         "cpu_s_per_1000": _spread([r["cpu_s_per_1000"] for r in mine]),
                         "driver_cpu_s_per_1000": _spread([r["driver_cpu_s_per_1000"] for r in mine]),
                         "load_average": _spread([r["load_average"] for r in mine])})
    return rows


def summarise_rates(runs: list[dict]) -> list[dict]:
    rows = []
    for limiter in dict.fromkeys(r["limiter"] for r in runs):
        for name in dict.fromkeys(r["peer"] for r in runs):
            mine = [r for r in runs if r["limiter"] == limiter and r["peer"] == name]
            if not mine:
                continue
            rows.append({"peer": name, "limiter": limiter, "runs": len(mine),
                         **{k: _spread([float(r[k]) for r in mine])
                            for k in ("provider_429", "client_429", "provider_admitted", "client_ok",
                                      "unfinished_at_end")},
                         "client_other": [r["client_other"] for r in mine]})
    return rows


# -- the report ----------------------------------------------------------------------------------
def _fmt(s: dict | None, digits: int = 1) -> str:
    if s is None:
        return "-"
    if s["min"] == s["max"]:
        return f"{s['median']:.{digits}f}"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f} to {s['max']:.{digits}f})"


def to_markdown(r: dict) -> str:
    s, la = r["settings"], r["load_average"]
    lines = ["# Peers (`agentrm bench peers`): AgentRM beside the LiteLLM proxy and the Portkey gateway", "",
             f"Preliminary: {s['cores']} cores shared with other work; load average "
             f"{la['start'][0]:.1f} at the start, {la['end'][0]:.1f} at the end. {s['repeat']} run(s); each figure "
             "is the median, with the spread over runs in brackets.", "",
             "| peer | status | version |", "|---|---|---|"]
    for name, p in r["peers"].items():
        status = p["status"] if p["status"] == "ok" else f"skipped: {p['reason']}"
        lines.append(f"| {name} | {status} | {p['version'] or '-'} |")
    lines += ["", "## Overhead: one fake provider that answers at once", "",
              "| clients | stream | peer | p50 ms | p99 ms | added p50 ms | added p99 ms | calls/s "
              "| CPU s / 1,000 calls | errors |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in r["overhead"]:
        lines.append(f"| {row['clients']} | {'yes' if row['stream'] else 'no'} | {row['peer']} "
                     f"| {_fmt(row['p50_ms'])} | {_fmt(row['p99_ms'])} | {_fmt(row['added_p50_ms'])} "
                     f"| {_fmt(row['added_p99_ms'])} | {_fmt(row['calls_per_s'], 0)} "
                     f"| {_fmt(row['cpu_s_per_1000'], 2)} | {row['errors']} |")
    lines += ["", "CPU counts every process of the gateway (its process tree; for AgentRM its PostgreSQL "
              "too); direct's is 0 by definition. The driver (client and fake providers, one process) "
              "is in overhead_runs[].driver_cpu_s_per_1000 in peers.json.", "",
              f"## Rate limits: the provider allows {s['rpm']} requests a minute; {s['rate_clients']} clients, "
              f"{s['rate_seconds']:.0f} s, each call {s['rate_call_s']} s", "",
              "| limiter | peer | provider 429s | client 429s | admitted by the provider | calls the clients got "
              "| calls still waiting at the end |", "|---|---|---|---|---|---|---|"]
    for row in r["rate_limits"]:
        lines.append(f"| {row['limiter']} | {row['peer']} | {_fmt(row['provider_429'], 0)} "
                     f"| {_fmt(row['client_429'], 0)} | {_fmt(row['provider_admitted'], 0)} "
                     f"| {_fmt(row['client_ok'], 0)} | {_fmt(row['unfinished_at_end'], 0)} |")
    lines += ["", "Each peer's configuration, with where each setting is documented, is in peers.json "
              "(`peers.NAME.config`)."]
    for workload in EXTRA_WORKLOADS:
        section = workload.markdown(r)
        if section:
            lines += ["", section]
    return "\n".join(lines) + "\n"


def run(out: Path, database_url: str | None, **kwargs) -> dict:
    from .load_bench import run_loop
    result = run_loop(run_async(database_url, **kwargs))
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers.md").write_text(to_markdown(result))
    (out / "peers.json").write_text(json.dumps(result, indent=2, default=str))
    return result

"""`agentrm bench peers`, workload `replicas`: three instances of each gateway behind the
clients, in front of the one rate-limited provider.

The workload (fixed before any tuning, but for one harness defect found on the first run: a
gateway's calls from the last phase landing after the provider's reset, so each phase now
starts once the provider has been quiet for QUIET_S) is the rate workload's: the provider allows RPM
requests a minute (token bucket, 60 s sliding window or 60 s fixed windows), RATE_CLIENTS
clients call in a closed loop, each call takes RATE_CALL_S, a client that gets a 429 waits
its retry-after (1 to 10 s). What changes: each gateway runs INSTANCES processes and client i
calls instance i % INSTANCES (round robin, as a load balancer spreads clients). Every phase
is run with one instance (clients all on instance 0) and with all three, on a fresh
provider limiter and a fresh gateway budget (a deployment or pool of its own), so the one-
and three-instance rows differ only in the instance count.

How each peer is set up for several instances, as its documentation says:
- LiteLLM: the rate instance's config (`rpm` on the deployment, usage-based-routing-v2) with
  `router_settings.redis_host/redis_port` on one Redis (Debian's redis-server on loopback,
  no persistence): the docs' way for several proxies to share their rpm/tpm counts.
- Portkey: three gateways with the rate workload's retry config; the open-source gateway
  keeps no state to share (it has no rate limiter).
- AgentRM: three `agentrm serve --workers 1` processes on ONE database; every worker admits
  from the one log, a pool's scheduler runs in its one leader (docs/operations/
  scaling-and-failover.md).
- direct: the clients alone (one "instance": the provider).

Reported per peer, limiter and instance count: the 429s the provider served, the 429s the
clients saw, the calls the provider admitted, the share of the best peer's admitted calls in
the same run, and the CPU seconds of every process of the peer (each instance's process tree,
AgentRM's PostgreSQL, LiteLLM's Redis) over the phase.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.config import foreign_environment

from . import peers as peerlib
from .fake_provider import FakeProvider
from .load_bench import postmaster_pid
from .peers_bench import (
    BIG,
    EXTRA_WORKLOADS,
    RATE_CLIENTS,
    RPM,
    ExtraWorkload,
    Route,
    WorkloadRun,
    _agentrm_pool,
    _call,
    _client,
    _cpu,
    _fmt,
    _git_head,
    _gql,
    _spread,
    closed_loop,
    spawn_agentrm,
)
from .processes import stop_process

INSTANCES = 3
INSTANCE_COUNTS = (1, INSTANCES)

LITELLM_REDIS_DOCS = {
    "router_settings.redis_host, redis_port": "https://docs.litellm.ai/docs/routing ('In production, litellm "
    "supports using Redis as a way to track cooldown server and usage (managing tpm/rpm limits)'); "
    "https://docs.litellm.ai/docs/load_test_rpm (Multi-Instance TPM/RPM: routers given redis_host, "
    "redis_port so that rpm limits hold across instances)",
    "router_settings.routing_strategy: usage-based-routing-v2": "https://docs.litellm.ai/docs/proxy/load_balancing "
    "(usage-based-routing: 'When you want to respect rate limits evenly')",
    "in 1.106.12": "litellm/router_strategy/base_routing_strategy.py _increment_value_in_current_window: "
    "a count is raised in memory at once and pushed to Redis by a pipeline every 0.1 s "
    "(default_sync_interval=0.1 in lowest_tpm_rpm_v2.py), which then reads the shared total back",
}


@dataclass
class Fleet:
    """One peer's instances: how the clients reach each, and every process to count."""
    name: str
    version: str = ""
    config: dict = field(default_factory=dict)
    status: str = "ok"
    reason: str = ""
    cpu_roots: list[int] = field(default_factory=list)
    routes: dict[str, list[Route]] = field(default_factory=dict)   # phase key -> a route per instance
    stoppers: list = field(default_factory=list)

    def stop(self) -> None:
        for stop in reversed(self.stoppers):
            with contextlib.suppress(Exception):
                stop()


def phase_key(limiter: str, run: int, instances: int) -> str:
    return f"{limiter}/{run}/{instances}"


def _phases(rate_urls: dict[str, str], repeat: int):
    for r in range(repeat):
        for limiter, url in rate_urls.items():
            for n in INSTANCE_COUNTS:
                yield r, limiter, url, n


# -- Redis -------------------------------------------------------------------------------------
def start_redis(workdir: Path) -> tuple[subprocess.Popen, int]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise peerlib.PeerUnavailable("redis-server is not installed (Debian package redis-server)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = peerlib.free_port()
    log = workdir / "redis.log"
    # Loopback only, no persistence: a scratch store for the proxies' counters.
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--protected-mode", "yes", "--dir", str(workdir)],
                            cwd=workdir, env=foreign_environment(), stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:   # a real process must come up: poll it, with a deadline
        if proc.poll() is not None:
            raise peerlib.PeerUnavailable(f"redis-server exited at start: {log.read_text()[-300:]}")
        with contextlib.suppress(OSError):
            with __import__("socket").create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, port
        time.sleep(0.2)
    stop_process(proc, grace=5)
    raise peerlib.PeerUnavailable("redis-server did not answer PING within 30 s")


def _redis_version() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, timeout=10).stdout
        for word in out.split():
            if word.startswith("v="):
                return word[2:]
    return ""


# -- the fleets ----------------------------------------------------------------------------------
async def start_litellm(work: Path, install: bool, warm_url: str, rate_urls: dict[str, str], repeat: int) -> Fleet:
    fleet = Fleet("litellm")
    try:
        redis, redis_port = await asyncio.to_thread(start_redis, work)
        fleet.stoppers.append(lambda: stop_process(redis, grace=5))
        models: dict[str, tuple[str, int | None]] = {
            f"{limiter}-{r}-{n}": (url, RPM) for r, limiter, url, n in _phases(rate_urls, repeat)}
        models["warmup"] = (warm_url, None)
        config = peerlib.litellm_config(models, rate_limited=True)
        config["router_settings"].update({"redis_host": "127.0.0.1", "redis_port": redis_port})
        targets = await asyncio.gather(*(asyncio.to_thread(peerlib.start_litellm, f"litellm-replica-{i}", config,
                                                           install, work) for i in range(INSTANCES)),
                                       return_exceptions=True)
        for t in targets:
            if isinstance(t, peerlib.Target):
                fleet.stoppers.append(t.stop)
        failed = [t for t in targets if isinstance(t, BaseException)]
        if failed:
            raise failed[0]
    except BaseException:
        fleet.stop()
        raise
    ok = [t for t in targets if isinstance(t, peerlib.Target)]
    fleet.version = f"{ok[0].version}, redis-server {_redis_version()}"
    fleet.cpu_roots = [p for t in ok for p in t.cpu_roots()] + [redis.pid]
    fleet.routes["warmup"] = [Route(t.base, "warmup", [t.headers]) for t in ok]
    for r, limiter, _url, n in _phases(rate_urls, repeat):
        fleet.routes[phase_key(limiter, r, n)] = [Route(t.base, f"{limiter}-{r}-{n}", [t.headers]) for t in ok[:n]]
    fleet.config = {"instances": INSTANCES, "file (the same for each)": config, "cli": ok[0].config["cli"],
                    "redis": "redis-server --bind 127.0.0.1 --save '' --appendonly no",
                    "docs": {**peerlib.LITELLM_DOCS, **LITELLM_REDIS_DOCS}}
    return fleet


async def start_portkey(work: Path, install: bool, rate_urls: dict[str, str], repeat: int) -> Fleet:
    fleet = Fleet("portkey")
    targets = await asyncio.gather(*(asyncio.to_thread(peerlib.start_portkey, install, work / f"portkey-{i}")
                                     for i in range(INSTANCES)), return_exceptions=True)
    fleet.stoppers = [t.stop for t in targets if isinstance(t, peerlib.Target)]
    failed = [t for t in targets if isinstance(t, BaseException)]
    if failed:
        fleet.stop()
        raise failed[0]
    ok = [t for t in targets if isinstance(t, peerlib.Target)]
    fleet.version, fleet.cpu_roots = ok[0].version, [p for t in ok for p in t.cpu_roots()]
    for r, limiter, url, n in _phases(rate_urls, repeat):
        fleet.routes[phase_key(limiter, r, n)] = [Route(t.base, peerlib.MODEL, [peerlib.portkey_headers(url, True)])
                                                 for t in ok[:n]]
    fleet.config = {"instances": INSTANCES, "shared state": "none (the open-source gateway keeps none)",
                    "rate": peerlib.portkey_headers("PROVIDER", True), "cli": ok[0].config["cli"],
                    "docs": ok[0].config["docs"]}
    return fleet


def _start_serve(url: str, token: str, tmp: Path, i: int) -> tuple[subprocess.Popen, str]:
    proc, base, log = spawn_agentrm(url, token, tmp, f"serve-{i}.log")
    try:
        peerlib._wait_http(proc, f"{base}/readyz", log, f"agentrm serve #{i}")
    except BaseException:
        stop_process(proc)
        raise
    return proc, base


async def _pool(http: httpx.AsyncClient, name: str, provider_url: str, limiter: str | None) -> list[dict]:
    """A pool as the rate workload's (peers_bench._agentrm_pool), with `limiter` when given."""
    if limiter is None:
        return await _agentrm_pool(http, name, provider_url, RATE_CLIENTS, RPM, RATE_CLIENTS)
    await _gql(http, f'mutation {{ createPool(input: {{name: "{name}", lanes: {RATE_CLIENTS}, rpm: {RPM}, '
                     f'tpm: {BIG * 100}, leaseSeconds: 120, limiter: {limiter}, '
                     f'upstreamBaseUrl: "{provider_url}/v1", upstreamApiKey: "sk-fake"}}) {{ name }} }}')
    tokens = []
    for i in range(RATE_CLIENTS):
        data = await _gql(http, f'mutation {{ registerAgent(input: {{name: "{name}.{i}", pool: "{name}"}}) '
                                '{ token } }')
        tokens.append({"Authorization": f"Bearer {data['registerAgent']['token']}"})
    return tokens


async def start_agentrm(url: str, tmp: Path, rate_urls: dict[str, str], repeat: int) -> list[Fleet]:
    """INSTANCES `agentrm serve` processes on the one database (one data dir, as every
    replica must hold the same key ring: docs/operations/security.md). Two fleets on them:
    `agentrm`, its pools as the rate workload's (the default limiter, SLIDING_WINDOW), and
    `agentrm-token-bucket`, for the token-bucket provider only, a pool that says the provider's
    shape (`limiter: TOKEN_BUCKET`, docs/concepts/rate-admission.md); for the two window
    providers the default already is their rule (a fixed window of W is bounded by the
    sliding rule of the same W)."""
    import importlib.metadata
    fleet = Fleet("agentrm")
    matched = Fleet("agentrm-token-bucket")
    token = "op_bench_" + secrets.token_hex(8)
    tmp.mkdir(parents=True, exist_ok=True)
    # The first creates the schema's state; the others join it.
    started = [await asyncio.to_thread(_start_serve, url, token, tmp, 0)]
    fleet.stoppers.append(lambda: stop_process(started[0][0]))
    try:
        rest = await asyncio.gather(*(asyncio.to_thread(_start_serve, url, token, tmp, i)
                                      for i in range(1, INSTANCES)), return_exceptions=True)
        for item in rest:
            if not isinstance(item, BaseException):
                started.append(item)
                fleet.stoppers.append(lambda p=item[0]: stop_process(p))
        failed = [t for t in rest if isinstance(t, BaseException)]
        if failed:
            raise failed[0]
        bases = [base for _proc, base in started]
        async with httpx.AsyncClient(base_url=bases[0], timeout=60,
                                     headers={"Authorization": f"Bearer {token}"}) as http:
            for r, limiter, provider_url, n in _phases(rate_urls, repeat):
                # every instance serves every agent (one log): client i's token at instance i % n
                headers = await _pool(http, f"replicas_{limiter}_{r}_{n}", provider_url, None)
                fleet.routes[phase_key(limiter, r, n)] = [Route(f"{b}/v1", peerlib.MODEL, headers)
                                                         for b in bases[:n]]
                if limiter == "token_bucket":
                    headers = await _pool(http, f"replicas_bucket_{r}_{n}", provider_url, "TOKEN_BUCKET")
                    matched.routes[phase_key(limiter, r, n)] = [Route(f"{b}/v1", peerlib.MODEL, headers)
                                                               for b in bases[:n]]
    except BaseException:
        fleet.stop()
        raise
    db = postmaster_pid(url)
    fleet.version = matched.version = f"{importlib.metadata.version('agentrm')} ({_git_head()})"
    fleet.cpu_roots = matched.cpu_roots = [p.pid for p, _ in started] + ([db] if db else [])
    pool = {"lanes": RATE_CLIENTS, "rpm": RPM, "tpm": BIG * 100, "agents": RATE_CLIENTS}
    fleet.config = {"instances": INSTANCES, "cli": "agentrm serve --host 127.0.0.1 --workers 1 --no-demo "
                    "(each; one DATABASE_URL, one AGENTRM_DATA_DIR)",
                    "env": {"AGENTRM_UPSTREAM_ALLOWED_HOSTS": "127.0.0.1"},
                    "pools": {"one per limiter, run and instance count": {**pool, "limiter": "default "
                                                                           "(SLIDING_WINDOW)"}},
                    "docs": {"several serve processes on one database": "docs/operations/scaling-and-failover.md",
                             "one rate budget across workers": "docs/guides/gateway.md",
                             "AGENTRM_LEADER_LEASE_SECONDS (default 5)": "docs/reference/configuration.md"}}
    matched.config = {**fleet.config, "pools": {"one per run and instance count, token bucket provider only":
                                                {**pool, "limiter": "TOKEN_BUCKET"}},
                      "docs": {**fleet.config["docs"], "limiter": "docs/concepts/rate-admission.md"}}
    return [fleet, matched]


def direct(rate_urls: dict[str, str], repeat: int) -> Fleet:
    fleet = Fleet("direct", version="-", config={"client": "httpx straight to the fake provider"})
    for r, limiter, url, n in _phases(rate_urls, repeat):
        if n == 1:
            fleet.routes[phase_key(limiter, r, n)] = [Route(f"{url}/v1", peerlib.MODEL,
                                                           [{"Authorization": "Bearer sk-fake"}])]
    return fleet


# -- a phase ---------------------------------------------------------------------------------------
QUIET_S = 3.0
QUIET_LIMIT_S = 30.0


async def until_quiet(provider: FakeProvider, quiet_s: float = QUIET_S, limit_s: float = QUIET_LIMIT_S) -> float:
    """Wait until the provider has had no request for `quiet_s` (at most `limit_s`); returns the
    seconds waited. A gateway may go on with a call its client gave up on at the end of the
    last phase (Portkey retries it): that call must not land in the next phase's count."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        last = max((e.received_at for e in provider.access_log), default=0.0)
        if time.time() - last >= quiet_s:
            break
        await asyncio.sleep(0.25)
    return time.monotonic() - started


async def replicas_phase(fleet: Fleet, limiter: str, run: int, instances: int, provider: FakeProvider,
                         seconds: float) -> dict:
    """The rate workload's closed loop with client i on instance i % instances."""
    routes = fleet.routes[phase_key(limiter, run, instances)]
    settle = await until_quiet(provider)
    provider.reset()
    load = os.getloadavg()[0]
    cpu0 = _cpu(fleet.cpu_roots)
    clients = await closed_loop(routes, seconds)
    cpu = _cpu(fleet.cpu_roots) - cpu0
    stats = provider.stats()
    return {"peer": fleet.name, "limiter": limiter, "run": run, "instances": instances, "seconds": seconds,
            "provider_429": stats["rate_limited"], "provider_admitted": stats["admitted"], **clients,
            "cpu_s": cpu, "load_average": load, "settle_s": settle}


async def _warm(fleet: Fleet) -> str:
    """'' when every instance proxies a call; LiteLLM's first calls go to its unlimited
    deployment (its first calls are slow)."""
    async with _client(1, timeout=60) as http:
        for route in fleet.routes.get("warmup", []):
            for _ in range(RATE_CLIENTS):
                with contextlib.suppress(httpx.HTTPError):
                    await _call(http, route, 0, False)
    return ""


# -- the run ---------------------------------------------------------------------------------------
async def run_replicas(database_url: str | None, work: Path, peers: tuple[str, ...], repeat: int, install: bool,
                       seconds: float, warm_url: str) -> dict:
    """Every peer's fleet, every limiter, one and three instances, `repeat` runs."""
    from .fake_provider import LIMITERS
    from .peers_bench import RATE_CALL_S
    providers = {kind: await FakeProvider(RPM, BIG * 100, honour_stream=True, limiter_kind=kind,
                                          defaults={"output_tokens": 16, "latency_s": RATE_CALL_S}).start()
                 for kind in LIMITERS}
    urls = {kind: p.url for kind, p in providers.items()}
    fleets: dict[str, Fleet] = {}
    skipped: dict[str, Fleet] = {}
    runs: list[dict] = []
    load_at_start = os.getloadavg()
    also: list[Fleet] = []
    try:
        for name in peers:
            also.clear()
            try:
                if name == "direct":
                    fleet = direct(urls, repeat)
                elif name == "litellm":
                    fleet = await start_litellm(work / "replicas", install, warm_url, urls, repeat)
                elif name == "portkey":
                    fleet = await start_portkey(work / "replicas", install, urls, repeat)
                else:
                    if database_url is None:
                        raise peerlib.PeerUnavailable("no database for agentrm serve")
                    fleet, matched = await start_agentrm(database_url, work / "replicas-agentrm", urls, repeat)
                    also.append(matched)   # the same processes: stopped with `agentrm`
            except peerlib.PeerUnavailable as exc:
                skipped[name] = Fleet(name, status="skipped", reason=str(exc))
                print(f"peers replicas: {name} skipped: {exc}", file=sys.stderr)
                continue
            await _warm(fleet)
            fleets[name] = fleet
            for other in also:
                fleets[other.name] = other
        for r in range(repeat):
            for limiter, provider in providers.items():
                for n in INSTANCE_COUNTS:
                    for fleet in fleets.values():   # the peers in turn, so drift in the noise hits all
                        if phase_key(limiter, r, n) in fleet.routes:
                            runs.append(await replicas_phase(fleet, limiter, r, n, provider, seconds))
    finally:
        for fleet in fleets.values():
            fleet.stop()
        for provider in providers.values():
            await provider.stop()
    every = {**fleets, **skipped}
    return {"settings": {"instances": INSTANCE_COUNTS, "rpm": RPM, "clients": RATE_CLIENTS, "seconds": seconds,
                         "call_s": RATE_CALL_S, "repeat": repeat, "round_robin": "client i -> instance i % n"},
            "load_average": {"start": load_at_start, "end": os.getloadavg()},
            "peers": {n: {"status": f.status, "reason": f.reason, "version": f.version, "config": f.config}
                      for n, f in every.items()},
            "summary": summarise_replicas(runs), "runs": runs}


# -- the summary -------------------------------------------------------------------------------------
def with_best_share(runs: list[dict]) -> list[dict]:
    """Each run with `best_share`: its admitted calls over the most any peer admitted in the
    same limiter, run and instance count (direct, with one instance, counts for both counts:
    the provider itself is the same whatever sits in front)."""
    best: dict[tuple, int] = {}
    for r in runs:
        for n in INSTANCE_COUNTS if r["peer"] == "direct" else (r["instances"],):
            key = (r["limiter"], r["run"], n)
            best[key] = max(best.get(key, 0), r["provider_admitted"])
    out = []
    for r in runs:
        top = best.get((r["limiter"], r["run"], r["instances"]), 0)
        out.append({**r, "best_share": r["provider_admitted"] / top if top else None})
    return out


def summarise_replicas(runs: list[dict]) -> list[dict]:
    runs = with_best_share(runs)
    rows = []
    for limiter in dict.fromkeys(r["limiter"] for r in runs):
        for n in INSTANCE_COUNTS:
            for name in dict.fromkeys(r["peer"] for r in runs):
                mine = [r for r in runs if r["limiter"] == limiter and r["instances"] == n and r["peer"] == name]
                if not mine:
                    continue
                rows.append({"peer": name, "limiter": limiter, "instances": n, "runs": len(mine),
                             **{k: _spread([float(r[k]) for r in mine if r[k] is not None])
                                for k in ("provider_429", "client_429", "provider_admitted", "client_ok",
                                          "best_share", "cpu_s", "unfinished_at_end", "load_average")},
                             "client_other": [r["client_other"] for r in mine]})
    return rows


def acceptance(summary: list[dict], peers: tuple[str, ...] = ("agentrm",), share: float = 0.95) -> dict:
    """The issue's line: zero provider 429s in every run of every limiter, one instance and
    three, while admitting at least `share` of the best peer (median). For each limiter and
    instance count the row of the first of `peers` that ran it is judged (a configuration
    that names the provider's shape where it differs from the default)."""
    chosen: dict[tuple, dict] = {}
    for name in reversed(peers):
        for row in summary:
            if row["peer"] == name:
                chosen[(row["limiter"], row["instances"])] = row
    if not chosen:
        return {"peers": list(peers), "passed": None, "failures": ["not run"]}
    failures = []
    for row in chosen.values():
        where = f"{row['limiter']}, {row['instances']} instance(s)"
        if row["provider_429"] is not None and row["provider_429"]["max"] > 0:
            failures.append(f"{where}: the provider served up to {row['provider_429']['max']:.0f} 429s")
        if row["best_share"] is not None and row["best_share"]["median"] < share:
            failures.append(f"{where}: admitted {row['best_share']['median']:.2f} of the best peer's calls")
    return {"peers": list(peers), "passed": not failures, "failures": failures}


def replicas_markdown(result: dict) -> str:
    s, la = result["settings"], result["load_average"]
    lines = [f"## Replicas: {max(s['instances'])} instances of each gateway, round robin, one provider of "
             f"{s['rpm']} RPM", "",
             f"{s['clients']} clients, {s['seconds']:.0f} s a phase, each call {s['call_s']} s; client i calls "
             f"instance i % n. {s['repeat']} run(s); median with the spread over runs in brackets. Load average "
             f"{la['start'][0]:.1f} at the start, {la['end'][0]:.1f} at the end (each phase's in the json).", "",
             "| peer | status | version |", "|---|---|---|"]
    for name, p in result["peers"].items():
        status = p["status"] if p["status"] == "ok" else f"skipped: {p['reason']}"
        lines.append(f"| {name} | {status} | {p['version'] or '-'} |")
    lines += ["", "| limiter | instances | peer | provider 429s | client 429s | admitted by the provider "
              "| share of the best peer | calls the clients got | CPU s (every process) | load average |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["summary"]:
        lines.append(f"| {row['limiter']} | {row['instances']} | {row['peer']} | {_fmt(row['provider_429'], 0)} "
                     f"| {_fmt(row['client_429'], 0)} | {_fmt(row['provider_admitted'], 0)} "
                     f"| {_fmt(row['best_share'], 2)} | {_fmt(row['client_ok'], 0)} | {_fmt(row['cpu_s'], 1)} "
                     f"| {_fmt(row['load_average'], 1)} |")
    line = ("Acceptance (zero 429s served by the provider for every limiter shape, with one instance and with "
            "three, while admitting >= 0.95 of what the best peer admits)")
    for peers, what in ((("agentrm",), "AgentRM, its pools as the rate workload's (the default limiter)"),
                        (("agentrm-token-bucket", "agentrm"), "AgentRM, the pool's `limiter` naming the provider's "
                                                              "shape (TOKEN_BUCKET for the bucket)")):
        verdict = acceptance(result["summary"], peers)
        if verdict["passed"] is not None:
            lines += ["", f"{line}, {what}: "
                      + ("**met**" if verdict["passed"] else "**not met**: " + "; ".join(verdict["failures"]))]
    lines += ["", "CPU counts each instance's process tree, AgentRM's PostgreSQL and LiteLLM's Redis; direct's "
              "is 0 by definition."]
    return "\n".join(lines) + "\n"


async def _run(run: WorkloadRun) -> dict:
    return {"replicas": await run_replicas(run.database_url, run.work, run.peers, run.repeat, run.install,
                                           run.rate_seconds, run.overhead_url)}


EXTRA_WORKLOADS.append(ExtraWorkload(
    ("replicas",), _run, lambda r: replicas_markdown(r["replicas"]) if "replicas" in r else None))

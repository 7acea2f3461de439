"""`agentrm bench live`: the scheduler benchmark's workload through the REAL service, checked
against the simulation.

    agentrm bench live [--agents 30] [--minutes 10] [--compression 20] [--seed 1 | --seeds 1-5]
        [--repeat 1] [--hang-rate 0.02] [--out DIR] [--json]
    agentrm bench live --scenario NAME [...]    (live_scenarios.py: one frozen scenario)

What runs: the seeded trace of `agentrm bench scheduler` (scaled down to a few dozen agents
and its pool scaled with it), time-compressed by a factor c: every duration of the trace
(think, tool, cron instant, provider latency) and of the pool (lease, boost period) is divided
by c, and the RPM/TPM limits are multiplied by c. The real stack serves it: PostgreSQL, the
scheduler loop, the GraphQL API over HTTP, one asyncio task per agent acting as a client,
and a fake provider on loopback (`fake_provider.py`) with the simulation's limiter.

What is compared: the metrics of `metrics.py`, computed from the EVENT LOG of the live run
(see `log_metrics`), against the `agentrm` policy of the simulation run on the identical
compressed trace with the identical pool settings. Both are converted back to simulated
time (latencies times c, throughput per simulated minute) before they are shown.

Why the simulation also runs compressed (rather than comparing with the uncompressed sim):
some pool settings cannot be compressed through the API (MLFQ allotments in lane-seconds,
the 429 jitter and default retry-after, the AIMD recovery per minute), so the compressed
scenario is a slightly different scenario. Comparing like with like isolates the question
the check asks: does the real service do what the simulated core does? The uncompressed sim
is reported beside it, so the distortion that compression itself brings is visible too.
The largest distortion: RPM/TPM buckets hold one (wall) minute's worth, so a compressed pool
may burst c simulated minutes of tokens; the default scaled pool, TPM-bound at full time
scale, is not TPM-bound compressed (and sees no 429s). A faithful compression needs a rate
window setting (bucket capacity = limit x window / 60 s) in the core and in sim.Provider.

Per-turn service overheads (grant -> the call at the provider, provider's last byte ->
TurnCompleted: several ms each) are multiplied by c in simulated time. The verdict's sim is
given both as measured in the same run; the columns without the second one show how much
it matters. At c = 1 and the default fleet (`--agents 200 --compression 1 --hang-rate 0.01
--lease-seconds 30`) the check measures the delays the scheduler benchmark's client pays
(policies.MEASURED_*_DELAY_S).

The API runs in a process of its own (`serve_api`), as `agentrm serve` runs it; the clients
and the fake provider share this process's event loop.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import secrets
import socket
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path

import httpx

from app.domain import events as ev
from app.domain import turn_history
from app.stats import percentile

from .fake_provider import FakeProvider
from .scheduler_bench import DEFAULT_LANES, DEFAULT_RPM, DEFAULT_TPM, simulate
from .sim import ZOMBIE_AFTER_S
from .workload import (
    CLASSES,
    AgentScript,
    RunSpec,
    Trace,
    WorkloadParams,
    call_attempts,
    generate,
)

TOLERANCE = 0.15               # relative agreement asked of p50, p95 and throughput
LANE_WASTE_ABS_TOLERANCE = 0.02  # lane waste is a small fraction: compared in absolute points
# The server refuses a short or guessable operator token; each run draws its own.
OPERATOR_TOKEN = "op_live_check_" + secrets.token_hex(8)


# -- settings ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class LiveSettings:
    """The scaled, compressed scenario. Times are in SIMULATED seconds; `pool()` compresses."""
    agents: int = 30
    minutes: float = 10.0
    compression: float = 20.0
    seed: int = 1
    hang_rate: float = 0.02       # > 0 so that reaps happen in a short run
    lanes: int | None = None      # None: the scheduler benchmark's pool scaled by agents/200
    rpm: int | None = None
    tpm: int | None = None
    # The bench uses a 10 s lease; the API refuses leases under 1 s, so the simulated lease
    # must be at least c seconds: 20 s at the default c = 20 (1 s of wall time).
    lease_seconds: float = 20.0
    boost_seconds: float = 60.0   # the core's default boost period
    start_timeout_floor_seconds: float = 2.0   # the core's default (simulated seconds)
    # ...but never below this much wall time: the first heartbeat's own path (client -> API ->
    # log -> scheduler, ~25 ms mean and 100+ ms tails on a loaded 2-core machine) does not
    # compress (shorter floors cut live calls: docs/benchmarks/live-check.md).
    min_start_floor_wall_s: float = 1.0

    def resolved(self) -> LiveSettings:
        scale = self.agents / 200.0   # the scheduler bench's default fleet
        return replace(self, lanes=self.lanes or max(2, round(DEFAULT_LANES * scale)),
                       rpm=self.rpm or max(10, round(DEFAULT_RPM * scale)),
                       tpm=self.tpm or max(100_000, round(DEFAULT_TPM * scale)))

    @property
    def wall_seconds(self) -> float:
        return self.minutes * 60.0 / self.compression

    def pool(self) -> dict:
        """The compressed pool both the live service and the simulation run."""
        c = self.compression
        return {"lanes": self.lanes, "rpm": int(round(self.rpm * c)), "tpm": int(round(self.tpm * c)),
                "lease_seconds": self.lease_seconds / c, "boost_seconds": self.boost_seconds / c,
                "start_timeout_floor_seconds": max(self.start_timeout_floor_seconds / c, self.min_start_floor_wall_s)}

    def check(self) -> LiveSettings:
        if self.lease_seconds / self.compression < 1.0:
            raise ValueError(f"lease {self.lease_seconds} s / compression {self.compression} is under "
                             f"the API's 1 s minimum; raise --lease-seconds or lower --compression")
        if self.agents < 3 or self.minutes <= 0 or self.compression < 1:
            raise ValueError("need agents >= 3, minutes > 0, compression >= 1")
        return self


def compress_trace(trace: Trace, c: float) -> Trace:
    """The same trace with every duration divided by c (token counts untouched)."""
    agents = []
    for agent in trace.agents:
        runs = tuple(RunSpec(r.idle_before_s / c, r.not_before_s / c,
                             tuple(replace(x, provider_latency_s=x.provider_latency_s / c,
                                           first_chunk_s=x.first_chunk_s / c,
                                           tool_after_s=x.tool_after_s / c) for x in r.calls))
                     for r in agent.runs)
        agents.append(AgentScript(agent.agent_id, agent.priority_class, runs))
    return Trace(params=replace(trace.params, minutes=trace.params.minutes / c), agents=tuple(agents))


# -- the simulation side ------------------------------------------------------------------------

def to_sim_units(m: dict, c: float) -> dict:
    """Metrics of a compressed run in simulated time: durations times c, rates over c."""
    out = dict(m)
    for key in ("p50_latency_s", "p95_latency_s", "p99_latency_s", "max_wait_s", "slot_seconds_held",
                "slot_seconds_productive"):
        if out.get(key) is not None:
            out[key] = out[key] * c
    out["throughput_per_min"] = m["throughput_per_min"] / c
    if "per_class" in m:
        out["per_class"] = {k: to_sim_units(v, c) for k, v in m["per_class"].items()}
    return out


def run_sim(trace: Trace, s: LiveSettings, client_delay_s: float, report_delay_s: float = 0.0) -> dict:
    """The agentrm policy on the compressed trace with the compressed pool, in sim units;
    `report_delay_s` is the completion round trip the live run measured (0: left out)."""
    pool = s.pool()
    overrides = {k: pool[k] for k in ("lease_seconds", "boost_seconds", "start_timeout_floor_seconds")}
    metrics, _series = simulate("agentrm", compress_trace(trace, s.compression), pool["lanes"],
                                pool["rpm"], pool["tpm"], overrides,
                                {"client_delay_s": client_delay_s, "report_delay_s": report_delay_s})
    return to_sim_units(_as_logged(metrics), s.compression)


def _as_logged(metrics: dict) -> dict:
    """The sim's figures under the names and definitions this check computes from the log:
    lane waste as the share of lane time not in a successful call (the log knows when a turn
    was granted and completed, not when an attempt was in flight), 429s as a count."""
    return {**metrics, "lane_waste": metrics["unproductive_share"], "rate_limited": metrics["rate_limited_count"]}


def run_sim_uncompressed(trace: Trace, s: LiveSettings) -> dict:
    """For reference only: the same trace at full time scale, lease and boost uncompressed."""
    metrics, _series = simulate("agentrm", trace, s.lanes, s.rpm, s.tpm,
                                {"lease_seconds": s.lease_seconds, "boost_seconds": s.boost_seconds,
                                 "start_timeout_floor_seconds": s.start_timeout_floor_seconds})
    return _as_logged(metrics)


# -- a minimal GraphQL-over-HTTP client ----------------------------------------------------------

TURN_FIELDS = "id status lane grantedAt leaseExpiresAt finishedAt"
REQUEST = f"""mutation($est: Int!, $out: Int, $wait: Float!) {{ requestTurn(input:
  {{estimatedTokens: $est, maxOutputTokens: $out, waitSeconds: $wait, streams: true}}) {{ {TURN_FIELDS} }} }}"""
HEARTBEAT = f"mutation($id: ID!) {{ heartbeat(turnId: $id) {{ {TURN_FIELDS} }} }}"
COMPLETE = f"""mutation($id: ID!, $outcome: Outcome!, $p: Int, $c: Int, $retry: Float, $headers: JSON) {{
  completeTurn(input: {{turnId: $id, outcome: $outcome, promptTokens: $p, completionTokens: $c,
  retryAfterSeconds: $retry, rateLimitHeaders: $headers}}) {{ {TURN_FIELDS} }} }}"""
CANCEL = "mutation($id: ID!) { cancelTurn(turnId: $id) { id status } }"
TURN = "query($id: ID!) { turn(id: $id) { id status leaseExpiresAt } }"
CREATE_POOL = """mutation($name: String!, $lanes: Int!, $rpm: Int!, $tpm: Int!, $lease: Float!, $boost: Float,
  $floor: Float) {
  createPool(input: {name: $name, lanes: $lanes, rpm: $rpm, tpm: $tpm, leaseSeconds: $lease,
  boostSeconds: $boost, startTimeoutFloorSeconds: $floor}) { name lanes rpm tpm leaseSeconds } }"""
REGISTER = """mutation($name: String!, $pool: String!, $cls: PriorityClass!) {
  registerAgent(input: {name: $name, pool: $pool, priorityClass: $cls}) { token agent { id } } }"""
SCHEDULER = """query($pool: String!) { scheduler(pool: $pool) {
  lanes { turnId } levels { queued { turnId } } } }"""


class GraphQLFailure(Exception):
    def __init__(self, errors: list[dict]):
        super().__init__("; ".join(e.get("message", "?") for e in errors))
        self.code = (errors[0].get("extensions") or {}).get("code")


class Gql:
    """One principal's GraphQL connection (keep-alive HTTP)."""

    def __init__(self, endpoint: str, token: str):
        self.endpoint = endpoint
        # waitSeconds can hold a request open for the rest of the run.
        self.http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                      timeout=httpx.Timeout(330.0, connect=10.0))

    async def __call__(self, query: str, **variables) -> dict:
        response = await self.http.post(self.endpoint, json={"query": query, "variables": variables})
        body = response.json()
        if body.get("errors"):
            raise GraphQLFailure(body["errors"])
        return body["data"]

    async def close(self) -> None:
        await self.http.aclose()


def _instant(value: str | None) -> float | None:
    return None if value is None else datetime.fromisoformat(value).timestamp()


# -- the live clients ---------------------------------------------------------------------------

class Clock:
    """Wall time relative to the run's start t0; `end` is the run's length (compressed)."""

    def __init__(self, t0: float, end: float):
        self.t0, self.end = t0, end
        self.stopped = asyncio.Event()   # set at the end: calls in flight are abandoned

    def now(self) -> float:
        return time.time() - self.t0

    def over(self) -> bool:
        return self.now() >= self.end

    async def sleep_until(self, at: float) -> bool:
        """Sleep until `at` (relative); False when `at` is past the end of the run."""
        if at >= self.end:
            return False
        await asyncio.sleep(max(0.0, at - self.now()))
        return True


@dataclass
class Answer:
    kind: str                        # "ok" | "429" | "reaped" | "stopped"
    headers: dict = field(default_factory=dict)
    retry_after: float | None = None
    completion_tokens: int = 0


@dataclass
class ClientStats:
    grant_notice_s: list[float] = field(default_factory=list)  # TurnGranted.at -> client knows
    heartbeats: int = 0
    reaps_seen: int = 0
    rate_limited: int = 0
    late_completions: int = 0        # answered after the turn was already reaped
    stuck_agents: int = 0
    errors: list[str] = field(default_factory=list)


RATE_HEADER_PREFIXES = ("x-ratelimit-", "retry-after", "anthropic-ratelimit-")


class LiveAgent:
    """One agent of the trace as a real client: the client model of policies.AgentRM.

    requestTurn(waitSeconds) -> call the provider (streamed) -> heartbeat every lease/3,
    from the task that reads the stream, only after a chunk has arrived (a hung call sends
    none, so its lease lapses) -> completeTurn with the outcome, usage and the provider's
    rate-limit headers. A 429 is reported RATE_LIMITED and a new turn is requested at once
    (the scheduler is the only retry loop); a reaped turn's call is abandoned and a new turn
    requested. Tool, think and cron waits happen outside any turn."""

    def __init__(self, name: str, calls: list[dict], gql: Gql, provider: str, clock: Clock,
                 lease_s: float, stats: ClientStats):
        self.name, self.calls, self.gql, self.clock = name, calls, gql, clock
        self.provider, self.lease_s, self.stats = provider, lease_s, stats
        self.heartbeat_s = lease_s / 3.0
        self.poll_s = max(0.01, lease_s / 50.0)
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0))
        self.beats: set[asyncio.Task] = set()

    async def run(self) -> None:
        try:
            ready = 0.0
            for call in self.calls:
                # As the sim: a call is wanted when the previous one's tool time is over, the
                # first of a run also after think time or at its cron instant.
                if not await self.clock.sleep_until(max(ready + call["idle_before_s"], call["not_before_s"])):
                    return
                if not await self._serve(call):
                    return
                ready = self.clock.now() + call["tool_after_s"]
        finally:
            await asyncio.gather(*self.beats, return_exceptions=True)
            await self.http.aclose()

    async def _serve(self, call: dict) -> bool:
        """Turns until the call is answered; False when the agent can go no further."""
        attempts = 0
        while not self.clock.over():
            turn = await self._request(call)
            if turn is None:
                return False
            attempts += 1
            # Only the first attempt of a hanging call hangs (as sim.ProviderLink).
            answer = await self._attempt(turn, call, hang=call["hangs"] and attempts == 1)
            if answer.kind == "stopped":
                return False
            if answer.kind == "reaped":
                self.stats.reaps_seen += 1
                continue
            if await self._complete(turn["id"], call, answer):
                return True
        return False

    async def _request(self, call: dict) -> dict | None:
        wait = min(300.0, max(0.05, self.clock.end - self.clock.now() + 0.5))
        try:
            turn = (await self.gql(REQUEST, est=call["prompt_tokens"], out=call["max_output_tokens"],
                                   wait=wait))["requestTurn"]
        except GraphQLFailure as exc:
            if exc.code == "FORBIDDEN":       # quarantined: an operator must release it
                self.stats.stuck_agents += 1
                return None
            raise
        if turn["status"] == ev.GRANTED:
            self.stats.grant_notice_s.append(time.time() - _instant(turn["grantedAt"]))
            return turn
        if turn["status"] == ev.CANCELLED:
            self.stats.stuck_agents += 1
        return None                            # QUEUED at the end of the run: the sweep cancels it

    async def _attempt(self, turn: dict, call: dict, hang: bool) -> Answer:
        """One provider call under one turn, raced against the turn being reaped."""
        lease = {"until": _instant(turn["leaseExpiresAt"])}
        streaming = asyncio.create_task(self._stream(turn["id"], call, hang, lease))
        watching = asyncio.create_task(self._watch_reap(turn["id"], lease))
        stopping = asyncio.create_task(self.clock.stopped.wait())
        try:
            done, _ = await asyncio.wait({streaming, watching, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if streaming in done:
                return streaming.result()
            return Answer("reaped" if watching in done else "stopped")   # abandon the request
        finally:
            for task in (streaming, watching, stopping):
                task.cancel()
            await asyncio.gather(streaming, watching, stopping, return_exceptions=True)

    async def _stream(self, turn_id: str, call: dict, hang: bool, lease: dict) -> Answer:
        body = {"model": "fake", "prompt_tokens": call["prompt_tokens"], "max_tokens": call["max_output_tokens"],
                "fake": {"output_tokens": call["output_tokens"], "latency_s": call["provider_latency_s"],
                         "first_chunk_s": call.get("first_chunk_s", 0.0), "hang": hang}}
        async with self.http.stream("POST", f"{self.provider}/v1/chat/completions", json=body,
                                    headers={"x-client-request-id": turn_id}) as response:
            headers = {k: v for k, v in response.headers.items() if k.lower().startswith(RATE_HEADER_PREFIXES)}
            if response.status_code == 429:
                await response.aread()
                return Answer("429", headers, retry_after=float(response.headers.get("retry-after", 1)))
            return await self._read_stream(turn_id, response, headers, lease)

    async def _read_stream(self, turn_id: str, response, headers: dict, lease: dict) -> Answer:
        last_beat, usage = None, {}
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage") or usage
            # Heartbeat only on stream progress: at the first chunk (the turn was requested
            # with streams: true, so it must come before the start deadline), then every
            # lease/3. This is what lets a hung call lapse. Sent beside the stream (reading
            # must not wait for it) and never cut off mid-request.
            if last_beat is None or time.time() - last_beat >= self.heartbeat_s:
                last_beat = time.time()
                beat = asyncio.create_task(self._heartbeat(turn_id, lease))
                self.beats.add(beat)
                beat.add_done_callback(self.beats.discard)
        return Answer("ok", headers, completion_tokens=int(usage.get("completion_tokens", 0)))

    async def _heartbeat(self, turn_id: str, lease: dict) -> None:
        with contextlib.suppress(GraphQLFailure, httpx.HTTPError):   # a reaped turn refuses them
            turn = (await self.gql(HEARTBEAT, id=turn_id))["heartbeat"]
            lease["until"] = _instant(turn["leaseExpiresAt"]) or lease["until"]
            self.stats.heartbeats += 1

    async def _watch_reap(self, turn_id: str, lease: dict) -> None:
        """Return once the turn has been reaped. Sleeps until the lease expires (heartbeats
        move it), then polls the turn: only a call that stopped heartbeating gets here."""
        while True:
            await asyncio.sleep(max(self.poll_s, lease["until"] - time.time()))
            if time.time() < lease["until"]:
                continue
            turn = (await self.gql(TURN, id=turn_id))["turn"]
            if turn["status"] != ev.GRANTED:
                return
            lease["until"] = max(lease["until"], _instant(turn["leaseExpiresAt"]) or 0.0)

    async def _complete(self, turn_id: str, call: dict, answer: Answer) -> bool:
        """Report the answer; True when the call is done (an OK the service accepted)."""
        ok = answer.kind == "ok"
        if not ok:
            self.stats.rate_limited += 1
        try:
            await self.gql(COMPLETE, id=turn_id, outcome=ev.OK if ok else ev.RATE_LIMITED,
                           p=call["prompt_tokens"] if ok else 0, c=answer.completion_tokens if ok else 0,
                           retry=answer.retry_after, headers=answer.headers)
        except GraphQLFailure as exc:
            if exc.code != "CONFLICT":
                raise
            # Reaped while the answer was on its way: the sim ignores such an answer too.
            self.stats.late_completions += 1
            return False
        return ok


# -- the live run --------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def serve_api(database_url: str):
    """The real API in a process of its own, as `agentrm serve` runs it (uvicorn, one worker),
    on a free loopback port. Yields the GraphQL endpoint and an EventStore of the harness's
    own for reading the log afterwards. The service must not share a core's event loop with
    the clients: their CPU would be charged to the service's grant and completion paths,
    which the simulation takes as the client delays."""
    import subprocess
    import sys

    from app.config import child_environment
    from app.eventstore.store import EventStore, create_pool
    port = _free_port()
    env = child_environment(AGENTRM_RESOLVED_DATABASE_URL=database_url, AGENTRM_DEMO="0",
                            AGENTRM_OPERATOR_TOKEN=OPERATOR_TOKEN)
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app.api.main:app_from_env", "--factory", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning", "--timeout-graceful-shutdown", "5"], env=env)
    base = f"http://127.0.0.1:{port}"
    pg = None
    try:
        async with httpx.AsyncClient(timeout=2.0) as http:
            deadline = time.time() + 60.0
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the API process exited with {process.returncode}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{base}/healthz")).json().get("ok"):
                        break
                if time.time() > deadline:
                    raise RuntimeError("the API process did not start within 60 s")
                await asyncio.sleep(0.1)
        pg = await create_pool(database_url, min_size=1, max_size=2)
        yield f"{base}/graphql", EventStore(pg)
    finally:
        process.terminate()   # first: whatever fails below, the API process does not outlive us
        try:
            if pg is not None:
                await pg.close()
            await asyncio.to_thread(process.wait, 15)
        except subprocess.TimeoutExpired:
            pass              # killed below
        finally:
            if process.poll() is None:   # slow to stop, or we were cancelled while waiting
                process.kill()
                process.wait()


async def _create_pool(operator: Gql, name: str, s: LiveSettings) -> None:
    pool = s.pool()
    await operator(CREATE_POOL, name=name, lanes=pool["lanes"], rpm=pool["rpm"], tpm=pool["tpm"],
                   lease=pool["lease_seconds"], boost=pool["boost_seconds"],
                   floor=pool["start_timeout_floor_seconds"])


async def _register(operator: Gql, pool: str, trace: Trace) -> dict[str, str]:
    """Every agent of the trace, with its class; returns name -> agent token."""
    async def one(agent: AgentScript) -> tuple[str, str]:
        data = await operator(REGISTER, name=agent.agent_id, pool=pool, cls=agent.priority_class)
        return agent.agent_id, data["registerAgent"]["token"]
    pairs = []
    for i in range(0, len(trace.agents), 10):
        pairs += await asyncio.gather(*(one(a) for a in trace.agents[i:i + 10]))
    return dict(pairs)


async def _pool_created_at(store, pool: str) -> tuple[float, int]:
    first = (await store.read(0, 1, streams=[f"pool-{pool}"]))[0]
    return float(ev.PoolCreated.from_dict(first.data).at), first.position


def _aligned_start(created_at: float, boost_c: float, margin: float = 0.3) -> float:
    """t0 on a boost instant of the pool (created_at + k * period), so the live pool's boosts
    fall where the simulation's do (its pool is created at t = 0)."""
    k = math.ceil((time.time() + margin - created_at) / boost_c)
    return created_at + k * boost_c


async def _sweep(operator: Gql, pool: str, timeout: float = 15.0) -> int:
    """After the run: cancel every turn still queued or holding a lane, until none is left.
    Returns how many it cancelled (the clients were stopped mid-flight, as the sim stops)."""
    cancelled, deadline = 0, time.time() + timeout
    while time.time() < deadline:
        state = (await operator(SCHEDULER, pool=pool))["scheduler"]
        open_turns = {lane["turnId"] for lane in state["lanes"] if lane["turnId"]}
        open_turns |= {q["turnId"] for lvl in state["levels"] for q in lvl["queued"]}
        if not open_turns:
            return cancelled
        for turn_id in open_turns:
            with contextlib.suppress(GraphQLFailure):
                await operator(CANCEL, id=turn_id)
                cancelled += 1
        await asyncio.sleep(0.3)   # a request cut off at the end may still be in flight
    return cancelled


async def _stop_agents(clock: Clock, tasks: list[asyncio.Task], grace: float = 3.0) -> list:
    """Let the clients stop on their own (nothing new starts after the end, calls in flight
    are abandoned, turn waits end by then), so no request is cut off mid-body; cancel the
    rest after `grace` seconds."""
    clock.stopped.set()
    _done, pending = await asyncio.wait(tasks, timeout=grace)
    for task in pending:
        task.cancel()
    return await asyncio.gather(*tasks, return_exceptions=True)


async def live_run(endpoint: str, store, trace: Trace, s: LiveSettings, pool: str) -> dict:
    """Drive the compressed trace through the service; returns the raw material for metrics."""
    compressed = compress_trace(trace, s.compression)
    operator = Gql(endpoint, OPERATOR_TOKEN)
    provider = await FakeProvider(s.pool()["rpm"], s.pool()["tpm"],
                                  chunk_interval_s=s.pool()["lease_seconds"] / 12).start()
    clients: list[Gql] = []
    try:
        await _create_pool(operator, pool, s)
        tokens = await _register(operator, pool, compressed)
        created_at, first_position = await _pool_created_at(store, pool)
        t0 = _aligned_start(created_at, s.pool()["boost_seconds"])
        clock, stats = Clock(t0, compressed.duration_s), ClientStats()
        scripts = call_attempts(compressed)
        agents = []
        for name, token in tokens.items():
            clients.append(Gql(endpoint, token))
            agents.append(LiveAgent(name, scripts[name], clients[-1], provider.url, clock,
                                    s.pool()["lease_seconds"], stats))
        await asyncio.sleep(max(0.0, t0 - time.time()))
        cpu0 = time.process_time()
        tasks = [asyncio.create_task(a.run(), name=f"live-{a.name}") for a in agents]
        await asyncio.sleep(max(0.0, t0 + clock.end - time.time()))
        cpu_s, wall_s = time.process_time() - cpu0, time.time() - t0
        outcomes = await _stop_agents(clock, tasks)
        stats.errors = [repr(o) for o in outcomes if isinstance(o, Exception)
                        and not isinstance(o, asyncio.CancelledError)]
        swept = await _sweep(operator, pool)
        state_after = (await operator(SCHEDULER, pool=pool))["scheduler"]
        events = await read_pool_log(store, pool, first_position - 1)
    finally:
        await provider.stop()
        for client in clients:
            await client.close()
        await operator.close()
    return {"t0": t0, "end": t0 + clock.end, "created_at": created_at, "events": events,
            "provider": provider, "stats": stats, "swept": swept, "cpu_s": cpu_s, "wall_s": wall_s,
            "lanes_held_after_sweep": sum(1 for lane in state_after["lanes"] if lane["turnId"])}


# -- metrics from the event log -------------------------------------------------------------------

WANTED = (ev.TURN_QUEUED, ev.TURN_GRANTED, ev.LEASE_EXTENDED, ev.TURN_COMPLETED, ev.TURN_REAPED,
          ev.TURN_CANCELLED, ev.COMPLETION_REPORTED, ev.LEVELS_BOOSTED, ev.POOL_PAUSED)


async def read_pool_log(store, pool: str, after: int) -> list:
    """The pool's decisions (stream pool-<name>) and its agents' completion reports (turn
    streams, tagged with the pool), in log order."""
    events, cursor = [], after
    while True:
        batch = await store.read(cursor, 5000, types=WANTED)
        if not batch:
            return events
        cursor = batch[-1].position
        events += [e for e, typed in zip(batch, (ev.parse(e.type, e.data) for e in batch))
                   if e.stream == f"pool-{pool}" or getattr(typed, "pool", None) == pool]


def _typed(events: list) -> list[tuple[int, ev.Event]]:
    """The recorded events as (position, typed event)."""
    return [(e.position, ev.parse(e.type, e.data)) for e in events]


@dataclass
class TurnRow:
    """What the metrics read of a turn's history (turn_history), with the live check's names."""
    turn_id: str
    agent_id: str
    priority_class: str
    requested_at: float
    granted_at: float | None = None
    last_life_at: float | None = None   # grant or last lease extension
    finished_at: float | None = None
    end: str | None = None               # OK | RATE_LIMITED | ERROR | REAPED | CANCELLED
    reported_at: float | None = None     # when the service heard of the provider's answer

    @classmethod
    def of(cls, h: turn_history.TurnHistory) -> TurnRow:
        return cls(h.turn_id, h.agent_id, h.priority_class, float(h.requested_at), h.granted_at,
                   h.last_life_at, h.finished_at, h.end, h.report.at if h.report is not None else None)


def _fold_turns(events: list) -> dict[str, TurnRow]:
    # The log read here has the pool's decisions and completion reports, not the requests:
    # a turn's history starts at its TurnQueued.
    histories = turn_history.histories(_typed(events), start_at=(ev.TurnQueued,))
    return {turn_id: TurnRow.of(h) for turn_id, h in histories.items()}


@dataclass
class CallRow:
    """One logical call of the trace, rebuilt from the log: a chain of turns of one agent in
    which every turn but the last ended RATE_LIMITED, ERROR or REAPED (the client's retry)."""
    agent_id: str
    priority_class: str
    requested_at: float
    first_granted_at: float | None = None
    completed_at: float | None = None


def _chain_calls(turns: dict[str, TurnRow], end: float) -> list[CallRow]:
    by_agent: dict[str, list[TurnRow]] = {}
    for row in turns.values():
        by_agent.setdefault(row.agent_id, []).append(row)
    calls: list[CallRow] = []
    for rows in by_agent.values():
        current: CallRow | None = None
        for row in sorted(rows, key=lambda r: r.requested_at):
            if row.requested_at >= end:
                break
            if current is None:
                current = CallRow(row.agent_id, row.priority_class, row.requested_at)
                calls.append(current)
            if current.first_granted_at is None and row.granted_at is not None and row.granted_at < end:
                current.first_granted_at = row.granted_at
            if row.end in (ev.RATE_LIMITED, ev.ERROR, ev.REAPED):
                continue                      # the client asks a new turn for the same call
            if row.end == ev.OK and row.reported_at is not None and row.reported_at <= end:
                current.completed_at = row.reported_at
            current = None                    # answered, or still open / cancelled at the end
    return calls


def _lane_use(turns: dict[str, TurnRow], provider: FakeProvider, end: float) -> tuple[float, float]:
    """(lane-seconds held, seconds of successful provider calls inside them), clipped to the
    run. The productive part is the provider's own access log (admission to last byte of
    each answered call, by x-client-request-id = turn id): the event log knows when a lane
    was held, only the provider knows when it was working. As in the simulation
    (Policy.finish), a call still streaming at the end under a turn still held then has
    been productive from its admission to the end."""
    admitted = {e.request_id: e for e in provider.access_log if e.status == 200 and not e.hung}
    held = productive = 0.0
    for row in turns.values():
        if row.granted_at is None or row.granted_at >= end:
            continue
        stop = min(row.finished_at if row.finished_at is not None else end, end)
        held += max(0.0, stop - row.granted_at)
        entry = admitted.get(row.turn_id)
        if entry is None or entry.received_at >= end:
            continue
        if row.end == ev.OK and entry.finished_at is not None and entry.finished_at <= end:
            productive += entry.finished_at - entry.received_at
        elif (row.finished_at is None or row.finished_at > end) and (
                entry.finished_at is None or entry.finished_at > end):
            productive += end - entry.received_at
    return held, productive


def _holds_at_end(turns: dict[str, TurnRow], provider: FakeProvider, end: float, c: float) -> dict:
    hung = {e.request_id for e in provider.access_log if e.hung}
    holding = [r for r in turns.values() if r.granted_at is not None and r.granted_at < end
               and (r.finished_at is None or r.finished_at > end)]
    return {"lanes_held_at_end": len(holding),
            "hung_holding_at_end": sum(r.turn_id in hung for r in holding),
            # metrics.py: a slot held by a call silent for ZOMBIE_AFTER_S (simulated) at the end.
            "zombies": sum(end - (r.last_life_at or r.granted_at) >= ZOMBIE_AFTER_S / c for r in holding)}


def _latency_summary(calls: list[CallRow], t0: float, end: float) -> dict:
    lat = [(r.completed_at if r.completed_at is not None else end) - r.requested_at for r in calls]
    waits = [(r.first_granted_at if r.first_granted_at is not None else end) - r.requested_at for r in calls]
    done = sum(r.completed_at is not None for r in calls)
    return {"p50_latency_s": percentile(lat, 50), "p95_latency_s": percentile(lat, 95),
            "p99_latency_s": percentile(lat, 99), "throughput_per_min": done / ((end - t0) / 60.0),
            "max_wait_s": max(waits, default=0.0), "calls_requested": len(calls), "calls_completed": done}


def log_metrics(events: list, provider: FakeProvider, t0: float, end: float, c: float) -> dict:
    """metrics.summarize's definitions, computed from the event log of the window [t0, end]
    (compressed seconds; convert with to_sim_units). Differences, all small: a call counts
    as answered when the service heard of the answer (CompletionReported) rather than at the
    provider's last byte; max_wait runs to the first grant rather than the first send."""
    turns = _fold_turns(events)
    calls = _chain_calls(turns, end)
    held, productive = _lane_use(turns, provider, end)
    in_window = [e for _, e in _typed(events) if t0 <= (t0 if e.at is None else e.at) <= end]
    rate_limited = sum(isinstance(e, ev.TurnCompleted) and e.outcome == ev.RATE_LIMITED for e in in_window)
    attempts = sum(1 for e in provider.access_log if t0 <= e.received_at <= end)
    per_class = {cls: _latency_summary([r for r in calls if r.priority_class == cls], t0, end)
                 for cls in CLASSES if any(r.priority_class == cls for r in calls)}
    return {**_latency_summary(calls, t0, end),
            "lane_waste": 1.0 - productive / held if held > 0 else 0.0,
            **_holds_at_end(turns, provider, end, c),
            "rate_limited": rate_limited, "provider_attempts": attempts,
            "rate_limited_share": rate_limited / attempts if attempts else 0.0,
            "reaps": sum(isinstance(e, ev.TurnReaped) for e in in_window),
            "boosts": sum(isinstance(e, ev.LevelsBoosted) for e in in_window),
            "slot_seconds_held": held, "slot_seconds_productive": productive,
            "per_class": per_class, "events_read": len(events)}


def completion_path(events: list, provider: FakeProvider) -> dict:
    """Where a successful turn's lane time goes after the provider's last byte (wall s, means:
    lane waste is a sum): to the service hearing of it (CompletionReported) and to the
    scheduler deciding it (TurnCompleted). The simulation's client model has no such delay."""
    turns = _fold_turns(events)
    finished = {e.request_id: e.finished_at for e in provider.access_log if e.finished_at}
    report, decide = [], []
    for row in turns.values():
        if row.end == ev.OK and row.turn_id in finished and row.reported_at is not None:
            report.append(row.reported_at - finished[row.turn_id])
            decide.append(row.finished_at - row.reported_at)
    mean = lambda xs: statistics.fmean(xs) if xs else 0.0  # noqa: E731
    return {"answer_to_report_s": mean(report), "report_to_decision_s": mean(decide),
            "answer_to_decision_s": mean(report) + mean(decide)}


def grant_to_send(events: list, provider: FakeProvider) -> list[float]:
    """Per granted attempt: TurnGranted.at -> the provider received the call (wall s). The
    live counterpart of the sim client's `client_delay_s`."""
    received = {e.request_id: e.received_at for e in provider.access_log}
    return [received[e.turn_id] - e.at for _, e in _typed(events)
            if isinstance(e, ev.TurnGranted) and e.turn_id in received]


# -- comparison and report ---------------------------------------------------------------------

COMPARED = ("p50_latency_s", "p95_latency_s", "throughput_per_min", "lane_waste")
INFO = ("p99_latency_s", "calls_requested", "calls_completed", "rate_limited", "reaps", "zombies",
        "hung_holding_at_end", "max_wait_s", "slot_seconds_held", "slot_seconds_productive")


def _compare_one(key: str, a, b) -> dict:
    rel = abs(a - b) / abs(b) if a is not None and b not in (None, 0) else None
    diff = None if a is None or b is None else a - b
    if key == "lane_waste":
        return {"sim": b, "abs_diff": diff, "rel_diff": rel,
                "within": diff is not None and abs(diff) <= LANE_WASTE_ABS_TOLERANCE}
    return {"sim": b, "abs_diff": diff, "rel_diff": rel, "within": rel is not None and rel <= TOLERANCE}


def compare(live: dict, sim: dict, sim_report_path: dict | None = None) -> dict:
    """Per compared metric: live, sim, the difference and whether it is within tolerance.
    p50, p95 and throughput: relative difference |live - sim| / sim <= 15%. Lane waste is a
    fraction near 0 whose relative error is dominated by a handful of lane-seconds, so it is
    judged on the absolute difference (<= 2 points), with the relative one shown too.
    The verdict `within` is against `sim_report_path` when given: the sim with BOTH client
    delays the live run measured (grant -> provider, and provider last byte -> decided
    completion), i.e. the same client the live run had. The sim without the completion path
    is kept beside it ("without_report_path") to show how much that path matters."""
    reference = sim_report_path if sim_report_path is not None else sim
    rows = {}
    for key in COMPARED:
        row = {"live": live.get(key), **_compare_one(key, live.get(key), reference.get(key)),
               "criterion": (f"|diff| <= {LANE_WASTE_ABS_TOLERANCE:.2f}" if key == "lane_waste"
                             else f"rel <= {TOLERANCE:.0%}")}
        if sim_report_path is not None:
            row["without_report_path"] = _compare_one(key, live.get(key), sim.get(key))
        rows[key] = row
    return rows


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def _rel(row: dict) -> str:
    return "-" if row["rel_diff"] is None else f"{row['rel_diff']:.1%}"


def _comparison_table(cmp_: dict) -> list[str]:
    lines = ["| metric | live (event log) | sim (agentrm, measured client delays) | diff | rel diff | criterion "
             "| within | sim without completion path | rel diff | within |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for key, row in cmp_.items():
        extra = row.get("without_report_path") or {"sim": None, "rel_diff": None, "within": None}
        lines.append(f"| {key} | {_fmt(row['live'])} | {_fmt(row['sim'])} | {_fmt(row['abs_diff'])} "
                     f"| {_rel(row)} | {row['criterion']} | {_fmt(row['within'])} "
                     f"| {_fmt(extra['sim'])} | {_rel(extra)} | {_fmt(extra['within'])} |")
    return lines


def to_markdown(result: dict) -> str:
    s, live, sim, full = result["settings"], result["live"], result["sim"], result["sim_uncompressed"]
    d = result["diagnostics"]
    lines = [
        "# Live check: the real service against the simulation", "",
        f"Seed {s['seed']}, {s['agents']} agents, {s['minutes']:g} simulated minutes compressed "
        f"{s['compression']:g}x into {s['wall_seconds']:.0f} s of wall time; pool {s['lanes']} lanes, "
        f"{s['rpm']} rpm, {s['tpm']} tpm, lease {s['lease_seconds']:g} s, boost {s['boost_seconds']:g} s "
        f"(simulated units; the live pool runs them divided/multiplied by {s['compression']:g}); hang rate "
        f"{s['hang_rate']}. All figures in simulated time. The whole check took {result['elapsed_s']:.0f} s.", "",
        "Live: metrics.py's definitions computed from the event log (plus the fake provider's access "
        "log for the productive part of lane time). Sim (the verdict): the `agentrm` policy on the "
        "identical compressed trace and pool, with the two client delays the live run measured: grant -> "
        f"provider receive ({d['sim_client_delay_s'] * 1000:.1f} ms wall, `client_delay_s`) and provider "
        f"last byte -> TurnCompleted ({d['answer_to_decision_s'] * 1000:.1f} ms wall, `report_delay_s`). "
        "The last columns show the sim without the second delay.", "",
        *_comparison_table(result["comparison"]), "",
        "| also measured | live | sim | sim, uncompressed (reference) |", "|---|---|---|---|"]
    for key in INFO:
        lines.append(f"| {key} | {_fmt(live.get(key))} | {_fmt(sim.get(key))} | {_fmt(full.get(key))} |")
    lines += ["", f"Completion path (wall, mean): answer -> CompletionReported "
              f"{d['answer_to_report_s'] * 1000:.1f} ms, -> TurnCompleted {d['report_to_decision_s'] * 1000:.1f} ms. "
              f"Grant notice p50 {_fmt(d['grant_notice_p50_ms'])} ms. Client process CPU "
              f"{d['cpu_share_of_wall']:.0%} of one core. Provider: {d['provider']}. Clients: "
              f"{d['heartbeats']} heartbeats, {d['reaps_seen']} reaps seen, {d['late_completions']} late "
              f"completions, {len(d['client_errors'])} errors. After the run {d['swept']} open turns were "
              f"cancelled; {d['lanes_held_after_sweep']} lanes stayed held."]
    return "\n".join(lines) + "\n"


# -- entry points -----------------------------------------------------------------------------

def _diagnostics(raw: dict, client_delay: float, path: dict) -> dict:
    stats: ClientStats = raw["stats"]
    notice = sorted(stats.grant_notice_s)
    return {"sim_client_delay_s": client_delay, **path,
            "cpu_share_of_wall": raw["cpu_s"] / max(raw["wall_s"], 1e-9),
            "grant_notice_p50_ms": notice[len(notice) // 2] * 1000 if notice else None,
            "provider": raw["provider"].stats(), "heartbeats": stats.heartbeats,
            "reaps_seen": stats.reaps_seen, "late_completions": stats.late_completions,
            "stuck_agents": stats.stuck_agents, "client_errors": stats.errors[:10],
            "swept": raw["swept"], "lanes_held_after_sweep": raw["lanes_held_after_sweep"]}


def _write(out_dir: str | Path, result: dict) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "live_check.md").write_text(to_markdown(result))
    (out / "live_check.json").write_text(json.dumps(result, sort_keys=True, default=str, indent=1))


async def run_async(database_url: str, out_dir: str | Path | None = None, **kwargs) -> dict:
    """The live check against a migrated database (the API is served in its own process)."""
    s = LiveSettings(**kwargs).resolved().check()
    trace = generate(WorkloadParams(agents=s.agents, minutes=s.minutes, seed=s.seed, hang_rate=s.hang_rate))
    pool = f"live_{s.seed}_{int(time.time() * 1000) % 10**9}"
    started = time.perf_counter()
    async with serve_api(database_url) as (endpoint, store):
        raw = await live_run(endpoint, store, trace, s, pool)
    live = to_sim_units(log_metrics(raw["events"], raw["provider"], raw["t0"], raw["end"], s.compression),
                        s.compression)
    delays = grant_to_send(raw["events"], raw["provider"])
    client_delay = statistics.fmean(delays) if delays else 0.05
    path = completion_path(raw["events"], raw["provider"])
    sim = run_sim(trace, s, client_delay)
    with_path = run_sim(trace, s, client_delay, path["answer_to_decision_s"])
    result = {
        "settings": {**asdict(s), "wall_seconds": s.wall_seconds, "compressed_pool": s.pool(), "pool": pool,
                     "calls_in_trace": trace.call_count()},
        "live": live, "sim": sim, "sim_with_report_path": with_path,
        "sim_uncompressed": run_sim_uncompressed(trace, s),
        "comparison": compare(live, sim, with_path),
        "diagnostics": _diagnostics(raw, client_delay, path),
        "elapsed_s": time.perf_counter() - started,
    }
    result["all_within"] = all(row["within"] for row in result["comparison"].values())
    if out_dir is not None:
        _write(out_dir, result)
    return result


def _own_database() -> str:
    """A database of its own (`agentrm_live`), recreated and migrated, as `bench system` does."""
    from app.bootstrap import database_url
    from app.db.embedded import ensure_database
    from app.db.migrate import upgrade
    base = database_url()
    ensure_database(base.rsplit("/", 1)[0] + "/postgres", "agentrm_live", recreate=True)
    url = base.rsplit("/", 1)[0] + "/agentrm_live"
    upgrade(url)
    return url


def run(out_dir: str | Path | None = None, url: str | None = None, **kwargs) -> dict:
    """Run the live check. `url` is a migrated database to use (default: its own database
    `agentrm_live` on `app.bootstrap.database_url()`); kwargs are LiveSettings fields."""
    return asyncio.run(run_async(url or _own_database(), out_dir, **kwargs))


def _parser() -> argparse.ArgumentParser:
    d = LiveSettings()
    p = argparse.ArgumentParser(prog="agentrm bench live", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", type=int, default=d.agents)
    p.add_argument("--minutes", type=float, default=d.minutes, help="simulated minutes")
    p.add_argument("--compression", type=float, default=d.compression)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--seeds", help="several seeds, e.g. 1-5 or 1,3,11-15 (instead of --seed): "
                                   "writes live_check_seeds.md with every run and the spread")
    p.add_argument("--repeat", type=int, default=1, help="runs per seed")
    p.add_argument("--hang-rate", type=float, default=d.hang_rate)
    p.add_argument("--lease-seconds", type=float, default=d.lease_seconds, help="simulated seconds")
    p.add_argument("--out", default="bench/results", help="write live_check.md and .json here")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from . import live_seeds
    try:
        LiveSettings(agents=args.agents, minutes=args.minutes, compression=args.compression,
                     lease_seconds=args.lease_seconds).check()
        seeds = live_seeds.parse_seeds(args.seeds) if args.seeds is not None else [args.seed]
        if args.repeat < 1:
            raise ValueError("--repeat must be at least 1")
    except ValueError as exc:
        print(exc)
        return 2
    kwargs = dict(agents=args.agents, minutes=args.minutes, compression=args.compression,
                  hang_rate=args.hang_rate, lease_seconds=args.lease_seconds)
    if args.seeds is None and args.repeat == 1:
        result = run(args.out, seed=args.seed, **kwargs)
        print(json.dumps(result, sort_keys=True, default=str) if args.json else to_markdown(result))
        return 0
    database = _own_database()

    async def one(seed: int) -> dict:
        return await run_async(database, None, seed=seed, **kwargs)

    summary = live_seeds.summarize(asyncio.run(live_seeds.run_seeds(one, seeds, args.repeat)))
    summary["settings"] = {**kwargs, "seeds": seeds, "repeat": args.repeat}
    live_seeds.write(args.out, "live_check", "Live check", summary)
    print(json.dumps(summary, sort_keys=True, default=str) if args.json
          else live_seeds.to_markdown("Live check", summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

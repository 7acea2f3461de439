"""`agentrm bench peers --workloads faults,priority`: what each gateway does when the provider
misbehaves, and whose calls go first when interactive and batch agents share one limit.

Both workloads were fixed before any result was seen. Every peer gets fake providers of its
own (so each access log is that peer's alone) and the peers of a run go at the same time
(the workloads are mostly waiting; the machine's load is recorded).

faults (one run; the fault calls all start together, 2 s after a warm-up):
- warm-up: 10 streamed and 10 whole normal calls, 4 at a time (AgentRM learns its first-chunk
  and whole-answer deadlines from 8 samples; the others learn nothing).
- normal: 2 clients call in a loop for 40 s (streamed and not in turn; first chunk 0.2 s,
  answer 1 s).
- hang: 2 streamed and 2 whole calls the provider accepts and never answers.
- stall: 2 streams that send chunks for 2 s, then nothing, ever.
- slow (alive; must not be cut): 2 whole calls answered after 45 s, 2 streams whose first
  chunk comes after 20 s (then 2 s of chunks).
- outage: a second provider answers 503 to every call for the first 5 s of the phase; 4 whole
  calls at 0, 1, 2 and 3 s and 2 streams at 0.5 and 2.5 s.
Each call is its own caller (for AgentRM its own agent: one agent's slowness backs off only
its own deadline), with the client's own timeout of 130 s over the whole call (an SDK's is
600 s; 130 s bounds the run and still shows a 120 s limit).
Reported per peer: calls completed; live calls cut (slow or normal calls that did not
complete); how long a hung or stalled call held its client, from the call's start (p50,
max; 130 means the client gave up); provider calls per user call (each retry bills).

priority (45 s, two contention kinds):
- rate: the provider allows 60 requests a minute (token bucket); lanes are not short.
- lanes: the provider serves at most 2 calls at a time (429, retry-after 1 beyond that).
8 batch clients call in a closed loop; 2 interactive clients call, then think 2 s. Every call
is whole, 1 s at the provider. A client that gets a 429 waits its retry-after (at least
1 s, at most 10 s) and calls again: its user call goes on. The interactive wait is the user
call's end-to-end time minus the provider's own 1 s (what a user waits beyond the model);
a call still waiting at the end counts with its wait so far.
Each gateway holds the limit as its docs say: LiteLLM `rpm` (rate) or `max_parallel_requests`
(lanes) on the deployment, usage-based-routing-v2, the scheduler's `polling_interval`, and
`priority` 0 (interactive) or 100 (batch) in the request body; Portkey has no priority, only
its retry on 429; AgentRM a pool with rpm 60 or 2 lanes, agents registered INTERACTIVE or
BATCH; direct is the clients alone.
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
from dataclasses import dataclass
from pathlib import Path

import httpx

from . import peers as peerlib
from .fake_provider import FakeProvider
from .peers_bench import EXTRA_WORKLOADS, ExtraWorkload, Peer, Route, WorkloadRun, _fmt, _spread, spawn_agentrm
from .processes import stop_process
from .system_bench import pct

BIG = 10_000_000
CLIENT_TIMEOUT_S = 130.0
NORMAL = {"first_chunk_s": 0.2, "latency_s": 1.0, "output_tokens": 16}
NORMAL_SECONDS = 40.0
OUTAGE_S = 5.0
LIVE_KINDS = ("normal", "slow")
HELD_KINDS = ("hang", "stall")


@dataclass(frozen=True)
class FaultCall:
    kind: str
    stream: bool
    at_s: float
    fake: dict
    provider: str = "faults"

    @property
    def tag(self) -> str:
        return f"{self.kind}-{'stream' if self.stream else 'whole'}"


FAULT_CALLS: tuple[FaultCall, ...] = (
    *(FaultCall("hang", s, at, {"fault": "hang"}) for s in (True, False) for at in (0.0, 1.0)),
    *(FaultCall("stall", True, at, {"first_chunk_s": 0.2, "latency_s": 60.0, "fault": "stall",
                                    "stall_after_s": 2.0}) for at in (0.0, 1.0)),
    *(FaultCall("slow", False, at, {"latency_s": 45.0, "output_tokens": 16}) for at in (0.0, 1.0)),
    *(FaultCall("slow", True, at, {"first_chunk_s": 20.0, "latency_s": 22.0, "output_tokens": 16})
      for at in (0.0, 1.0)),
    *(FaultCall("outage", False, at, NORMAL, "outage") for at in (0.0, 1.0, 2.0, 3.0)),
    *(FaultCall("outage", True, at, NORMAL, "outage") for at in (0.5, 2.5)),
)
WARMUP_CALLS = 10            # streamed, and as many whole
NORMAL_CLIENTS = 2
FAULT_AGENTS = len(FAULT_CALLS) + NORMAL_CLIENTS + 4

PRIORITY_SECONDS = 45.0
PRIORITY_RPM = 60
PRIORITY_LANES = 2
PRIORITY_CALL_S = 1.0
BATCH_CLIENTS = 8
INTERACTIVE_CLIENTS = 2
THINK_S = 2.0
MAX_RETRY_WAIT_S = 10.0
LITELLM_PRIORITY = {"interactive": 0, "batch": 100}
CONTENTIONS = ("rate", "lanes")


# -- one call ------------------------------------------------------------------------------------
def _body(route: Route, stream: bool, fake: dict, tag: str, klass: str | None = None) -> dict:
    body = {"model": route.model, "stream": stream, "max_tokens": 16,
            "messages": [{"role": "user", "content": "Answer the benchmark. FAKE:" + json.dumps({**fake, "tag": tag})}]}
    if klass is not None and klass in route.extra:
        body.update(route.extra[klass])
    return body


async def call_once(http: httpx.AsyncClient, route: Route, caller: int, stream: bool, fake: dict, tag: str,
                    klass: str | None = None) -> tuple[str, float]:
    """One call, within the client's own timeout: (outcome, retry-after). The outcome is "ok"
    (a whole answer with choices, or a stream that reached [DONE]), the status code, "cut"
    (a stream that ended without [DONE]), "client_timeout" or the exception's name."""
    url = route.base + "/chat/completions"
    body, headers = _body(route, stream, fake, tag, klass), route.for_client(caller)

    async def go() -> tuple[str, float]:
        if not stream:
            r = await http.post(url, json=body, headers=headers)
            if r.status_code != 200:
                return str(r.status_code), _retry_after(r)
            try:
                return ("ok" if r.json().get("choices") else "no_choices"), 0.0
            except ValueError:
                return "bad_json", 0.0
        async with http.stream("POST", url, json=body, headers=headers) as r:
            if r.status_code != 200:
                await r.aread()
                return str(r.status_code), _retry_after(r)
            async for line in r.aiter_lines():
                if line.strip() == "data: [DONE]":
                    return "ok", 0.0
        return "cut", 0.0
    try:
        return await asyncio.wait_for(go(), CLIENT_TIMEOUT_S)
    except TimeoutError:
        return "client_timeout", 0.0
    except httpx.HTTPError as exc:
        return type(exc).__name__, 0.0


def _retry_after(r: httpx.Response) -> float:
    try:
        return float(r.headers.get("retry-after", "0"))
    except ValueError:
        return 0.0


def _client(n: int) -> httpx.AsyncClient:
    # The whole-call limit is call_once's; httpx's own read timeout must not cut first.
    return httpx.AsyncClient(timeout=httpx.Timeout(CLIENT_TIMEOUT_S + 30), limits=httpx.Limits(
        max_connections=n + 4, max_keepalive_connections=n + 4))


# -- faults ---------------------------------------------------------------------------------------
async def faults_phase(peer: Peer, route: Route, outage_route: Route, provider: FakeProvider,
                       outage: FakeProvider) -> dict:
    provider.reset()
    outage.reset()
    outage.outages = ()
    calls: list[dict] = []
    async with _client(FAULT_AGENTS + 8) as http:
        gate = asyncio.Semaphore(4)

        async def warm(i: int, stream: bool) -> None:
            async with gate:
                await call_once(http, route, i % 4, stream, NORMAL, "warmup")
        await asyncio.gather(*(warm(i, s) for i in range(WARMUP_CALLS) for s in (True, False)))
        await asyncio.sleep(2.0)
        start = time.monotonic()
        outage.outage_origin, outage.outages = time.time(), ((0.0, OUTAGE_S),)

        async def one(k: int, call: FaultCall) -> None:
            await asyncio.sleep(call.at_s)
            t0 = time.monotonic()
            target = outage_route if call.provider == "outage" else route
            outcome, _ = await call_once(http, target, 4 + NORMAL_CLIENTS + k, call.stream, call.fake, call.tag)
            calls.append({"kind": call.kind, "stream": call.stream, "tag": call.tag, "outcome": outcome,
                          "held_s": time.monotonic() - t0})

        async def normal(c: int) -> None:
            n = 0
            while time.monotonic() - start < NORMAL_SECONDS:
                stream = n % 2 == 0
                n += 1
                t0 = time.monotonic()
                outcome, _ = await call_once(http, route, 4 + c, stream, NORMAL, "normal")
                calls.append({"kind": "normal", "stream": stream, "tag": "normal", "outcome": outcome,
                              "held_s": time.monotonic() - t0})
        load = os.getloadavg()[0]
        await asyncio.gather(*(one(k, c) for k, c in enumerate(FAULT_CALLS)),
                             *(normal(c) for c in range(NORMAL_CLIENTS)))
        elapsed = time.monotonic() - start
    provider_calls: dict[str, int] = {}
    for entry in [*provider.access_log, *outage.access_log]:
        if entry.tag != "warmup":
            provider_calls[entry.tag or "?"] = provider_calls.get(entry.tag or "?", 0) + 1
    return {"peer": peer.name, "calls": calls, "provider_calls": provider_calls, "seconds": elapsed,
            "load_average": load}


def fault_row(run: dict) -> dict:
    """The figures of one peer's run."""
    calls = run["calls"]

    def held(kind: str, stream: bool | None = None) -> list[float]:
        return [c["held_s"] for c in calls if c["kind"] == kind and (stream is None or c["stream"] == stream)]
    user_calls = len(calls)
    provider_calls = sum(run["provider_calls"].values())
    outage_calls = [c for c in calls if c["kind"] == "outage"]
    return {
        "peer": run["peer"],
        "user_calls": user_calls,
        "completed": sum(c["outcome"] == "ok" for c in calls),
        "live_calls": sum(c["kind"] in LIVE_KINDS for c in calls),
        "live_cut": sum(c["kind"] in LIVE_KINDS and c["outcome"] != "ok" for c in calls),
        "slow_cut": sum(c["kind"] == "slow" and c["outcome"] != "ok" for c in calls),
        "outage_completed": sum(c["outcome"] == "ok" for c in outage_calls),
        "outage_calls": len(outage_calls),
        "hang_stream_held_s": _stats(held("hang", True)),
        "hang_whole_held_s": _stats(held("hang", False)),
        "stall_held_s": _stats(held("stall")),
        "provider_calls": provider_calls,
        "provider_per_user_call": provider_calls / user_calls if user_calls else None,
        "outage_provider_per_user_call": (sum(n for t, n in run["provider_calls"].items() if t.startswith("outage"))
                                          / len(outage_calls)) if outage_calls else None,
        "outcomes": _outcomes(calls),
    }


def _stats(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"p50": statistics.median(values), "max": max(values)}


def _outcomes(calls: list[dict]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for c in calls:
        by = out.setdefault(c["tag"], {})
        by[c["outcome"]] = by.get(c["outcome"], 0) + 1
    return out


# -- priority -------------------------------------------------------------------------------------
async def priority_phase(peer: Peer, contention: str, routes: dict[str, Route], provider: FakeProvider) -> dict:
    provider.reset()
    waits: dict[str, list[float]] = {"interactive": [], "batch": []}
    open_calls: dict[int, tuple[str, float]] = {}     # client -> (class, start) of its open user call
    seen: dict[str, int] = {}
    fake = {"latency_s": PRIORITY_CALL_S, "output_tokens": 16}
    load = os.getloadavg()[0]
    async with _client(BATCH_CLIENTS + INTERACTIVE_CLIENTS) as http:
        stop_at = time.monotonic() + PRIORITY_SECONDS

        async def client(klass: str, i: int) -> None:
            route = routes[klass]
            while time.monotonic() < stop_at:
                t0 = time.monotonic()
                open_calls[i] = (klass, t0)
                while True:   # one user call: the client's retries after 429 are part of it
                    outcome, wait = await call_once(http, route, i, False, fake, klass, klass)
                    seen[outcome] = seen.get(outcome, 0) + 1
                    if outcome == "429" and time.monotonic() < stop_at:
                        await asyncio.sleep(min(max(wait, 1.0), MAX_RETRY_WAIT_S))
                        continue
                    break
                del open_calls[i]
                if outcome == "ok":
                    waits[klass].append(time.monotonic() - t0 - PRIORITY_CALL_S)
                else:
                    await asyncio.sleep(1.0)
                if klass == "interactive":
                    await asyncio.sleep(THINK_S)
        tasks = [asyncio.create_task(client("batch", i)) for i in range(BATCH_CLIENTS)]
        tasks += [asyncio.create_task(client("interactive", BATCH_CLIENTS + i)) for i in range(INTERACTIVE_CLIENTS)]
        _done, pending = await asyncio.wait(tasks, timeout=PRIORITY_SECONDS)
        # A call still waiting at the end has waited at least this long: counted, or the
        # percentile would only see the calls that got through.
        now = time.monotonic()
        left = {"interactive": 0, "batch": 0}
        for klass, t0 in open_calls.values():
            left[klass] += 1
            waits[klass].append(max(0.0, now - t0 - PRIORITY_CALL_S))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    stats = provider.stats()
    return {"peer": peer.name, "contention": contention, "load_average": load,
            "interactive_calls": len(waits["interactive"]) - left["interactive"],
            "batch_calls": len(waits["batch"]) - left["batch"],
            "interactive_p50_wait_s": pct(waits["interactive"], 50) if waits["interactive"] else None,
            "interactive_p95_wait_s": pct(waits["interactive"], 95) if waits["interactive"] else None,
            "batch_p95_wait_s": pct(waits["batch"], 95) if waits["batch"] else None,
            "unfinished_at_end": left, "outcomes": seen,
            "interactive_waits_s": [round(w, 3) for w in waits["interactive"]], "provider_429": stats["rate_limited"],
            "provider_admitted": stats["admitted"]}


# -- the peers ------------------------------------------------------------------------------------
@dataclass
class Providers:
    """The fake providers of one peer: faults, outage, and one per priority contention."""
    faults: FakeProvider
    outage: FakeProvider
    priority: dict[str, FakeProvider]

    @classmethod
    async def start(cls) -> Providers:
        faults = await FakeProvider(BIG, BIG * 100, honour_stream=True, fake_in_messages=True,
                                    defaults=NORMAL).start()
        outage = await FakeProvider(BIG, BIG * 100, honour_stream=True, fake_in_messages=True, defaults=NORMAL,
                                    outage_status=503).start()
        priority = {"rate": await FakeProvider(PRIORITY_RPM, BIG * 100, honour_stream=True,
                                               fake_in_messages=True).start(),
                    "lanes": await FakeProvider(BIG, BIG * 100, honour_stream=True, fake_in_messages=True,
                                                max_concurrent=PRIORITY_LANES).start()}
        return cls(faults, outage, priority)

    async def stop(self) -> None:
        for p in (self.faults, self.outage, *self.priority.values()):
            await p.stop()


LITELLM_FAULT_DOCS = {
    "litellm_settings.request_timeout: 600": "https://docs.litellm.ai/docs/proxy/prod (the production "
    "config: request_timeout 600 s) and https://docs.litellm.ai/docs/proxy/reliability",
    "router_settings.num_retries: 3": "https://docs.litellm.ai/docs/proxy/reliability (its example: "
    "num_retries 3; retries on 429, 5xx, timeouts, with backoff)",
    "router_settings.routing_strategy: simple-shuffle": "https://docs.litellm.ai/docs/proxy/load_balancing "
    "(simple-shuffle, recommended)",
}
LITELLM_PRIORITY_DOCS = {
    "request body priority (0 interactive, 100 batch)": "https://docs.litellm.ai/docs/scheduler (LiteLLM "
    "Proxy: add priority to the request; lower is better)",
    "router_settings.polling_interval: 0.03, routing_strategy: usage-based-routing-v2": "https://docs.litellm.ai/"
    "docs/scheduler (its quick start: rpm on the deployment, usage-based-routing-v2, polling_interval 0.03)",
    "model_list[].litellm_params.rpm (rate) / max_parallel_requests (lanes)": "https://docs.litellm.ai/docs/"
    "proxy/load_balancing (rpm) and https://docs.litellm.ai/docs/routing (max_parallel_requests per deployment)",
    "num_retries: 0": "as the rate-limit workload: the client's own retry after 429 counts for every peer",
    "source note": "router.py _wait_for_scheduler_turn: a request waits in the priority queue only while the "
    "model group has no healthy (not cooling-down) deployment; scheduler.py poll() returns True at once "
    "otherwise, and cooldown_handlers.py does not cool down a single-deployment group on a 429",
}


def _litellm_faults_config(faults_url: str, outage_url: str) -> dict:
    models = []
    for name, url in (("faults", faults_url), ("outage", outage_url)):
        models.append({"model_name": name, "litellm_params": {"model": f"openai/{peerlib.MODEL}",
                                                              "api_base": f"{url}/v1", "api_key": "sk-fake"}})
    return {"model_list": models,
            "router_settings": {"routing_strategy": "simple-shuffle", "num_retries": 3},
            "litellm_settings": {"request_timeout": 600, "num_retries": 3},
            "general_settings": {"master_key": "sk-bench-master"}}


def _litellm_priority_config(urls: dict[str, str]) -> dict:
    models = []
    for contention, url in urls.items():
        params: dict = {"model": f"openai/{peerlib.MODEL}", "api_base": f"{url}/v1", "api_key": "sk-fake"}
        if contention == "rate":
            params["rpm"] = PRIORITY_RPM
        else:
            params["max_parallel_requests"] = PRIORITY_LANES
        models.append({"model_name": f"priority-{contention}", "litellm_params": params})
    return {"model_list": models,
            "router_settings": {"routing_strategy": "usage-based-routing-v2", "polling_interval": 0.03,
                                "num_retries": 0},
            "litellm_settings": {"num_retries": 0, "request_timeout": 600},
            "general_settings": {"master_key": "sk-bench-master"}}


def start_litellm(work: Path, install: bool, providers: Providers) -> Peer:
    peer = Peer("litellm")
    faults = peerlib.start_litellm("litellm-faults", _litellm_faults_config(providers.faults.url,
                                                                            providers.outage.url), install, work)
    peer.stoppers.append(faults.stop)
    try:
        prio = peerlib.start_litellm("litellm-priority", _litellm_priority_config(
            {k: p.url for k, p in providers.priority.items()}), install, work)
    except BaseException:
        peer.stop()
        raise
    peer.stoppers.append(prio.stop)
    peer.version = faults.version
    peer.routes["faults"] = Route(faults.base, "faults", [faults.headers])
    peer.routes["outage"] = Route(faults.base, "outage", [faults.headers])
    for contention in providers.priority:
        for klass, value in LITELLM_PRIORITY.items():
            peer.routes[f"{contention}/{klass}"] = Route(prio.base, f"priority-{contention}", [prio.headers],
                                                         {klass: {"priority": value}})
    peer.config = {"faults instance": faults.config["file"], "priority instance": prio.config["file"],
                   "docs": {**LITELLM_FAULT_DOCS, **LITELLM_PRIORITY_DOCS, **peerlib.LITELLM_DOCS}}
    return peer


# The Portkey gateway's own sample config (src/public/index.html of 1.15.2, "Retries & timeouts"):
# {"retry": {"attempts": 3, "on_status_codes": [429, 502, 503, 504]}, "request_timeout": 10000}.
# Its docs give no other production value; request_timeout bounds the time to the response's
# headers only (retryHandler.ts fetchWithTimeout), so a stream that began is never cut.
PORTKEY_FAULT_CONFIG = {"retry": {"attempts": 3, "on_status_codes": [429, 502, 503, 504]}, "request_timeout": 10000}
PORTKEY_FAULT_DOCS = {
    "retry: {attempts: 3, on_status_codes: [429, 502, 503, 504]}": "https://portkey.ai/docs/product/ai-gateway/"
    "automatic-retries (exponential backoff) and the gateway's sample config in src/public/index.html",
    "request_timeout: 10000": "https://portkey.ai/docs/product/ai-gateway/request-timeouts (milliseconds; "
    "the value of the gateway's sample config); answers 408, which is not retried here",
    "priority": "none: the open-source gateway has no priority or queue; retry on 429 only "
    "(attempts 3, as the rate-limit workload)",
}


def _portkey_headers(url: str, extra: dict) -> dict:
    return {"x-portkey-config": json.dumps({"provider": "openai", "custom_host": f"{url}/v1",
                                            "api_key": "sk-fake", **extra})}


def start_portkey(work: Path, install: bool, providers: Providers) -> Peer:
    target = peerlib.start_portkey(install, work)
    peer = Peer("portkey", version=target.version, stoppers=[target.stop])
    peer.routes["faults"] = Route(target.base, peerlib.MODEL, [_portkey_headers(providers.faults.url,
                                                                                PORTKEY_FAULT_CONFIG)])
    peer.routes["outage"] = Route(target.base, peerlib.MODEL, [_portkey_headers(providers.outage.url,
                                                                                PORTKEY_FAULT_CONFIG)])
    retry = {"retry": {"attempts": 3, "on_status_codes": [429]}}
    for contention, p in providers.priority.items():
        for klass in LITELLM_PRIORITY:
            peer.routes[f"{contention}/{klass}"] = Route(target.base, peerlib.MODEL, [_portkey_headers(p.url, retry)])
    peer.config = {"faults": PORTKEY_FAULT_CONFIG, "priority": retry, "docs": {**PORTKEY_FAULT_DOCS,
                                                                              **peerlib.PORTKEY_DOCS}}
    return peer


def direct(providers: Providers) -> Peer:
    peer = Peer("direct", version="-", config={"client": "httpx straight to the fake provider, no retry "
                                                         "but the client's own after 429"})
    auth = [{"Authorization": "Bearer sk-fake"}]
    peer.routes["faults"] = Route(f"{providers.faults.url}/v1", peerlib.MODEL, auth)
    peer.routes["outage"] = Route(f"{providers.outage.url}/v1", peerlib.MODEL, auth)
    for contention, p in providers.priority.items():
        for klass in LITELLM_PRIORITY:
            peer.routes[f"{contention}/{klass}"] = Route(f"{p.url}/v1", peerlib.MODEL, auth)
    return peer


async def _gql(http: httpx.AsyncClient, query: str) -> dict:
    body = (await http.post("/graphql", json={"query": query})).json()
    if body.get("errors"):
        raise peerlib.PeerUnavailable(f"AgentRM GraphQL: {body['errors'][0].get('message')}")
    return body["data"]


async def _agents(http: httpx.AsyncClient, pool: str, n: int, klass: str = "INTERACTIVE") -> list[dict]:
    gate = asyncio.Semaphore(8)

    async def register(i: int) -> dict:
        async with gate:
            data = await _gql(http, f'mutation {{ registerAgent(input: {{name: "{pool}.{klass.lower()}.{i}", '
                                    f'pool: "{pool}", priorityClass: {klass}}}) {{ token }} }}')
            return {"Authorization": f"Bearer {data['registerAgent']['token']}"}
    return list(await asyncio.gather(*(register(i) for i in range(n))))


async def start_agentrm(url: str, work: Path, providers: Providers, repeat: int) -> Peer:
    token = "op_bench_" + secrets.token_hex(8)
    proc, base, log = spawn_agentrm(url, token, work, "serve-faults.log")
    peer = Peer("agentrm", stoppers=[lambda: stop_process(proc)])
    suffix = secrets.token_hex(3)   # pools of their own, also on a database an earlier run used
    try:
        await asyncio.to_thread(peerlib._wait_http, proc, f"{base}/readyz", log, "agentrm serve")
        async with httpx.AsyncClient(base_url=base, timeout=60, headers={"Authorization": f"Bearer {token}"}) as http:
            for r in range(repeat):
                # A pool per run with the pool defaults (lease, start floor, stall timeout,
                # request and idle timeouts): each run learns its deadlines afresh.
                for name, provider in (("faults", providers.faults), ("outage", providers.outage)):
                    pool = f"{name}_{suffix}_{r}"
                    await _gql(http, f'mutation {{ createPool(input: {{name: "{pool}", lanes: 32, rpm: {BIG}, '
                                     f'tpm: {BIG * 100}, upstreamBaseUrl: "{provider.url}/v1", '
                                     'upstreamApiKey: "sk-fake"}) { name } }')
                    peer.routes[f"{name}/{r}"] = Route(f"{base}/v1", peerlib.MODEL,
                                                       await _agents(http, pool, FAULT_AGENTS))
                for contention, provider in providers.priority.items():
                    pool = f"priority_{contention}_{suffix}_{r}"
                    lanes, rpm = (8, PRIORITY_RPM) if contention == "rate" else (PRIORITY_LANES, BIG)
                    await _gql(http, f'mutation {{ createPool(input: {{name: "{pool}", lanes: {lanes}, rpm: {rpm}, '
                                     f'tpm: {BIG * 100}, upstreamBaseUrl: "{provider.url}/v1", '
                                     'upstreamApiKey: "sk-fake"}) { name } }')
                    peer.routes[f"{contention}/interactive/{r}"] = Route(
                        f"{base}/v1", peerlib.MODEL, await _agents(http, pool, INTERACTIVE_CLIENTS, "INTERACTIVE"))
                    peer.routes[f"{contention}/batch/{r}"] = Route(
                        f"{base}/v1", peerlib.MODEL, await _agents(http, pool, BATCH_CLIENTS, "BATCH"))
    except BaseException:
        peer.stop()
        raise
    head = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=peerlib.ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
    peer.version = f"{importlib.metadata.version('agentrm')} ({head})"
    peer.config = {"cli": "agentrm serve --host 127.0.0.1 --workers 1 --no-demo",
                   "faults pools": {"lanes": 32, "rpm": "unbounded", "everything else": "the pool defaults: "
                                    "leaseSeconds 30, startTimeoutFloorSeconds 2, stallTimeoutSeconds 6, "
                                    "requestTimeoutSeconds 600, streamIdleTimeoutSeconds 120"},
                   "priority pools": {"rate": {"lanes": 8, "rpm": PRIORITY_RPM},
                                      "lanes": {"lanes": PRIORITY_LANES, "rpm": "unbounded"},
                                      "agents": "registerAgent priorityClass INTERACTIVE / BATCH"},
                   "docs": {"liveness": "docs/guides/gateway.md (what happens to a call, step 4) and "
                                        "docs/concepts/failure-detection.md (held calls)",
                            "classes": "docs/concepts/grant-order.md (class slack 0/6/12 s)"}}
    return peer


def _route(peer: Peer, key: str, r: int) -> Route:
    return peer.routes.get(f"{key}/{r}") or peer.routes[key]


# -- the run --------------------------------------------------------------------------------------
async def run_workloads(database_url: str | None, *, peers: tuple[str, ...], workloads: tuple[str, ...],
                        repeat: int, install: bool) -> dict:
    providers = {name: await Providers.start() for name in peers}
    started: dict[str, Peer] = {}
    skipped: dict[str, Peer] = {}
    work = Path(tempfile.mkdtemp(prefix="agentrm-peers-faults-"))   # TMPDIR, as every temporary file
    load_at_start = os.getloadavg()
    fault_runs: list[dict] = []
    priority_runs: list[dict] = []
    try:
        for name in peers:
            try:
                if name == "direct":
                    peer = direct(providers[name])
                elif name == "litellm":
                    peer = await asyncio.to_thread(start_litellm, work, install, providers[name])
                elif name == "portkey":
                    peer = await asyncio.to_thread(start_portkey, work, install, providers[name])
                else:
                    if database_url is None:
                        raise peerlib.PeerUnavailable("no database for agentrm serve")
                    peer = await start_agentrm(database_url, work, providers[name], repeat)
            except peerlib.PeerUnavailable as exc:
                skipped[name] = Peer(name, status="skipped", reason=str(exc))
                print(f"peers: {name} skipped: {exc}", file=sys.stderr)
                continue
            started[name] = peer
        for r in range(repeat):
            if "faults" in workloads:
                results = await asyncio.gather(*(
                    faults_phase(p, _route(p, "faults", r), _route(p, "outage", r), providers[n].faults,
                                 providers[n].outage) for n, p in started.items()))
                fault_runs += [{**fault_row(res), "run": r, "load_average": res["load_average"],
                                "provider_calls_by_tag": res["provider_calls"]} for res in results]
            if "priority" in workloads:
                for contention in CONTENTIONS:
                    results = await asyncio.gather(*(
                        priority_phase(p, contention, {k: _route(p, f"{contention}/{k}", r) for k in LITELLM_PRIORITY},
                                       providers[n].priority[contention]) for n, p in started.items()))
                    priority_runs += [{**res, "run": r} for res in results]
    finally:
        for peer in started.values():
            peer.stop()
        for p in providers.values():
            await p.stop()
    every = {**started, **skipped}
    return {"faults_priority": {
        "settings": {"workloads": list(workloads), "repeat": repeat, "client_timeout_s": CLIENT_TIMEOUT_S,
                     "fault_calls": [c.__dict__ | {"tag": c.tag} for c in FAULT_CALLS],
                     "normal_clients": NORMAL_CLIENTS, "normal_seconds": NORMAL_SECONDS, "outage_s": OUTAGE_S,
                     "priority_seconds": PRIORITY_SECONDS, "priority_rpm": PRIORITY_RPM,
                     "priority_lanes": PRIORITY_LANES, "batch_clients": BATCH_CLIENTS,
                     "interactive_clients": INTERACTIVE_CLIENTS, "think_s": THINK_S,
                     "priority_call_s": PRIORITY_CALL_S, "cores": os.cpu_count()},
        "load_average": {"start": load_at_start, "end": os.getloadavg()},
        "peers": {n: {"status": p.status, "reason": p.reason, "version": p.version, "config": p.config}
                  for n, p in ((n, every[n]) for n in peers if n in every)},
        "faults": summarise_faults(fault_runs), "fault_runs": fault_runs,
        "priority": summarise_priority(priority_runs), "priority_runs": priority_runs}}


def summarise_faults(runs: list[dict]) -> list[dict]:
    rows = []
    for name in dict.fromkeys(r["peer"] for r in runs):
        mine = [r for r in runs if r["peer"] == name]
        rows.append({"peer": name, "runs": len(mine),
                     **{k: _spread([r[k] for r in mine]) for k in (
                         "user_calls", "completed", "live_calls", "live_cut", "slow_cut", "outage_completed",
                         "outage_calls", "provider_per_user_call", "outage_provider_per_user_call")},
                     **{f"{k}_{q}": _spread([r[k][q] if r[k] else None for r in mine])
                        for k in ("hang_stream_held_s", "hang_whole_held_s", "stall_held_s") for q in ("p50", "max")}})
    return rows


def summarise_priority(runs: list[dict]) -> list[dict]:
    rows = []
    for contention in dict.fromkeys(r["contention"] for r in runs):
        for name in dict.fromkeys(r["peer"] for r in runs):
            mine = [r for r in runs if r["peer"] == name and r["contention"] == contention]
            if mine:
                rows.append({"peer": name, "contention": contention, "runs": len(mine),
                             **{k: _spread([r[k] for r in mine]) for k in (
                                 "interactive_p95_wait_s", "interactive_p50_wait_s", "batch_p95_wait_s",
                                 "interactive_calls", "batch_calls", "provider_429")}})
    return rows


# -- the report -----------------------------------------------------------------------------------
def to_markdown(section: dict) -> str:
    s, la = section["settings"], section["load_average"]
    lines = [f"Load average {la['start'][0]:.1f} at the start, {la['end'][0]:.1f} at the end ({s['cores']} cores, "
             f"shared). {s['repeat']} run(s); each figure is the median, the spread over runs in brackets. "
             "The peers of a run go at the same time, each with fake providers of its own.", ""]
    lines += ["| peer | status | version |", "|---|---|---|"]
    for name, p in section["peers"].items():
        status = p["status"] if p["status"] == "ok" else f"skipped: {p['reason']}"
        lines.append(f"| {name} | {status} | {p['version'] or '-'} |")
    lines.append("")
    if section["faults"]:
        lines += ["## Faults: hangs, stalls, slow-but-alive calls and an outage", "",
                  f"Each run: 2 hung streams, 2 hung whole calls, 2 streams that stall after 2 s, 2 whole calls "
                  f"answered after 45 s and 2 streams whose first chunk comes after 20 s (alive: must not be cut), "
                  f"6 calls into a {s['outage_s']:g} s outage (503), and {s['normal_clients']} clients calling "
                  f"normally for {s['normal_seconds']:g} s. The client gives up after {s['client_timeout_s']:g} s. "
                  "Held: seconds from a call's start until its client was released (an error or the client's "
                  "own timeout).", "",
                  "| peer | calls completed | live calls cut (of) | slow calls cut | outage calls completed (of) "
                  "| hung stream held p50 / max s | hung whole held p50 / max s | stalled stream held p50 / max s "
                  "| provider calls per user call | in the outage |", "|---|---|---|---|---|---|---|---|---|---|"]
        for row in section["faults"]:
            lines.append(
                f"| {row['peer']} | {_fmt(row['completed'], 0)} of {_fmt(row['user_calls'], 0)} "
                f"| {_fmt(row['live_cut'], 0)} ({_fmt(row['live_calls'], 0)}) | {_fmt(row['slow_cut'], 0)} "
                f"| {_fmt(row['outage_completed'], 0)} ({_fmt(row['outage_calls'], 0)}) "
                f"| {_fmt(row['hang_stream_held_s_p50'])} / {_fmt(row['hang_stream_held_s_max'])} "
                f"| {_fmt(row['hang_whole_held_s_p50'])} / {_fmt(row['hang_whole_held_s_max'])} "
                f"| {_fmt(row['stall_held_s_p50'])} / {_fmt(row['stall_held_s_max'])} "
                f"| {_fmt(row['provider_per_user_call'], 2)} | {_fmt(row['outage_provider_per_user_call'], 2)} |")
        lines.append("")
    if section["priority"]:
        lines += ["## Priority under contention: interactive and batch agents share one limit", "",
                  f"{s['batch_clients']} batch clients in a closed loop, {s['interactive_clients']} interactive "
                  f"clients that think {s['think_s']:g} s between calls, {s['priority_seconds']:g} s; each call "
                  f"{s['priority_call_s']:g} s at the provider. rate: the provider allows {s['priority_rpm']} "
                  f"requests a minute; lanes: it serves {s['priority_lanes']} calls at a time. Wait: a user call's "
                  "end-to-end time (its retries after 429 included) minus the provider's own "
                  f"{s['priority_call_s']:g} s; a call still waiting at the end counts with its wait so far.", "",
                  "| contention | peer | interactive P95 wait s | interactive P50 wait s | batch P95 wait s "
                  "| interactive calls | batch calls | provider 429s |", "|---|---|---|---|---|---|---|---|"]
        for row in section["priority"]:
            lines.append(f"| {row['contention']} | {row['peer']} | {_fmt(row['interactive_p95_wait_s'], 2)} "
                         f"| {_fmt(row['interactive_p50_wait_s'], 2)} | {_fmt(row['batch_p95_wait_s'], 2)} "
                         f"| {_fmt(row['interactive_calls'], 0)} | {_fmt(row['batch_calls'], 0)} "
                         f"| {_fmt(row['provider_429'], 0)} |")
        lines.append("")
    return "\n".join(lines)


async def _run(run: WorkloadRun) -> dict:
    return await run_workloads(run.database_url, peers=run.peers, workloads=run.workloads, repeat=run.repeat,
                               install=run.install)


EXTRA_WORKLOADS.append(ExtraWorkload(
    ("faults", "priority"), _run,
    lambda r: to_markdown(r["faults_priority"]) if "faults_priority" in r else None))

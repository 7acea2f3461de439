"""`agentrm bench peers`, workload `validate`: the scheduler benchmark's `litellm-proxy` model
(policies/litellm.py) beside the real LiteLLM proxy, on one small workload both can run
exactly.

The workload (fixed before any comparison): AGENTS agents start together, each one run of
CALLS calls; every call is one non-streamed request of the same known size (the fake
provider's default: CALL_S seconds, 16 output tokens; the prompt is the benchmark's one
message, charged len/4 tokens) with TOOL_S of tool time before the next. The provider is the
token bucket of RPM requests a minute (sim.Provider on both sides). The proxy is configured
as the model's docstring says a user who wants rpm-aware routing configures it: `rpm: RPM`
and `max_parallel_requests: LANES` on the deployment, usage-based-routing-v2, num_retries 2,
request_timeout 600. An agent whose call fails asks again after AGENT_RETRY_S, the model's
assumption (policies/base.py). The model assumes t = 0 on a UTC minute boundary (the proxy
counts per calendar minute): the live run starts there.

Non-streamed calls make the deployment slot cover the whole call on both sides (the model
frees it at the first chunk, which for such a call is its answer).

Headline metrics, computed the same way from both sides' per-call records: completion time
(the last call's answer), the P50 and P95 wait of a call (its latency minus its CALL_S of
service), the calls the provider admitted (in all, and in the first minute), the 429s the
provider served and the errors the agents saw.
"""
from __future__ import annotations

import asyncio
import contextlib
import math
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from app.stats import percentile

from . import peers as peerlib
from .fake_provider import FakeProvider
from .harness import run_policy
from .peers_bench import BIG, EXTRA_WORKLOADS, ExtraWorkload, WorkloadRun, _body, _client, _fmt, _spread
from .policies.base import AGENT_RETRY_S
from .workload import AgentScript, CallSpec, RunSpec, Trace, WorkloadParams

AGENTS = 6
CALLS = 6
CALL_S = 2.0
TOOL_S = 1.0
RPM = 20
LANES = 3
OUTPUT_TOKENS = 16
NUM_RETRIES = 2
REQUEST_TIMEOUT_S = 600
TOLERANCE = 0.15
SIM_SEEDS = 10
LIVE_LIMIT_S = 600.0          # a live run is cut after this (it never needs half of it)
METRICS = ("completion_s", "p50_wait_s", "p95_wait_s", "provider_admitted", "admitted_first_minute",
           "provider_429", "agent_errors")
COUNTS = {"provider_admitted", "admitted_first_minute", "provider_429", "agent_errors"}


def prompt_tokens() -> int:
    """What the fake provider charges the benchmark's message (fake_provider._charge)."""
    text = sum(len(m["content"]) for m in _body(peerlib.MODEL, False)["messages"])
    return max(1, text // 4)


# -- the simulator's side --------------------------------------------------------------------------
def trace(seed: int) -> Trace:
    def call(a: int, c: int) -> CallSpec:
        return CallSpec(f"a{a}-c{c}", prompt_tokens(), OUTPUT_TOKENS, OUTPUT_TOKENS, CALL_S, CALL_S,
                        TOOL_S if c + 1 < CALLS else 0.0)
    agents = tuple(AgentScript(f"a{a}", "batch", (RunSpec(0.0, 0.0, tuple(call(a, c) for c in range(CALLS))),))
                   for a in range(AGENTS))
    return Trace(WorkloadParams(agents=AGENTS, minutes=LIVE_LIMIT_S / 60, seed=seed, hang_rate=0.0), agents)


def simulate(seed: int, policy: str = "litellm-proxy") -> dict:
    run = run_policy(policy, trace(seed), LANES, RPM, BIG * 100)
    calls = [(r.requested_at, r.completed_at) for r in run.recorder.calls if r.completed_at is not None]
    return headline(calls, [at for at, _charge in run.provider.admitted_log], len(run.recorder.rate_limited_at),
                    sum(r.failed for r in run.recorder.calls), AGENTS * CALLS)


def headline(calls: list[tuple[float, float]], admitted_at: list[float], provider_429: int, agent_errors: int,
             expected: int) -> dict:
    """The metrics of one run from (requested, answered) per call, seconds from the start."""
    waits = [max(0.0, done - asked - CALL_S) for asked, done in calls]
    return {"calls_done": len(calls), "calls_expected": expected,
            "completion_s": max((done for _a, done in calls), default=None) if len(calls) == expected else None,
            "p50_wait_s": percentile(waits, 50) if waits else None,
            "p95_wait_s": percentile(waits, 95) if waits else None,
            "provider_admitted": len(admitted_at), "admitted_first_minute": sum(at < 60.0 for at in admitted_at),
            "provider_429": provider_429, "agent_errors": agent_errors}


# -- the real proxy's side -------------------------------------------------------------------------
def proxy_config(runs: int, provider_url: str, warm_url: str) -> dict:
    config = peerlib.litellm_config({**{f"validate-{r}": (provider_url, RPM) for r in range(runs)},
                                     "warmup": (warm_url, None)}, rate_limited=True)
    for entry in config["model_list"]:
        if entry["model_name"] != "warmup":
            entry["litellm_params"]["max_parallel_requests"] = LANES
    config["router_settings"]["num_retries"] = NUM_RETRIES
    config["litellm_settings"].update({"num_retries": NUM_RETRIES, "request_timeout": REQUEST_TIMEOUT_S})
    return config


async def _wait_for_minute() -> None:
    """Until just after the next UTC minute boundary (the proxy's counters are per minute)."""
    now = time.time()
    await asyncio.sleep(math.ceil(now / 60.0) * 60.0 - now + 0.05)


async def live_once(target: peerlib.Target, model: str, provider: FakeProvider) -> dict:
    await _wait_for_minute()
    provider.reset()
    t0 = time.monotonic()
    wall0 = time.time()
    calls: list[tuple[float, float]] = []
    errors: dict[str, int] = {}
    url = target.base + "/chat/completions"
    load = os.getloadavg()[0]
    async with _client(AGENTS, timeout=REQUEST_TIMEOUT_S + 60) as http:

        async def agent() -> None:
            for c in range(CALLS):
                asked = time.monotonic() - t0
                while True:
                    try:
                        r = await http.post(url, json=_body(model, False), headers=target.headers)
                        status: int | str = r.status_code
                    except httpx.HTTPError as exc:
                        status = type(exc).__name__
                    if status == 200:
                        break
                    errors[str(status)] = errors.get(str(status), 0) + 1
                    await asyncio.sleep(AGENT_RETRY_S)
                calls.append((asked, time.monotonic() - t0))
                if c + 1 < CALLS:
                    await asyncio.sleep(TOOL_S)
        tasks = [asyncio.create_task(agent()) for _ in range(AGENTS)]
        _done, pending = await asyncio.wait(tasks, timeout=LIVE_LIMIT_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    log = provider.access_log
    result = headline(calls, [e.received_at - wall0 for e in log if e.status == 200],
                      sum(e.status == 429 for e in log), sum(errors.values()), AGENTS * CALLS)
    return {**result, "agent_errors_by_status": errors, "load_average": load}


# -- the comparison ------------------------------------------------------------------------------------
def compare(sim: list[dict], real: list[dict]) -> list[dict]:
    """Per metric: the medians, the relative difference (counts against max(real, 1)) and
    whether it is within TOLERANCE."""
    rows = []
    for key in METRICS:
        s = _spread([r[key] for r in sim if r[key] is not None])
        lv = _spread([r[key] for r in real if r[key] is not None])
        diff = None
        if s is not None and lv is not None:
            base = max(abs(lv["median"]), 1.0) if key in COUNTS else abs(lv["median"])
            diff = abs(s["median"] - lv["median"]) / base if base else (0.0 if s["median"] == 0 else math.inf)
        rows.append({"metric": key, "sim": s, "real": lv, "relative_difference": diff,
                     "within": diff is not None and diff <= TOLERANCE})
    return rows


async def run_validate(work: Path, peers: tuple[str, ...], repeat: int, install: bool) -> dict:
    sims = [simulate(seed) for seed in range(1, SIM_SEEDS + 1)]
    result: dict = {"settings": {"agents": AGENTS, "calls_per_agent": CALLS, "call_s": CALL_S, "tool_s": TOOL_S,
                                 "rpm": RPM, "lanes (max_parallel_requests)": LANES, "num_retries": NUM_RETRIES,
                                 "prompt_tokens": prompt_tokens(), "output_tokens": OUTPUT_TOKENS,
                                 "agent_retry_s": AGENT_RETRY_S, "repeat": repeat, "sim_seeds": SIM_SEEDS,
                                 "tolerance": TOLERANCE},
                    "sim_runs": sims, "live_runs": [], "status": "ok", "reason": ""}
    if "litellm" not in peers:
        result.update(status="skipped", reason="litellm not among --peers")
        return result
    provider = await FakeProvider(RPM, BIG * 100, honour_stream=True,
                                  defaults={"output_tokens": OUTPUT_TOKENS, "latency_s": CALL_S}).start()
    warm = await FakeProvider(BIG, BIG * 100, honour_stream=True, defaults={"output_tokens": OUTPUT_TOKENS}).start()
    target = None
    try:
        config = proxy_config(repeat, provider.url, warm.url)
        try:
            target = await asyncio.to_thread(peerlib.start_litellm, "litellm-validate", config, install,
                                             work / "validate")
        except peerlib.PeerUnavailable as exc:
            result.update(status="skipped", reason=str(exc))
            print(f"peers validate: litellm skipped: {exc}", file=sys.stderr)
            return result
        async with _client(1, timeout=60) as http:   # its first calls are slow: not on a measured deployment
            took = []
            for i in range(14):
                t = time.perf_counter()
                with contextlib.suppress(httpx.HTTPError):
                    await http.post(target.base + "/chat/completions", json=_body("warmup", False),
                                    headers=target.headers)
                if i >= 4:
                    took.append(time.perf_counter() - t)
        # What the proxy adds to a call whose provider answers at once: in the real side's
        # waits (each attempt pays it), not in the model's.
        result["proxy_call_ms"] = statistics.median(took) * 1000
        for r in range(repeat):
            result["live_runs"].append({**await live_once(target, f"validate-{r}", provider), "run": r})
        result["version"] = target.version
        result["config"] = {"file": config, "docs": peerlib.LITELLM_DOCS}
    finally:
        if target is not None:
            target.stop()
        await provider.stop()
        await warm.stop()
    result["comparison"] = compare(sims, result["live_runs"])
    result["passed"] = all(row["within"] for row in result["comparison"])
    return result


def validate_markdown(result: dict) -> str:
    s = result["settings"]
    lines = ["## Validation: the simulator's LiteLLM model beside the real proxy", "",
             f"{s['agents']} agents x {s['calls_per_agent']} non-streamed calls of {s['call_s']} s, {s['tool_s']} s "
             f"of tool time between them; provider token bucket of {s['rpm']} RPM; the deployment's rpm "
             f"{s['rpm']} and max_parallel_requests {s['lanes (max_parallel_requests)']}, usage-based-routing-v2, "
             f"num_retries {s['num_retries']}; an agent asks again {s['agent_retry_s']} s after an error. "
             f"Simulation: `litellm-proxy` over {s['sim_seeds']} jitter seeds; real: {s['repeat']} run(s), each "
             "started on a UTC minute boundary. Median with the spread in brackets."]
    if result["status"] != "ok":
        return "\n".join(lines + ["", f"Not run: {result['reason']}"]) + "\n"
    loads = [r["load_average"] for r in result["live_runs"]]
    lines += ["", f"LiteLLM {result.get('version', '')}; load average {min(loads):.1f} to {max(loads):.1f} "
              f"during the real runs; a call through the proxy to a provider that answers at once took "
              f"{result.get('proxy_call_ms', 0):.0f} ms (median of 10), which every real attempt pays and the "
              "model does not.", "",
              "| metric | simulator | real proxy | difference | within 15% |", "|---|---|---|---|---|"]
    for row in result["comparison"]:
        digits = 0 if row["metric"] in COUNTS else 1
        diff = row["relative_difference"]
        lines.append(f"| {row['metric']} | {_fmt(row['sim'], digits)} | {_fmt(row['real'], digits)} "
                     f"| {'-' if diff is None else f'{diff:.0%}'} | {'yes' if row['within'] else '**no**'} |")
    lines += ["", "Acceptance (the simulator's LiteLLM model within 15% of the real proxy on the validation "
              "workload): " + ("**met**" if result["passed"] else "**not met**")]
    return "\n".join(lines) + "\n"


async def _run(run: WorkloadRun) -> dict:
    return {"validate": await run_validate(run.work, run.peers, run.repeat, run.install)}


EXTRA_WORKLOADS.append(ExtraWorkload(
    ("validate",), _run, lambda r: validate_markdown(r["validate"]) if "validate" in r else None))

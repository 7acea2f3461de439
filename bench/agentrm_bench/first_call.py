"""`agentrm bench first-call`: how long a newcomer's first gateway call takes under `make run`.

It starts `agentrm serve --host 127.0.0.1` as `make run` does (the demo fleet on, no
provider configured: the `default` pool's upstream is the demo echo model) on an empty
database of its own, waits for it to be ready with its fleet registered, and lets the fleet
work for the warm-up (default 240 s: a newcomer reads the README for minutes, and in its
first four minutes the seeded fleet meets five 429s, enough to drive a pool it shares to its
rate floor). Then README example 1 (a new agent `readme-openai`, the openai SDK, model
`demo-echo`, "hello gateway") makes its call `--calls` times, one after another, each from a
new client as a newcomer's script would, each `create` timed on the wall clock. The round is
repeated (`--repeat`, `--gap` seconds apart, the fleet working throughout); the report gives
each round's p50, p90 and max, the spread of the rounds' p50 against the target (p50 under
0.5 s), and every pool's rate factor.

`--tree DIR` serves another checkout instead of this one (its own migrations, its own demo
fleet), for a before/after comparison on the same machine."""
from __future__ import annotations

import json
import math
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from app.config import child_environment

TARGET_P50_S = 0.5
ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 180.0
FLEET_SIZE = 6
PROMPT = "hello gateway"


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quantile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q of them at or below it."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def _gql(base: str, token: str, query: str) -> dict:
    answer = httpx.post(f"{base}/graphql", json={"query": query}, timeout=30,
                        headers={"authorization": f"Bearer {token}"}).json()
    if answer.get("errors"):
        raise RuntimeError(answer["errors"][0].get("message"))
    return answer["data"]


def _start(tree: Path, url: str, token: str, tmp: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    # As `make run` on a machine with no provider key: no upstream, the demo on. "" unsets
    # a variable this process may carry (an empty value reads as unset).
    env = child_environment({"DATABASE_URL": url, "AGENTRM_OPERATOR_TOKEN": token, "AGENTRM_DATA_DIR": str(tmp),
                             "PYTHONPATH": str(tree), "AGENTRM_UPSTREAM_BASE_URL": "",
                             "AGENTRM_UPSTREAM_API_KEY": "", "AGENTRM_DEMO_UPSTREAM_URL": "",
                             "AGENTRM_DEMO": ""})
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                            cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp / "serve.log", "ab"))
    return proc, f"http://127.0.0.1:{port}"


def _wait_ready(proc: subprocess.Popen, base: str, token: str, tmp: Path) -> None:
    """Until /readyz answers 200 and the whole demo fleet is registered."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:   # a real process must come up: poll it, with a deadline
        if proc.poll() is not None:
            raise SystemExit(f"agentrm serve exited: {(tmp / 'serve.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                names = [a["name"] for a in _gql(base, token, "{ agents { name } }")["agents"]]
                if sum(n.startswith("demo-") for n in names) >= FLEET_SIZE:
                    return
        except (httpx.HTTPError, RuntimeError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"agentrm serve was not ready with its demo fleet within {READY_TIMEOUT_S:g} s")
        time.sleep(0.2)


def _fleet_state(base: str, token: str) -> dict[str, Any]:
    """Which pool the fleet works in, the log's head, and each pool's rate factor."""
    data = _gql(base, token, "{ logHead pools { name } agents { name pool } }")
    factors = {}
    for pool in sorted(p["name"] for p in data["pools"]):
        state = _gql(base, token, f'{{ scheduler(pool: "{pool}") {{ rateLimit {{ rateFactor }} }} }}')
        factors[pool] = state["scheduler"]["rateLimit"]["rateFactor"]
    return {"fleet_pools": sorted({a["pool"] for a in data["agents"] if a["name"].startswith("demo-")}),
            "head": data["logHead"], "rate_factor": factors}


def _fleet_turns_between(base: str, token: str, after: int, until: int, own: str) -> int:
    """The turns other agents (the fleet) completed while the calls ran."""
    events = _gql(base, token, f'{{ events(after: {after}, limit: 1000, types: ["TurnCompleted"]) '
                               '{ position data } }')["events"]
    return sum(1 for e in events if e["position"] <= until and e["data"]["agent_id"] != own)


def _calls(base: str, op_token: str, calls: int) -> tuple[list[float], int, str]:
    """README example 1, then its call again: each from a new client, timed alone."""
    from openai import OpenAI

    from agentrm_client import register_agent
    token = register_agent(base, op_token, name="readme-openai")
    me = _gql(base, token, "{ me { id } }")["me"]["id"]
    seconds, errors = [], 0
    for _ in range(calls):
        client = OpenAI(base_url=f"{base}/v1", api_key=token, max_retries=0, timeout=120)
        started = time.perf_counter()
        try:
            reply = client.chat.completions.create(model="demo-echo",
                                                   messages=[{"role": "user", "content": PROMPT}])
            ok = (reply.choices[0].message.content or "").strip() == f"echo: {PROMPT}"
        except Exception:  # noqa: BLE001 - a failed call is counted, and the run goes on
            ok = False
        seconds.append(time.perf_counter() - started)
        errors += not ok
        client.close()
    return seconds, errors, me


def _round(base: str, token: str, calls: int, since_start_s: float) -> dict[str, Any]:
    before = _fleet_state(base, token)
    seconds, errors, own = _calls(base, token, calls)
    after = _fleet_state(base, token)
    return {"calls": len(seconds), "errors": errors, "seconds": [round(s, 4) for s in seconds],
            "p50_s": quantile(seconds, 0.5), "p90_s": quantile(seconds, 0.9), "max_s": max(seconds),
            "at_s": round(since_start_s, 1), "fleet_pools": after["fleet_pools"],
            "fleet_turns_during": _fleet_turns_between(base, token, before["head"], after["head"], own),
            "rate_factor_before": before["rate_factor"], "rate_factor_after": after["rate_factor"]}


def run(out: Path, database: str, *, calls: int = 20, repeat: int = 3, warmup_s: float = 240.0,
        gap_s: float = 30.0, tree: Path | None = None) -> dict[str, Any]:
    """One server on the empty `database` (it migrates it, as `make run` does), the
    warm-up, then `repeat` rounds of `calls` calls, `gap_s` apart."""
    tree = (tree or ROOT).resolve()
    token = "op_bench_" + secrets.token_hex(8)
    runs = []
    with tempfile.TemporaryDirectory(prefix="agentrm-first-call-") as tmp_name:
        tmp = Path(tmp_name)
        proc, base = _start(tree, database, token, tmp)
        try:
            started = time.monotonic()
            _wait_ready(proc, base, token, tmp)
            ready_s = time.monotonic() - started
            time.sleep(warmup_s)          # the fleet at work, as a newcomer finds it
            for i in range(repeat):
                if i:
                    time.sleep(gap_s)
                runs.append(_round(base, token, calls, time.monotonic() - started))
                print(f"round {i + 1}/{repeat}: p50 {runs[-1]['p50_s']:.3f} s, p90 {runs[-1]['p90_s']:.3f} s, "
                      f"max {runs[-1]['max_s']:.3f} s", file=sys.stderr, flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    p50s = [r["p50_s"] for r in runs]
    result = {"calls": calls, "repeat": repeat, "warmup_s": warmup_s, "gap_s": gap_s, "tree": str(tree),
              "ready_s": round(ready_s, 1), "target_p50_s": TARGET_P50_S, "runs": runs,
              "p50_s": statistics.median(p50s), "p50_spread_s": [min(p50s), max(p50s)],
              "p90_s": statistics.median(r["p90_s"] for r in runs), "max_s": max(r["max_s"] for r in runs),
              "errors": sum(r["errors"] for r in runs)}
    result["target_met"] = max(p50s) < TARGET_P50_S and not result["errors"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "first_call.json").write_text(json.dumps(result, indent=2, sort_keys=True), encoding="utf-8")
    (out / "first_call.md").write_text(to_markdown(result), encoding="utf-8")
    return result


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def _factors(factors: dict[str, float]) -> str:
    return ", ".join(f"{pool} {value:.2f}" for pool, value in factors.items())


def to_markdown(result: dict[str, Any]) -> str:
    lines = ["# First call (`agentrm bench first-call`)", "",
             f"README example 1's gateway call under `make run` (demo fleet on): {result['repeat']} rounds of "
             f"{result['calls']} calls, the first after {result['warmup_s']:g} s of the fleet at work, then "
             f"{result['gap_s']:g} s apart. Target: p50 under {_ms(result['target_p50_s'])}.", "",
             "| round | at | p50 | p90 | max | errors | fleet's pool | fleet turns during | rate factor after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(result["runs"], 1):
        lines.append(f"| {i} | {r['at_s']:g} s | {_ms(r['p50_s'])} | {_ms(r['p90_s'])} | {_ms(r['max_s'])} | "
                     f"{r['errors']} | {', '.join(r['fleet_pools'])} | {r['fleet_turns_during']} | "
                     f"{_factors(r['rate_factor_after'])} |")
    low, high = result["p50_spread_s"]
    lines += ["", f"p50 {_ms(result['p50_s'])} (rounds {_ms(low)} to {_ms(high)}), p90 {_ms(result['p90_s'])}, "
                  f"max {_ms(result['max_s'])}, errors {result['errors']}: target "
                  f"{'met' if result['target_met'] else 'missed'}.", ""]
    return "\n".join(lines)

"""CPU per turn of two (or more) checkouts of AgentRM, side by side in one run.

`python -m agentrm_bench.load_compare --tree OLD_CHECKOUT:httpx --tree .:raw [--agents N]
[--seconds S] [--repeat R]`; `--tree .:raw+NAME=VALUE` also sets an environment variable
of that variant's server (one checkout with a switch off and on: `+AGENTRM_HOT_DOCUMENTS=0`).
`--half RATE` adds, after each round's saturation phases, an open-loop phase per variant at
RATE turns/s (the same offered rate for all, as `bench load`'s phase at half the saturation
rate), and prints their grant latency P50/P99.

On a machine shared with other work, figures taken minutes apart are not comparable: the
load of the neighbours changes under them. So every variant (a checkout's server, driven by
one of the driver's HTTP clients) gets its own server and database, all started at once,
and their saturation phases (`bench load`'s closed loop) alternate, round after round. Each
phase reports CPU ms per turn of the server, of PostgreSQL and of the driver, and turns/s;
the medians over the rounds are printed in one table. The idle servers' own background
work (a listener poll, an empty persist) falls inside the active one's PostgreSQL figure,
the same for every variant."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from app.config import child_environment

from . import load_bench as lb
from .cli import _bench_database


async def _start(root: Path, url: str, workers: int, token: str, tmp: Path,
                 extra_env: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = lb._free_port()
    env = child_environment({"DATABASE_URL": url, "AGENTRM_OPERATOR_TOKEN": token, "AGENTRM_DATA_DIR": str(tmp),
                             "PYTHONPATH": str(root), **(extra_env or {})})
    # Each checkout's server migrates its own database: a tree's code runs on its own
    # schema (an append function of another tree's migrations would change what it measures).
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers",
                             str(workers), "--no-demo"], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp / "serve.log", "ab"))
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:   # a real process must come up: poll its health, with a deadline
        if proc.poll() is not None:
            raise SystemExit(f"{root}: agentrm serve exited: {(tmp / 'serve.log').read_text()[-2000:]}")
        try:
            async with httpx.AsyncClient() as http:
                if (await http.get(f"{base}/healthz", timeout=2)).json().get("ok"):
                    await asyncio.sleep(2.0)   # every worker up, not just the first to answer
                    return proc, base
        except (httpx.HTTPError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{root}: agentrm serve did not come up within 180 s")
        await asyncio.sleep(0.3)


async def compare(trees: list[tuple[Path, str, dict]], urls: list[str], agents: int, workers: int, seconds: float,
                  repeat: int, half: float | None = None) -> dict:
    token = "op_bench_" + os.urandom(8).hex()
    variants: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agentrm-compare-") as tmp:
        try:
            for i, ((root, client, extra_env), url) in enumerate(zip(trees, urls)):
                work = Path(tmp) / str(i)
                work.mkdir()
                proc, base = await _start(root, url, workers, token, work, extra_env)
                label = f"{root}:{client}" + "".join(f" {k}={v}" for k, v in extra_env.items())
                variants.append({"label": label, "proc": proc, "url": url, "phases": []})
                tokens = await lb._fleet(base, token, agents)
                variants[-1]["driver"] = lb.Driver(base, tokens, proc.pid, lb.postmaster_pid(url), 1, client)
            for v in variants:
                await v["driver"].closed_loop(min(3.0, seconds))   # warm-up: connections, caches
            for _ in range(repeat):
                for v in variants:
                    v["phases"].append((await v["driver"].closed_loop(seconds)).summary())
                if half is not None:   # the same offered rate for every variant, alternating too
                    for v in variants:
                        v.setdefault("half", []).append(
                            (await v["driver"].open_loop("half", half, seconds)).summary())
        finally:
            for v in variants:
                if "driver" in v:
                    await v["driver"].close()
                v["proc"].terminate()
            for v in variants:
                try:
                    v["proc"].wait(30)
                except subprocess.TimeoutExpired:
                    v["proc"].kill()
    out = []
    for v in variants:
        med = {k: statistics.median(p[k] for p in v["phases"])
               for k in ("turns_per_s", "server_cpu_ms_per_turn", "db_cpu_ms_per_turn", "driver_cpu_ms_per_turn")}
        spread = {k: [round(p[k], 2) for p in v["phases"]]
                  for k in ("turns_per_s", "server_cpu_ms_per_turn", "db_cpu_ms_per_turn", "driver_cpu_ms_per_turn")}
        entry = {"variant": v["label"], "median": med, "runs": spread,
                 "errors": sum(p["errors"] for p in v["phases"] + v.get("half", []))}
        if v.get("half"):
            entry["half"] = {k: {"median": statistics.median(p[k] for p in v["half"]),
                                 "runs": [round(p[k], 1) for p in v["half"]]}
                             for k in ("grant_p50_ms", "grant_p99_ms", "turns_per_s")}
        out.append(entry)
    return {"settings": {"agents": agents, "workers": workers, "seconds": seconds, "repeat": repeat,
                         "half_rate": half},
            "variants": out}


def to_markdown(r: dict) -> str:
    s = r["settings"]
    lines = [f"{s['agents']} agents, {s['workers']} workers, {s['repeat']} alternating saturation phases of "
             f"{s['seconds']:.0f} s each; medians (range):", "",
             "| variant | turns/s | server CPU ms/turn | PostgreSQL | driver | errors |", "|---|---|---|---|---|---|"]
    for v in r["variants"]:
        cells = [f"{v['median'][k]:.1f} ({min(v['runs'][k]):.1f}-{max(v['runs'][k]):.1f})"
                 for k in ("turns_per_s", "server_cpu_ms_per_turn", "db_cpu_ms_per_turn", "driver_cpu_ms_per_turn")]
        lines.append(f"| {v['variant']} | " + " | ".join(cells) + f" | {v['errors']} |")
    if s.get("half_rate") is not None:
        lines += ["", f"Open loop at {s['half_rate']:.0f} turns/s offered to each (`--half`), "
                  f"{s['repeat']} alternating phases; medians (runs):", "",
                  "| variant | grant P50 ms | grant P99 ms | turns/s |", "|---|---|---|---|"]
        for v in r["variants"]:
            cells = [f"{v['half'][k]['median']:.1f} ({', '.join(f'{x:.0f}' for x in v['half'][k]['runs'])})"
                     for k in ("grant_p50_ms", "grant_p99_ms", "turns_per_s")]
            lines.append(f"| {v['variant']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentrm_bench.load_compare")
    p.add_argument("--tree", action="append", required=True,
                   help="CHECKOUT[:raw|httpx], a checkout of AgentRM and the driver's client (default raw)")
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--half", type=float, metavar="RATE",
                   help="after each round's saturation phases, an open-loop phase per variant at RATE "
                        "turns/s (the same for all: bench load's half rate), for grant P50/P99")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    trees = []
    for spec in args.tree:
        spec, *assignments = spec.split("+")
        if not all("=" in a for a in assignments):
            p.error(f"{spec}: after '+', NAME=VALUE")
        extra_env = dict(a.split("=", 1) for a in assignments)
        root, _, client = spec.rpartition(":") if spec.endswith((":raw", ":httpx")) else (spec, "", "raw")
        if not (Path(root) / "app" / "cli.py").exists():
            p.error(f"{root} is not a checkout of AgentRM")
        trees.append((Path(root).resolve(), client, extra_env))
    urls = [_bench_database(f"agentrm_bench_cmp{i}", migrate=False) for i in range(len(trees))]
    if args.half is not None and args.half <= 0:
        p.error("--half: a rate above 0 turns/s")
    result = lb.run_loop(compare(trees, urls, args.agents, args.workers, args.seconds, args.repeat, args.half))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(to_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

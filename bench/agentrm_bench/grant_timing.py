"""Where a grant's time goes at one offered rate: `bench load`'s open-loop phase, decomposed.

`python -m agentrm_bench.grant_timing --tree CHECKOUT [--tree OTHER ...] --rate R
[--seconds S] [--repeat N] [--json FILE]`

Each round starts each checkout's server in turn (one at a time, on a fresh database, so no
idle server competes for the cores; in the opposite order to the round before), registers
`bench load`'s fleet, warms up with a short closed loop, and runs one open-loop phase at R
turns/s exactly as `bench load` does (the same driver). Every granted turn's round trip is
then cut at points the log recorded:

- send -> TurnRequested inserted (`recorded_at`: clock_timestamp() under the append lock);
- -> its transaction committed (`pg_xact_commit_timestamp`, only when the cluster runs with
  `track_commit_timestamp = on`; otherwise the two hops around it are reported as one);
- -> the pool's first decision on it inserted (the leader's group commit);
- -> that decision committed;
- -> the response received by the agent.

The driver and PostgreSQL share the machine's clock. The server is started with
AGENTRM_TIMING_STAMPS=1, which records in each TurnRequested's metadata the process id of
the worker that took the request (`worker_pid`), so that requests taken by the pool's leader and by the other worker are
reported apart (the leader is the worker in `pool_leaders`)."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import asyncpg

from . import load_bench as lb
from .cli import _bench_database
from .load_compare import _start

HOPS = ("send_to_request_insert", "request_insert_to_commit", "request_commit_to_grant_insert",
        "grant_insert_to_commit", "grant_commit_to_receive")


def _pct(values: list[float], q: float) -> float:
    return lb.pct(values, q) * 1000 if values else float("nan")


async def _decompose(url: str, timing: list[tuple[str, float, float]]) -> dict:
    ids = [t[0] for t in timing]
    conn = await asyncpg.connect(url)
    try:
        try:
            await conn.fetchval("SELECT pg_xact_commit_timestamp(xmin) FROM events LIMIT 1")
            commit_ts = "extract(epoch FROM pg_xact_commit_timestamp(xmin))"
        except asyncpg.PostgresError:
            commit_ts = "NULL::float8"
        rows = await conn.fetch(
            f"SELECT data->>'turn_id' AS turn, type, position, extract(epoch FROM recorded_at) AS at, "
            f"{commit_ts} AS committed, metadata->>'worker_pid' AS worker FROM events "
            "WHERE type = ANY($1::text[]) AND data->>'turn_id' = ANY($2::text[]) ORDER BY position",
            ["TurnRequested", "TurnQueued", "TurnGranted"], ids)
        leader = await conn.fetchval("SELECT split_part(worker, ':', 3) FROM pool_leaders WHERE pool = 'load'")
    finally:
        await conn.close()
    requested, decided = {}, {}
    for r in rows:
        if r["type"] == "TurnRequested":
            requested[r["turn"]] = r
        elif r["turn"] not in decided:
            decided[r["turn"]] = r
    per_turn = []
    for turn, sent, received in timing:
        req, dec = requested.get(turn), decided.get(turn)
        if req is None or dec is None:
            continue
        req_commit = req["committed"] if req["committed"] is not None else req["at"]
        dec_commit = dec["committed"] if dec["committed"] is not None else dec["at"]
        per_turn.append({
            "total": received - sent,
            "on_leader": req["worker"] == leader if leader and req["worker"] else None,
            "send_to_request_insert": float(req["at"]) - sent,
            "request_insert_to_commit": float(req_commit - req["at"]),
            "request_commit_to_grant_insert": float(dec["at"] - req_commit),
            "grant_insert_to_commit": float(dec_commit - dec["at"]),
            "grant_commit_to_receive": received - float(dec_commit)})
    return {"per_turn": per_turn, "commit_timestamps": commit_ts != "NULL::float8", "leader": leader}


def summarise(per_turn: list[dict]) -> dict:
    """P50/P99 of each hop; and for the slowest 1% of grants, each hop's mean share of them."""
    out: dict[str, Any] = {"turns": len(per_turn)}
    if not per_turn:
        return out
    totals = [t["total"] for t in per_turn]
    out["total"] = {"p50_ms": _pct(totals, 50), "p99_ms": _pct(totals, 99)}
    cut = lb.pct(totals, 99)
    tail = [t for t in per_turn if t["total"] >= cut]
    for hop in HOPS:
        values = [t[hop] for t in per_turn]
        out[hop] = {"p50_ms": _pct(values, 50), "p99_ms": _pct(values, 99),
                    "tail_mean_ms": statistics.mean(t[hop] for t in tail) * 1000}
    on = [t for t in per_turn if t["on_leader"] is True]
    off = [t for t in per_turn if t["on_leader"] is False]
    out["on_leader"] = {"turns": len(on), "p50_ms": _pct([t["total"] for t in on], 50),
                        "p99_ms": _pct([t["total"] for t in on], 99)}
    out["other_worker"] = {"turns": len(off), "p50_ms": _pct([t["total"] for t in off], 50),
                           "p99_ms": _pct([t["total"] for t in off], 99)}
    for name, group in (("on_leader_hops", on), ("other_worker_hops", off)):
        out[name] = {hop: {"p50_ms": _pct([t[hop] for t in group], 50), "p99_ms": _pct([t[hop] for t in group], 99)}
                     for hop in HOPS}
    out["tail_on_leader_share"] = (sum(1 for t in tail if t["on_leader"]) / len(tail)) if tail else None
    return out


async def one_round(root: Path, url: str, rate: float, seconds: float, agents: int, workers: int,
                    env: dict) -> dict:
    token = "op_bench_" + os.urandom(8).hex()
    with tempfile.TemporaryDirectory(prefix="agentrm-timing-") as tmp:
        proc, base = await _start(root, url, workers, token, Path(tmp), {"AGENTRM_TIMING_STAMPS": "1", **env})
        try:
            tokens = await lb._fleet(base, token, agents)
            driver = lb.Driver(base, tokens, proc.pid, lb.postmaster_pid(url), 1)
            driver.timing = []
            try:
                await driver.closed_loop(min(3.0, seconds))   # warm-up, as bench load
                driver.timing.clear()
                phase = await driver.open_loop("half", rate, seconds)
            finally:
                await driver.close()
            found = await _decompose(url, [(t, a, b) for name, t, a, b in driver.timing if name == "half"])
        finally:
            proc.terminate()
            proc.wait(30)
    summary = phase.summary()
    half = [(a, b) for name, _, a, b in driver.timing if name == "half"]
    window = [min(a for a, _ in half), max(b for _, b in half)] if half else None
    return {"window": window,
            "phase": {k: summary[k] for k in ("turns", "turns_per_s", "errors", "grant_p50_ms", "grant_p99_ms",
                                              "server_cpu_ms_per_turn", "db_cpu_ms_per_turn")},
            "commit_timestamps": found["commit_timestamps"], "decomposition": summarise(found["per_turn"])}


def to_markdown(result: dict) -> str:
    lines = []
    for variant in result["variants"]:
        lines += [f"## {variant['label']}", "",
                  "| round | grant P50 / P99 ms | on leader P99 (n) | other worker P99 (n) | "
                  + " | ".join(f"{h} P50/P99 (tail mean)" for h in HOPS) + " |",
                  "|---" * (4 + len(HOPS)) + "|"]
        for i, r in enumerate(variant["rounds"]):
            d = r["decomposition"]
            if "total" not in d:
                continue
            cells = [f"{d[h]['p50_ms']:.1f}/{d[h]['p99_ms']:.1f} ({d[h]['tail_mean_ms']:.1f})" for h in HOPS]
            lines.append(f"| {i} | {r['phase']['grant_p50_ms']:.1f} / {r['phase']['grant_p99_ms']:.1f} | "
                         f"{d['on_leader']['p99_ms']:.1f} ({d['on_leader']['turns']}) | "
                         f"{d['other_worker']['p99_ms']:.1f} ({d['other_worker']['turns']}) | "
                         + " | ".join(cells) + " |")
        p99 = [r["phase"]["grant_p99_ms"] for r in variant["rounds"]]
        p50 = [r["phase"]["grant_p50_ms"] for r in variant["rounds"]]
        lines += ["", f"grant P99 median {statistics.median(p99):.1f} ms (runs {', '.join(f'{x:.0f}' for x in p99)}); "
                  f"P50 median {statistics.median(p50):.1f} ms (runs {', '.join(f'{x:.0f}' for x in p50)})", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentrm_bench.grant_timing")
    p.add_argument("--tree", action="append", required=True,
                   help="CHECKOUT[+NAME=VALUE...]: a checkout of AgentRM (and environment for its server)")
    p.add_argument("--rate", type=float, required=True, help="offered turns/s of the open-loop phase")
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    trees = []
    for spec in args.tree:
        root, *assignments = spec.split("+")
        if not (Path(root) / "app" / "cli.py").exists() or not all("=" in a for a in assignments):
            p.error(f"{spec}: CHECKOUT[+NAME=VALUE...]")
        trees.append((Path(root).resolve(), dict(a.split("=", 1) for a in assignments), spec))
    variants = [{"label": spec, "rounds": []} for _, _, spec in trees]

    async def run() -> None:
        for i in range(args.repeat):
            # The order turns every round (A B, B A, ...): the checkout that goes first in a
            # round was slower in 9 of 10 rounds whichever it was (two runs of 5 rounds, the
            # same two checkouts, each order once), so a fixed order favours the second.
            order = list(zip(trees, variants))
            for (root, env, _), variant in (order if i % 2 == 0 else order[::-1]):
                url = await asyncio.to_thread(_bench_database, "agentrm_bench_timing")
                variant["rounds"].append(await one_round(root, url, args.rate, args.seconds, args.agents,
                                                         args.workers, env))
                print(to_markdown({"variants": [variant]}).splitlines()[-2], file=sys.stderr, flush=True)
    lb.run_loop(run())
    result = {"settings": vars(args) | {"json": None, "tree": args.tree}, "variants": variants}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    print(to_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

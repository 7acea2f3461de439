"""`agentrm bench peers --quick` runs end to end with what needs no install (the provider
called directly, and AgentRM): a real server on a database of its own, the fake providers,
both workloads; it prints the report's keys and writes it. The LiteLLM and Portkey peers
are installed by the benchmark itself, never by the tests."""
from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def test_bench_peers_quick_direct_and_agentrm(fresh_database, tmp_path):
    env = {**os.environ, "DATABASE_URL": fresh_database, "AGENTRM_DATA_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT)])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "bench", "peers", "--quick", "--peers", "direct,agentrm", "--no-install",
        "--workloads", "overhead,rates", "--rate-seconds", "3", "--json", "--out", str(tmp_path / "out"), cwd=ROOT,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, err.decode()[-2000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert {"settings", "load_average", "peers", "overhead", "overhead_runs", "rate_limits", "rate_runs"} <= set(result)
    assert set(result["peers"]) == {"direct", "agentrm"}
    assert all(p["status"] == "ok" and p["version"] for p in result["peers"].values())

    # Overhead: every client count, streamed and not, for both; every AgentRM call completed.
    overhead = {(r["peer"], r["clients"], r["stream"]): r for r in result["overhead"]}
    assert set(overhead) == {(p, c, s) for p in ("direct", "agentrm") for c in (1, 8) for s in (False, True)}
    for (peer, clients, _stream), row in overhead.items():
        assert row["errors"] == 0, row
        assert row["calls"] == (20 if clients == 1 else 40)
        assert row["p50_ms"]["median"] > 0 and row["calls_per_s"]["median"] > 0
        if peer == "agentrm":
            assert row["added_p50_ms"] is not None and row["cpu_s_per_1000"]["median"] > 0

    # Rate limits: the three provider limiters, each with both; AgentRM holds the limit.
    rates = {(r["peer"], r["limiter"]): r for r in result["rate_limits"]}
    assert set(rates) == {(p, k) for p in ("direct", "agentrm")
                          for k in ("token_bucket", "sliding_window", "fixed_window")}
    for (peer, _limiter), row in rates.items():
        assert row["client_ok"]["median"] > 0
        if peer == "agentrm":
            assert row["provider_429"]["median"] == 0 and row["client_429"]["median"] == 0

    written = json.loads((tmp_path / "out" / "peers.json").read_text())
    assert written["overhead"] == result["overhead"]
    assert (tmp_path / "out" / "peers.md").read_text().startswith("# Peers")


async def test_bench_peers_replicas_three_agentrm_servers_on_one_database(fresh_database, tmp_path):
    """The replicas workload with what needs no install: three `agentrm serve` on one database,
    the clients round robin over them, against each provider limiter."""
    env = {**os.environ, "DATABASE_URL": fresh_database, "AGENTRM_DATA_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT)])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "bench", "peers", "--quick", "--peers", "direct,agentrm", "--no-install",
        "--workloads", "replicas", "--rate-seconds", "3", "--json", "--out", str(tmp_path / "out"), cwd=ROOT,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, err.decode()[-2000:]
    replicas = json.loads(out.decode().strip().splitlines()[-1])["replicas"]
    assert all(p["status"] == "ok" for p in replicas["peers"].values()), replicas["peers"]
    rows = {(r["peer"], r["limiter"], r["instances"]): r for r in replicas["summary"]}
    limiters = ("token_bucket", "sliding_window", "fixed_window")
    assert set(rows) == ({("direct", k, 1) for k in limiters} | {("agentrm", k, n) for k in limiters for n in (1, 3)}
                         | {("agentrm-token-bucket", "token_bucket", n) for n in (1, 3)})
    for (peer, _limiter, _n), row in rows.items():
        assert row["client_ok"]["median"] > 0
        if peer != "direct":
            assert row["provider_429"]["max"] == 0 and row["cpu_s"]["median"] > 0
    assert "## Replicas" in (tmp_path / "out" / "peers.md").read_text()

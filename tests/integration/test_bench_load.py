"""`agentrm bench load --json` prints the keys outside tools read, and its run of the log
passes `agentrm audit verify` (figures are the benchmark's business, not the test's)."""
from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"turns_per_s", "grant_p50_ms_at_half", "grant_p99_ms_at_half", "grant_p99_ms_at_90", "errors",
        "verify_ok", "raw_insert_per_s"}


async def test_bench_load_prints_the_contract_keys_and_verifies_the_log(fresh_database, tmp_path):
    env = {**os.environ, "DATABASE_URL": fresh_database, "AGENTRM_DATA_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT)])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "bench", "load", "--agents", "8", "--workers", "2", "--seconds", "1",
        "--repeat", "1", "--json", "--out", str(tmp_path / "out"), cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode == 0, err.decode()[-2000:]
    figures = json.loads(out.decode().strip().splitlines()[-1])
    assert set(figures) == KEYS
    assert figures["verify_ok"] is True and figures["errors"] == 0
    assert figures["turns_per_s"] > 0 and figures["raw_insert_per_s"] > 0
    report = json.loads((tmp_path / "out" / "load.json").read_text())
    assert report["rss_mb_against_turns"] and report["spread"]["turns_per_s"]["runs"]
    assert (tmp_path / "out" / "load.md").read_text().startswith("# Load")

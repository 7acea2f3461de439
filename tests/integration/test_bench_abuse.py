"""`agentrm bench abuse` runs end to end on a tiny setting: a real server, honest agents, the
four abusers in their own process, the hostile requests; it prints the keys outside tools
read and writes its report. Whether the targets are met is the benchmark's business (its
exit status says so), not the test's."""
from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"grant_p95_ms", "view_p95_ms", "grant_p95_ratio", "view_p95_ratio", "abusers", "memory", "verdicts",
        "runs", "settings"}


async def test_bench_abuse_runs_end_to_end_and_reports_every_figure(fresh_database, tmp_path):
    env = {**os.environ, "DATABASE_URL": fresh_database, "AGENTRM_DATA_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT)])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "bench", "abuse", "--agents", "3", "--seconds", "3", "--repeat", "1",
        "--hostile", "10", "--json", "--out", str(tmp_path / "out"), cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode in (0, 1), err.decode()[-2000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert KEYS <= set(result)
    assert proc.returncode == (0 if result["verdicts"]["all_met"] else 1)
    (run,) = result["runs"]
    for phase in ("clean", "abuse"):
        assert run[phase]["grant_ms"]["n"] > 0 and not run[phase]["errors"], run[phase]
    abusers = result["abusers"]
    assert abusers["flooder"]["requests"] > 0 and abusers["claimant"]["granted"] > 0
    assert abusers["junk"]["appended"] > 0
    assert abusers["subscriber"]["attempted"] == 200
    memory = result["memory"]
    assert memory["requests"] == 50 and sum(sum(c.values()) for c in memory["answers"].values()) == 50
    assert len(memory["rss_series_mb"]) == memory["passes"] + 1 and memory["rss_series_mb"][0]["server"] > 0
    assert isinstance(memory["growth_mb"], float) and isinstance(memory["late_growth_max_mb"], float)
    assert json.loads((tmp_path / "out" / "abuse.json").read_text())["verdicts"] == result["verdicts"]
    assert (tmp_path / "out" / "abuse.md").read_text().startswith("# Fairness under abuse")

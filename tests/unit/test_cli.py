"""The CLI: every command listed with a line, every subcommand's --help, one-line errors."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def agentrm(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def subcommands(parser=None, prefix=()) -> list[tuple[str, ...]]:
    parser = parser or build_parser()
    found = []
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                found.append((*prefix, name))
                found.extend(subcommands(sub, (*prefix, name)))
    return found


def test_top_level_help_lists_every_command_with_a_line():
    out = agentrm("--help")
    assert out.returncode == 0
    top = [c[0] for c in subcommands() if len(c) == 1]
    assert set(top) >= {"serve", "db", "token", "schema", "bench", "replay", "audit"}
    for name in top:
        line = next((ln for ln in out.stdout.splitlines() if ln.strip().startswith(name + " ")), None)
        assert line is not None and len(line.split(None, 1)[1]) > 10, (name, out.stdout)


@pytest.mark.parametrize("command", [c for c in subcommands() if c != ("bench",)], ids=" ".join)
def test_every_subcommand_has_help_with_its_options(command, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*command, "--help"])
    assert exited.value.code == 0
    assert f"usage: agentrm {' '.join(command)}" in capsys.readouterr().out


def test_bench_help_lists_the_benchmarks_and_each_benchmark_answers_its_own_help():
    listing = agentrm("bench", "--help")
    assert listing.returncode == 0 and all(b in listing.stdout for b in ("scheduler", "system", "context", "live"))
    live = agentrm("bench", "live", "--help")   # once swallowed by the top-level parser
    assert live.returncode == 0 and "usage: agentrm bench live" in live.stdout and "--agents" in live.stdout
    unknown = agentrm("bench", "nope")
    assert unknown.returncode == 2 and "unknown benchmark 'nope'" in unknown.stderr


def test_errors_are_one_line_with_the_fix_unless_debug():
    env = {"DATABASE_URL": "postgresql://nobody:x@127.0.0.1:9/none"}
    failed = agentrm("audit", "verify", env=env)
    assert failed.returncode == 1
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in failed.stderr
    assert "cannot reach the database" in lines[0] and "agentrm db up" in lines[0]
    debug = agentrm("--debug", "audit", "verify", env=env)
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    wrong = agentrm("serve", "--log-format", "yaml")
    assert wrong.returncode == 2 and "invalid choice: 'yaml'" in wrong.stderr

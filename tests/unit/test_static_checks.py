"""The static checks: mypy over the service and the benchmarks, as pyproject.toml's
[tool.mypy] configures it (strict on the domain core), and ruff over the whole tree, as
[tool.ruff] configures it. mypy is slow next to the other unit tests (about a minute on a
cold cache): it type-checks the whole tree; ruff takes a second or so."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_mypy_passes_as_configured() -> None:
    """`python -m mypy` with no arguments, from the project's root: the files it checks and
    how strictly are the configuration's, so this test and a developer's run agree."""
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"mypy found errors:\n{done.stdout}{done.stderr}"


@pytest.mark.timeout(120)
def test_ruff_passes_as_configured() -> None:
    """`python -m ruff check` over the directories the project lints, from its root, so the
    rules and exclusions are the configuration's."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "app", "bench", "clients", "tests"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"ruff found errors:\n{done.stdout}{done.stderr}"

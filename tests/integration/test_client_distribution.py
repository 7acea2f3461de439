"""agentrm-client installs on its own, light: a fresh virtualenv gets the client and its
test extra and none of the server's heavy dependencies, imports it, and passes the
client's own tests there (no server, no database)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
HEAVY = {"torch", "numpy", "sentence-transformers", "transformers", "scipy"}


def run(args: list[str], cwd: Path) -> str:
    # Without the caller's PYTHONPATH or virtualenv, so nothing comes from this checkout.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_client_installs_alone_without_the_servers_dependencies(tmp_path):
    started = time.monotonic()
    # A copy: building in place would leave build/ and egg-info in the checkout.
    source = tmp_path / "agentrm-client"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".*_cache"))
    venv = tmp_path / "venv"
    # This interpreter's pip drives the new environment (--python): seeding a pip into it
    # would double the test's time and install nothing the client needs.
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = str(venv / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", python]
    run([*pip, "install", "-q", f"{source}[test]"], tmp_path)

    installed = {p["name"].lower().replace("_", "-") for p in
                 json.loads(run([*pip, "list", "--format", "json"], tmp_path))}
    assert {"agentrm-client", "httpx", "websockets", "pytest", "pytest-asyncio"} <= installed
    assert not installed & HEAVY, installed & HEAVY
    assert "agentrm" not in installed

    where = run([python, "-c", "from importlib.resources import files; from agentrm_client import AgentRM; "
                               "import agentrm_client; print(agentrm_client.__file__); "
                               "print(files('agentrm_client').joinpath('py.typed').is_file())"], tmp_path).split()
    assert Path(where[0]).is_relative_to(venv) and where[1] == "True"   # the installed copy, typed

    # From tmp_path, so the tests import the installed package and not the copied sources.
    out = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(source / "tests")], tmp_path)
    assert " passed" in out and "failed" not in out
    print(f"fresh venv, install and the client's tests: {time.monotonic() - started:.1f}s")


def test_the_client_carries_the_projects_license():
    assert (CLIENT / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()

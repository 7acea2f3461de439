"""Threat-model rows: the operator token was printed on every `agentrm serve`, also when a
deployment gave it (AGENTRM_OPERATOR_TOKEN) and with JSON logs, so it landed in pod logs;
and a placeholder such as the example Secret's `CHANGE-ME` was accepted as the token."""
from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.bootstrap import fingerprint

ROOT = Path(__file__).resolve().parents[2]
GIVEN = "op_given_9d2f7c4b1a8e6d3f5b0c"


@pytest.mark.parametrize("weak", ["CHANGE-ME", "op_short", "aaaaaaaaaaaaaaaaaaaaaaaaaa", "my-secret-token-for-prod-1"])
def test_a_weak_or_placeholder_operator_token_is_refused_at_start_and_not_echoed(weak):
    env = {**os.environ, "AGENTRM_OPERATOR_TOKEN": weak}
    done = subprocess.run([sys.executable, "-m", "app.cli", "token"], check=False, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert "AGENTRM_OPERATOR_TOKEN" in done.stderr and weak not in done.stderr


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_serve_names_a_given_token_by_its_fingerprint_only(fresh_database, tmp_path, log_format):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": fresh_database, "AGENTRM_OPERATOR_TOKEN": GIVEN,
           "AGENTRM_DATA_DIR": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--no-demo", "--log-format", log_format,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(240):   # up when it answers anything
                with contextlib.suppress(httpx.TransportError):
                    await http.get(f"http://127.0.0.1:{port}/graphql", timeout=2)
                    break
                assert proc.returncode is None, "serve ended before it answered"
                await asyncio.sleep(0.5)
    finally:
        proc.terminate()
        output, _ = await proc.communicate()
    text = output.decode()
    assert fingerprint(GIVEN) in text
    assert GIVEN not in text and GIVEN[:12] not in text

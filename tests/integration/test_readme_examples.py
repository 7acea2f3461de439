"""The README's gateway and client examples, run exactly as written (each block is piped
into the interpreter, as the README says), against a server that serves the demo model as
the default pool's upstream, as `make run` does."""
from __future__ import annotations

import asyncio
import os
import re
import sys

import httpx
import pytest
import pytest_asyncio

from app.domain import events as ev
from tests.conftest import OPERATOR_TOKEN, ROOT, Server

EXAMPLE = re.compile(r"<!-- example: (?P<name>[\w-]+) -->\n```python\n(?P<code>.*?)```", re.S)


def examples() -> dict[str, str]:
    return {m["name"]: m["code"] for m in EXAMPLE.finditer((ROOT / "README.md").read_text())}


@pytest_asyncio.fixture
async def demo_server(fresh_database, monkeypatch):
    srv = Server(fresh_database, demo_upstream=True)
    monkeypatch.setenv("AGENTRM_UPSTREAM_BASE_URL", f"{srv.base}/demo-upstream/v1")
    monkeypatch.delenv("AGENTRM_UPSTREAM_API_KEY", raising=False)
    await srv.start()
    yield srv
    await srv.stop()


async def run_example(server, code: str) -> str:
    env = {**os.environ, "AGENTRM_URL": server.base, "AGENTRM_OPERATOR_TOKEN": OPERATOR_TOKEN}
    env.pop("PROVIDER_BASE_URL", None)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-", cwd=ROOT, env=env,
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(code.encode()), 180)
    assert proc.returncode == 0, err.decode()[-3000:]
    return out.decode()


def test_the_readme_has_the_three_examples():
    assert sorted(examples()) == ["client-direct", "langgraph-node", "openai-gateway"]


@pytest.mark.parametrize("name, printed", [("openai-gateway", "echo: hello gateway"),
                                           ("client-direct", "echo: hello client"),
                                           ("langgraph-node", "echo: hello graph")])
async def test_a_readme_example_runs_as_written(demo_server, name, printed):
    out = await run_example(demo_server, examples()[name])
    assert out.strip() == printed
    model = demo_server.runtime.projector.model
    agent = next(a for a, doc in model.agents.items() if doc["name"] == f"readme-{name.split('-')[0]}")
    turns = [t for t in model.turns.values() if t["agent_id"] == agent]
    assert [t["status"] for t in turns] == [ev.COMPLETED] and turns[0]["pool"] == "default"
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(f"{demo_server.base}/metrics",
                                  headers={"authorization": f"Bearer {OPERATOR_TOKEN}"})).text
    assert re.search(r'^agentrm_grants_total\{level="0",pool="default"\} [1-9]', metrics, re.M), metrics[:2000]
    if name == "openai-gateway":   # the newcomer's call shows in the gateway's own metrics
        assert re.search(r'^agentrm_gateway_request_duration_seconds_count\{format="openai",status="200"\} [1-9]',
                         metrics, re.M)
        assert re.search(r'^agentrm_gateway_upstream_responses_total\{pool="default",status="200"\} [1-9]',
                         metrics, re.M)

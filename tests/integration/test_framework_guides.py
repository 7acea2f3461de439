"""The framework guides' examples (docs/guides/frameworks/*.md), run as written against the
real server and the fake upstream (tests/fake_upstream.py), so the pages cannot drift from
what the frameworks really do.

A page's runnable block starts with `# agentrm-test: NAME`. It is run with the documented
base URL (http://127.0.0.1:8000) replaced by the test server's, and AGENTRM_TOKEN set to a
fresh agent's token; what it prints is checked, and so is what reached the upstream. The
blocks are synchronous scripts (an async one ends in `asyncio.run`), so each runs in a
thread of its own while this loop serves the gateway. One server, one upstream and one pool
serve the whole module."""
from __future__ import annotations

import asyncio
import re
import uuid

import pytest
import pytest_asyncio

from app.domain import events as ev
from tests.client import GraphQLClient
from tests.conftest import OPERATOR_TOKEN, ROOT
from tests.fake_upstream import FakeUpstream

# litellm's own pydantic models, as it builds them: nothing the guides do.
pytestmark = [pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier:UserWarning"),
              pytest.mark.filterwarnings("ignore:Accessing the 'model_.*' attribute:DeprecationWarning")]

PAGES = ROOT / "docs" / "guides" / "frameworks"
BLOCK = re.compile(r"```python\n(?P<code>.*?)```", re.S)
MARKER = re.compile(r"^# agentrm-test: (?P<name>[\w-]+)$", re.M)
DOC_URL = "http://127.0.0.1:8000"
UPSTREAM_KEY = "sk-upstream-frameworks"

CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"
REPLY = " ".join(f"word{i}" for i in range(12))
TOOL_ANSWER = "tool said: 9 to 5"     # the fake's answer to the guides' tool result, "9 to 5"


def plain(path: str) -> tuple[str, list]:
    return REPLY, [(path, False)]


def streamed(path: str) -> tuple[str, list]:
    return REPLY, [(path, True)]


def tools(path: str, stream: bool = False) -> tuple[str, list]:
    return TOOL_ANSWER, [(path, stream), (path, stream)]


# What each example prints, and the requests (route, streamed) the upstream sees, in order.
EXPECTED: dict[str, tuple[str, list]] = {
    "openai-plain": plain(CHAT), "openai-stream": streamed(CHAT), "openai-tools": tools(CHAT),
    "anthropic-plain": plain(MESSAGES), "anthropic-stream": streamed(MESSAGES),
    "anthropic-tools": tools(MESSAGES),
    "langchain-openai-plain": plain(CHAT), "langchain-openai-stream": streamed(CHAT),
    "langchain-openai-tools": tools(CHAT),
    "langchain-anthropic-plain": plain(MESSAGES), "langchain-anthropic-stream": streamed(MESSAGES),
    "langchain-anthropic-tools": tools(MESSAGES),
    "openai-agents-plain": plain(CHAT), "openai-agents-stream": streamed(CHAT), "openai-agents-tools": tools(CHAT),
    "openai-agents-responses": plain("/v1/responses"),
    "litellm-plain": plain(CHAT), "litellm-stream": streamed(CHAT), "litellm-tools": tools(CHAT),
    "pydantic-ai-plain": plain(CHAT), "pydantic-ai-stream": streamed(CHAT), "pydantic-ai-tools": tools(CHAT),
    "pydantic-ai-anthropic-plain": plain(MESSAGES), "pydantic-ai-anthropic-tools": tools(MESSAGES),
}
# Error examples, each run twice: against a pool whose only lane is held (it must print
# "busy, retry after N s" and send nothing upstream), and against a pool with a 1 s
# request timeout whose upstream hangs (it must print "failed: 504 " and the class of the
# exception its page's table names).
ERRORS = {
    "openai-errors": "InternalServerError", "anthropic-errors": "GatewayTimeoutError",
    "langchain-errors": "OpenAIAPIError", "langchain-anthropic-errors": "AnthropicAPIError",
    "openai-agents-errors": "InternalServerError", "litellm-errors": "Timeout",
    "pydantic-ai-errors": "ModelServerError",
}
# Examples that need a route the gateway does not serve yet.
PENDING: dict[str, str] = {}   # an example whose gateway feature has not landed: its skip reason


def examples() -> dict[str, tuple[str, str]]:
    """name -> (page, code) of every marked block of every framework page."""
    found: dict[str, tuple[str, str]] = {}
    for page in sorted(PAGES.glob("*.md")):
        for block in BLOCK.finditer(page.read_text()):
            marker = MARKER.search(block["code"])
            if marker:
                assert marker["name"] not in found, f"{marker['name']} is marked twice"
                found[marker["name"]] = (page.name, block["code"])
    return found


class RecordingUpstream(FakeUpstream):
    """The fake upstream, keeping each request's body beside what it saw."""

    def __init__(self):
        super().__init__(responses=True)   # serves /v1/responses, as OpenAI does
        self.bodies: list[dict] = []

    async def _answer(self, send, wire, body, seen) -> None:
        self.bodies.append(body)
        await super()._answer(send, wire, body, seen)


@pytest_asyncio.fixture(scope="module")
async def upstream():
    fake = await RecordingUpstream().start()
    yield fake
    await fake.stop()


@pytest_asyncio.fixture(scope="module")
async def pools(server, upstream):
    """A roomy pool; a busy one, whose only lane a holder agent can take; a slow one, whose
    calls time out after 1 s."""
    settings = {"roomy": {"lanes": 8}, "busy": {"lanes": 1},
                "slow": {"lanes": 8, "requestTimeoutSeconds": 1.0, "streamIdleTimeoutSeconds": 1.0}}
    names = {kind: f"fw_{kind}_{uuid.uuid4().hex[:8]}" for kind in settings}
    async with GraphQLClient(server, OPERATOR_TOKEN) as operator:
        for kind, name in names.items():
            await operator("mutation($i: PoolInput!) { createPool(input: $i) { name } }", i={
                "name": name, "rpm": 6000, "tpm": 10_000_000, "leaseSeconds": 30.0,
                "upstreamBaseUrl": upstream.url + "/v1", "upstreamApiKey": UPSTREAM_KEY, **settings[kind]})
    return names


async def register(server, pool: str, name: str) -> tuple[str, str]:
    async with GraphQLClient(server, OPERATOR_TOKEN) as operator:
        data = await operator("mutation($i: RegisterAgentInput!) { registerAgent(input: $i) { agent { id } token } }",
                              i={"name": name, "pool": pool})
    return data["registerAgent"]["agent"]["id"], data["registerAgent"]["token"]


async def run_example(server, monkeypatch, name: str, token: str) -> str:
    page, code = examples()[name]
    printed: list[str] = []

    def capture(*args, sep=" ", end="\n", **_kw) -> None:
        printed.append(sep.join(str(a) for a in args) + end)

    monkeypatch.setenv("AGENTRM_TOKEN", token)
    monkeypatch.setenv("LITELLM_OFFLINE_MODE", "true")   # as litellm.md advises: no fetch at import
    compiled = compile(code.replace(DOC_URL, server.base), f"{page}:{name}", "exec")
    await asyncio.wait_for(asyncio.to_thread(exec, compiled, {"__name__": "__main__", "print": capture}), 120)
    return "".join(printed)


def turns_of(server, agent_id: str) -> list[dict]:
    return [t for t in server.runtime.projector.model.turns.values() if t["agent_id"] == agent_id]


def test_every_framework_page_has_its_examples():
    pages = {p.name for p in PAGES.glob("*.md")}
    assert pages == {"index.md", "openai.md", "anthropic.md", "langchain.md",
                     "openai-agents.md", "litellm.md", "pydantic-ai.md"}
    assert sorted(examples()) == sorted([*EXPECTED, *ERRORS])
    for name, (page, code) in examples().items():   # the skipped ones too
        compile(code, f"{page}:{name}", "exec")
    nav = (ROOT / "mkdocs.yml").read_text()
    assert all(f"guides/frameworks/{page}" in nav for page in pages)


def _params(names):
    return [pytest.param(n, marks=pytest.mark.skip(reason=PENDING[n])) if n in PENDING else n for n in names]


@pytest.mark.parametrize("name", _params(EXPECTED))
async def test_a_guide_example_runs_through_the_gateway(server, upstream, pools, monkeypatch, name):
    agent_id, token = await register(server, pools["roomy"], f"guide-{name}")
    before = len(upstream.seen)
    out = await run_example(server, monkeypatch, name, token)
    printed, requests = EXPECTED[name]
    assert out.strip().splitlines()[-1].strip() == printed
    seen, bodies = upstream.seen[before:], upstream.bodies[before:]
    assert [(s.path, s.stream) for s in seen] == requests
    # A streamed chat completion asks for the upstream's usage, which the turn completes with.
    assert all((b.get("stream_options") or {}).get("include_usage") is True
               for s, b in zip(seen, bodies) if s.stream and s.path == CHAT)
    code = examples()[name][1]
    # The upstream got the pool's key, never the agent's token, and the model the page names.
    assert all(s.api_key == UPSTREAM_KEY and f"{s.model}\"" in code for s in seen)
    # Each call took a turn of the agent's, and each turn ended OK.
    assert await server.runtime.projector.wait_until(
        lambda: len(turns_of(server, agent_id)) == len(requests)
        and all(t["status"] == ev.COMPLETED for t in turns_of(server, agent_id)), 30)
    assert [t["outcome"] for t in turns_of(server, agent_id)] == [ev.OK] * len(requests)


@pytest.mark.parametrize("name", ERRORS)
async def test_a_guide_error_example_meets_a_full_queue(server, upstream, pools, monkeypatch, name):
    _holder_id, holder_token = await register(server, pools["busy"], f"holder-{name}")
    agent_id, token = await register(server, pools["busy"], f"guide-{name}")
    before = len(upstream.seen)
    async with GraphQLClient(server, holder_token) as holder:
        held = await holder("mutation { requestTurn(input: {estimatedTokens: 10, waitSeconds: 10}) { id status } }")
        assert held["requestTurn"]["status"] == "GRANTED"
        try:
            out = await run_example(server, monkeypatch, name, token)
        finally:
            await holder("mutation($t: ID!) { completeTurn(input: {turnId: $t, outcome: OK}) { id } }",
                         t=held["requestTurn"]["id"])
    assert re.fullmatch(r"busy, retry after [1-9]\d* s", out.strip()), out
    assert upstream.seen[before:] == []
    assert await server.runtime.projector.wait_until(
        lambda: [t["status"] for t in turns_of(server, agent_id)] == [ev.CANCELLED], 30)


@pytest.mark.parametrize("name", ERRORS)
async def test_a_guide_error_example_meets_a_timeout(server, upstream, pools, monkeypatch, name):
    agent_id, token = await register(server, pools["slow"], f"slow-{name}")
    before = len(upstream.seen)
    upstream.hang_next(1)
    out = await run_example(server, monkeypatch, name, token)
    assert out.strip() == f"failed: 504 {ERRORS[name]}", out
    assert len(upstream.seen[before:]) == 1            # not retried
    await asyncio.wait_for(upstream.seen[before].closed.wait(), 30)   # the gateway closed the hung call
    assert await server.runtime.projector.wait_until(
        lambda: [(t["status"], t["outcome"]) for t in turns_of(server, agent_id)] == [(ev.COMPLETED, ev.ERROR)], 30)

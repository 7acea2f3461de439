"""Fuzzing the GraphQL API with schemathesis: documents generated from the exported schema,
valid and invalid, sent over real HTTP to a real server on its own database, as the
operator and as an agent. For every one: no 5xx, nothing logged as an unhandled error, and
a request that was refused appended nothing (pool decisions of the scheduler's own timers
aside). Bounded: a few examples per operation, so it stays a test, not a campaign."""
from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.graphql import nodes

from tests.conftest import OPERATOR_TOKEN, ROOT, Server, make_database

EXAMPLES = 6
schemathesis.graphql.scalar("JSON", st.dictionaries(st.sampled_from(["retry-after", "x", ""]),
                                                     st.text(max_size=8), max_size=3).map(
    lambda d: nodes.String(str(d).replace("'", '"'))))
schemathesis.graphql.scalar("DateTime", st.datetimes().map(lambda d: nodes.String(d.isoformat())))
SCHEMA = schemathesis.graphql.from_path(ROOT / "schema" / "agentrm.graphql")
# Subscriptions are a WebSocket protocol; over HTTP they are refused (tested elsewhere).
OPERATIONS = SCHEMA.exclude(name_regex=r"^Subscription\.")


class ThreadedServer:
    """A server with an event loop of its own, so that a synchronous test can call it."""

    def __init__(self, url: str):
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="fuzz-server", daemon=True)
        self.url = url

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self.server = await Server(self.url).start()
        self.ready.set()
        self._stop = asyncio.Event()
        await self._stop.wait()
        await self.server.stop()

    def start(self) -> ThreadedServer:
        self.thread.start()
        assert self.ready.wait(120), "the fuzz server did not start"
        return self

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(60)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(60)


@pytest.fixture(scope="module")
def fuzz_server(pg_admin_url):
    srv = ThreadedServer(make_database(pg_admin_url, "agentrm_fuzz")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def agent_token(fuzz_server) -> str:
    response = httpx.post(fuzz_server.server.http, headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
                          json={"query": 'mutation { registerAgent(input: {name: "fuzzed"}) { token } }'})
    return response.json()["data"]["registerAgent"]["token"]


def refused(body: dict) -> bool:
    """Every root field of the answer failed (or the document never ran)."""
    return bool(body.get("errors")) and not any(v is not None for v in (body.get("data") or {}).values())


def check(case, fuzz_server, token: str, caplog) -> None:
    rt = fuzz_server.server.runtime
    head = fuzz_server.run(rt.store.head())
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        response = case.call(base_url=fuzz_server.server.http, headers={"Authorization": f"Bearer {token}"},
                             timeout=60)
    assert response.status_code < 500, (case.body, response.text[:500])
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, (case.body, [r.getMessage()[:300] for r in errors])
    body = response.json()
    for error in body.get("errors") or []:
        assert "Traceback" not in str(error), error
    if refused(body):
        appended = [e for e in fuzz_server.run(rt.store.read(head, 1000)) if not e.stream.startswith("pool-")]
        assert not appended, (case.body, body, [(e.type, e.stream) for e in appended])


FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


@OPERATIONS.parametrize()
@FUZZ
def test_fuzz_as_operator(case, fuzz_server, caplog):
    check(case, fuzz_server, OPERATOR_TOKEN, caplog)


@OPERATIONS.parametrize()
@FUZZ
def test_fuzz_as_agent(case, fuzz_server, agent_token, caplog):
    check(case, fuzz_server, agent_token, caplog)


def test_the_fuzzed_schema_is_the_exported_one():
    from app.api.schema import schema
    assert (ROOT / "schema" / "agentrm.graphql").read_text().strip() == schema.as_str().strip()
    assert Path(SCHEMA.location or "").name == "agentrm.graphql"

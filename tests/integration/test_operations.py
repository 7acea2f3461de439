"""/metrics, /healthz, /readyz and the JSON logs, on the real server."""
from __future__ import annotations

import io
import json
import logging
import re

import httpx

from app.observability.logs import ContextFilter, JsonFormatter
from tests.client import GraphQLClient
from tests.conftest import OPERATOR_TOKEN
from tests.fake_upstream import FakeUpstream
from tests.integration.test_gateway import MESSAGES, UPSTREAM_KEY, make_agent, make_pool, openai_client

OPERATOR = {"authorization": f"Bearer {OPERATOR_TOKEN}"}   # /metrics is the operator's


def sample(metrics: str, name: str, **labels) -> float | None:
    """The value of one sample of the text exposition format, labels in any order."""
    for line in metrics.splitlines():
        m = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m[1] != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m[2] or ""))
        if found == {k: str(v) for k, v in labels.items()}:
            return float(m[3])
    return None


async def test_health_and_readiness(server):
    async with httpx.AsyncClient() as http:
        health = await http.get(f"{server.base}/healthz")
        ready = await http.get(f"{server.base}/readyz")
    assert health.status_code == 200 and health.json()["ok"] is True
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert ready.json()["position"] >= ready.json()["head"] > 0


async def test_metrics_count_what_the_log_says(server, operator):
    fake = await FakeUpstream().start()
    try:
        pool = await make_pool(operator, fake, lanes=3)
        agent_id, token = await make_agent(operator, pool)
        async with GraphQLClient(server, token) as agent:
            turn = (await agent("mutation { requestTurn(input: {estimatedTokens: 10, waitSeconds: 10}) { id } }"))
            await agent("mutation($t: ID!) { completeTurn(input: {turnId: $t, outcome: RATE_LIMITED, "
                        "retryAfterSeconds: 30}) { id } }", t=turn["requestTurn"]["id"])
            queued = await agent("mutation { requestTurn(input: {estimatedTokens: 10}) { id status } }")
        assert queued["requestTurn"]["status"] == "QUEUED"   # its agent is paused: it waits
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"{server.base}/metrics", headers=OPERATOR)).text
        assert sample(text, "agentrm_grants_total", pool=pool, level=0) == 1
        assert sample(text, "agentrm_rate_limited_total", pool=pool) == 1
        # An agent's own report pauses only that agent (a claim), not the pool.
        assert sample(text, "agentrm_scoped_pauses_total", pool=pool, scope="agent") == 1
        assert sample(text, "agentrm_pauses_total", pool=pool) is None
        assert sample(text, "agentrm_pool_paused", pool=pool) == 0
        assert sample(text, "agentrm_pool_paused_seconds_remaining", pool=pool) == 0
        assert sample(text, "agentrm_queue_depth", pool=pool, level=0) == 1
        assert sample(text, "agentrm_lanes", pool=pool) == 3 and sample(text, "agentrm_lanes_busy", pool=pool) == 0
        assert sample(text, "agentrm_grant_latency_seconds_count", pool=pool) == 1
        assert sample(text, "agentrm_agents", pool=pool, state="ACTIVE") == 1
        assert sample(text, "agentrm_projection_lag_positions") is not None
        assert sample(text, "agentrm_projection_position") <= sample(text, "agentrm_log_head_position")
        # The collector's pauses in this process: the suite has collected by now.
        assert sum(sample(text, "agentrm_gc_pause_seconds_count", generation=g) for g in range(3)) > 0
        async with GraphQLClient(server, token) as agent:
            await agent("mutation($t: ID!) { cancelTurn(turnId: $t) { id } }", t=queued["requestTurn"]["id"])
    finally:
        await fake.stop()


async def test_json_logs_carry_the_ids_and_never_the_upstream_key(server, operator):
    fake = await FakeUpstream().start()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        pool = await make_pool(operator, fake)
        agent_id, token = await make_agent(operator, pool)
        client = openai_client(server, token)
        await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16,
                                             extra_headers={"x-request-id": "req-123", "x-agentrm-run-id": "r-9"})
        await client.close()
        async with GraphQLClient(server, "op_test_token_7f3a9c1e5b") as op:
            pools = await op("{ pools { name upstreamBaseUrl hasUpstreamApiKey } }")
            events = await op("query { events(after: 0, limit: 1000, types: [\"PoolCreated\"]) { data } }")
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        await fake.stop()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    served = [r for r in lines if r["message"] == "gateway request" and r.get("request_id") == "req-123"]
    assert len(served) == 1
    record = served[0]
    assert (record["agent_id"], record["pool"], record["run_id"], record["status"]) == (agent_id, pool, "r-9", 200)
    assert record["turn_id"] and record["level"] == "info" and record["logger"] == "agentrm.gateway"
    # The upstream key is in no log line, no query answer and no event.
    assert UPSTREAM_KEY not in stream.getvalue()
    assert UPSTREAM_KEY not in json.dumps(pools) and UPSTREAM_KEY not in json.dumps(events)
    mine = next(p for p in pools["pools"] if p["name"] == pool)
    assert mine["hasUpstreamApiKey"] is True


async def test_readyz_says_not_ready_while_the_database_refuses_connections(fresh_database, pg_admin_url):
    """A real outage: the server's database stops accepting connections and its sessions
    are ended. /readyz answers 503 with the reason, /healthz still 200; then it recovers."""
    import asyncpg

    from tests.conftest import Server
    name = fresh_database.rsplit("/", 1)[1]
    srv = await Server(fresh_database).start()
    admin = await asyncpg.connect(pg_admin_url)
    try:
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{srv.base}/readyz")).status_code == 200
            await admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE datname = $1 AND pid <> pg_backend_pid()", name)
            down = await http.get(f"{srv.base}/readyz")
            assert down.status_code == 503 and "database unreachable" in down.json()["reason"]
            assert (await http.get(f"{srv.base}/healthz")).status_code == 200
            await admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
            up = await http.get(f"{srv.base}/readyz")
            assert up.status_code == 200 and up.json()["ready"] is True
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
        await admin.close()
        await srv.stop()

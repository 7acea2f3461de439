"""Audit and replay against a run driven through the real server and the real database:
the CLI commands, invariant checks on a forged copy of the log, the what-if replay of a
recorded run under its own settings, turn stories, and gapless subscription resumes."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid

import asyncpg
import pytest

from app.audit import load_records, workload_records
from app.audit.verify import verify
from app.audit.whatif import counterfactual_settings, extract_workload, what_if
from app.eventstore.model import NewEvent
from tests.client import COMPLETE, CREATE_POOL, REQUEST, GraphQLClient, GraphQLError, register
from tests.conftest import OPERATOR_TOKEN


async def agentrm(url: str, *args: str) -> tuple[int, str]:
    """Run the CLI as an operator would, without blocking the server's event loop."""
    env = {**os.environ, "DATABASE_URL": url}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "app.cli", *args, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    return proc.returncode, out.decode()


async def _agent_turns(server, token: str, turns: int, log: list) -> None:
    async with GraphQLClient(server, token) as agent:
        for _ in range(turns):
            turn = (await agent(REQUEST, est=300, out=100, wait=60))["requestTurn"]
            assert turn["status"] == "GRANTED"
            await asyncio.sleep(0.05)        # the "LLM call"
            await agent(COMPLETE, id=turn["id"], outcome="OK", p=250, c=80)
            log.append(turn["id"])


@pytest.fixture(scope="module")
def run_state() -> dict:
    return {}


@pytest.fixture
async def recorded_run(server, operator, run_state) -> dict:
    """3 agents x 4 turns on 2 lanes (so turns queue), and one hung call reaped by lease
    while the others are idle. Built once per module. The 5 s lease is far longer than
    any real call here, so on a loaded machine too exactly one turn is reaped."""
    if run_state:
        return run_state
    pool = f"audit_{uuid.uuid4().hex[:8]}"
    await operator(CREATE_POOL, name=pool, lanes=2, rpm=60000, tpm=10_000_000, lease=5.0, boost=None)
    agents = [await register(operator, f"a{i}", pool) for i in range(3)]
    first = await server.runtime.store.head() + 1
    done: list[str] = []
    await asyncio.gather(*(_agent_turns(server, token, 2, done) for _, token in agents))
    async with GraphQLClient(server, agents[2][1]) as hung:
        reaped = (await hung(REQUEST, est=300, out=100, wait=30))["requestTurn"]
        async with hung.subscribe("subscription($id: ID!) { turn(turnId: $id) { status } }", id=reaped["id"]) as sub:
            status = (await sub.next())["turn"]["status"]
            while status != "REAPED":        # the reaper frees the lane when the lease runs out
                assert status == "GRANTED", status
                status = (await sub.next(timeout=30))["turn"]["status"]
    await asyncio.gather(*(_agent_turns(server, token, 2, done) for _, token in agents))
    run_state.update(pool=pool, first=first, last=await server.runtime.store.head(), done=done,
                     reaped=reaped["id"])
    return run_state


async def test_replay_under_the_recorded_settings_reproduces_the_real_run(server, recorded_run):
    pool = recorded_run["pool"]
    records = await workload_records(server.runtime.store, pool)
    w = extract_workload(records, pool)
    assert len(w.turns) == 13 and [s.reaped for s in w.turns.values()].count(True) == 1
    report = what_if(w, w.settings)
    assert report.grants_compared == 12 and report.same_grant_order, report.first_divergence
    assert report.actual_grants == report.whatif_grants
    assert ((report.whatif.completed_ok, report.whatif.reaped)
            == (report.actual.completed_ok, report.actual.reaped) == (12, 1))
    one_lane = what_if(w, counterfactual_settings(w.settings, lanes=1))
    assert one_lane.whatif.completed_ok == 12 and one_lane.whatif.lane_seconds > 0

    code, out = await agentrm(server.url, "replay", "whatif", "--pool", pool, "--lanes", "1", "--json")
    assert code == 0, out
    body = json.loads(out)
    assert body["settings"]["lanes"] == 1 and body["actual"]["completed_ok"] == 12
    code, out = await agentrm(server.url, "replay", "whatif", "--pool", pool)
    assert code == 0 and "grant order and lanes of 12 turns with known durations: identical" in out, out
    # Old policy against new on the same recorded log, from the command line.
    assert w.settings.policy == "deadline"
    code, out = await agentrm(server.url, "replay", "whatif", "--pool", pool, "--policy", "mlfq", "--json")
    assert code == 0, out
    body = json.loads(out)
    assert body["settings"]["policy"] == "mlfq" and "class_slack_seconds" not in body["settings"]
    assert body["whatif"]["completed_ok"] == 12
    code, out = await agentrm(server.url, "replay", "whatif", "--pool", pool, "--policy", "deadline",
                              "--class-slack", "0,30,60", "--run-slack", "2", "--json")
    assert code == 0, out
    body = json.loads(out)
    assert body["settings"]["class_slack_seconds"] == [0.0, 30.0, 60.0]
    assert body["settings"]["run_slack_per_service"] == 2.0 and body["whatif"]["completed_ok"] == 12
    code, out = await agentrm(server.url, "replay", "whatif", "--pool", pool, "--policy", "deadline",
                              "--output-credit", "5", "--output-credit-cap", "12", "--json")
    assert code == 0, out
    body = json.loads(out)
    assert (body["settings"]["output_credit_per_ktoken"], body["settings"]["output_credit_cap_seconds"]) == (5.0, 12.0)
    code, out = await agentrm(server.url, "replay", "whatif", "--pool", pool, "--class-slack", "0,x,1")
    assert code == 2, out
    code, out = await agentrm(server.url, "replay", "whatif", "--pool", pool, "--policy", "deadline",
                              "--output-credit", "-1")
    assert code == 2 and "outputCredit" in out, out


async def test_verify_passes_on_the_live_log_and_catches_a_forged_copy(server, recorded_run, fresh_database):
    pool = recorded_run["pool"]
    code, out = await agentrm(server.url, "audit", "verify", "--pool", pool)
    assert code == 0 and "all invariants hold" in out, out

    # Copy the run into an empty database with one forged event: the hung turn reaped
    # half-way through its lease, right after its grant. Versions of the pool stream are
    # renumbered because the log is append-only (no UPDATE, no DELETE: a trigger refuses).
    source = await asyncpg.connect(server.url)
    target = await asyncpg.connect(fresh_database)
    try:
        rows = await source.fetch("SELECT stream, type, data::text, metadata::text, recorded_at FROM events "
                                  "WHERE stream = $1 OR data->>'pool' = $2 ORDER BY position",
                                  f"pool-{pool}", pool)
        versions: dict[str, int] = {}
        forged_position = None

        async def insert(stream, type_, data, metadata, recorded_at):
            versions[stream] = versions.get(stream, -1) + 1
            return await target.fetchval(
                "INSERT INTO events (stream, version, type, data, metadata, recorded_at) "
                "VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6) RETURNING position",
                stream, versions[stream], type_, data, metadata, recorded_at)
        for stream, type_, data, metadata, recorded_at in rows:
            await insert(stream, type_, data, metadata, recorded_at)
            d = json.loads(data)
            if type_ == "TurnGranted" and d["turn_id"] == recorded_run["reaped"]:
                early = {"turn_id": d["turn_id"], "agent_id": d["agent_id"], "lane": d["lane"],
                         "lease_expires_at": d["lease_expires_at"], "granted_at": d["at"], "at": d["at"] + 0.5}
                forged_position = await insert(stream, "TurnReaped", json.dumps(early), "{}", recorded_at)
        with pytest.raises(asyncpg.RaiseError):
            await target.execute("DELETE FROM events WHERE position = $1", forged_position)
    finally:
        await source.close()
        await target.close()
    code, out = await agentrm(fresh_database, "audit", "verify", "--pool", pool)
    assert code == 1, out
    assert f"VIOLATION at position {forged_position} (TurnReaped in pool-{pool})" in out
    assert "before its lease expired" in out


async def test_verify_is_pure_over_records_of_the_real_log(server, recorded_run):
    records = await load_records(server.runtime.store, streams=[f"pool-{recorded_run['pool']}"])
    report = verify(records)
    assert report.ok and report.decisions_checked > 40


async def test_explain_tells_a_queued_turn_and_a_reaped_turn(server, recorded_run, operator):
    code, out = await agentrm(server.url, "audit", "explain", "--turn", recorded_run["reaped"])
    assert code == 0, out
    assert "It was reaped at" in out and "its lease expired at" in out and "never sent a heartbeat" in out

    async def story(turn_id: str) -> list[str]:
        return (await operator("query($id: ID!) { explainTurn(turnId: $id) }", id=turn_id))["explainTurn"]
    stories = [await story(t) for t in recorded_run["done"]]
    assert all(any(line.startswith("It completed with outcome OK") for line in s) for s in stories)
    waited = [s for s in stories if any("when lane" in line and "was freed: turn" in line for line in s)]
    assert waited, "with 3 agents on 2 lanes some turn must have waited for a lane"
    assert any("turn(s) were ahead of it" in line or "no turn was ahead" in line for line in waited[0])
    assert any(line.startswith("Rate-limit state at the grant:") for line in waited[0])
    code, out = await agentrm(server.url, "audit", "explain", "--turn", "no-such-turn")
    assert code == 1 and "no such turn" in out


async def test_export_writes_one_json_line_per_event(server, recorded_run, tmp_path):
    first, last = recorded_run["first"], recorded_run["first"] + 19
    out_file = tmp_path / "audit.jsonl"
    code, out = await agentrm(server.url, "audit", "export", "--from", str(first), "--to", str(last),
                              "--out", str(out_file))
    assert code == 0, out
    lines = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [e["position"] for e in lines] == list(range(first, last + 1))
    assert all(set(e) == {"position", "stream", "version", "type", "data", "metadata", "recorded_at"} for e in lines)


async def test_replay_check_at_and_step(server, recorded_run):
    code, out = await agentrm(server.url, "replay", "check", "--pool", recorded_run["pool"])
    assert code == 0 and "match:           yes" in out, out
    pool, middle = recorded_run["pool"], recorded_run["first"] + 12
    code, out = await agentrm(server.url, "replay", "at", "--position", str(middle), "--pool", pool)
    assert code == 0 and f"pool {pool} at position" in out and "rate budget:" in out, out
    code, out = await agentrm(server.url, "replay", "step", "--from", str(recorded_run["first"]), "--count", "6",
                              "--pool", pool)
    assert code == 0, out
    assert len([line for line in out.splitlines() if line.startswith("#")]) == 6
    assert len([line for line in out.splitlines() if line.startswith("    lanes [")]) == 6


# -- GraphQL: the console's what-if and turn story --------------------------------------------

async def _execute(server, query: str, token: str, **variables) -> dict:
    """Over real HTTP, with the caller's bearer token."""
    async with GraphQLClient(server, token) as client:
        return await client(query, **variables)


WHAT_IF = """query($pool: String!, $lanes: Int, $policy: String) {
  whatIf(pool: $pool, lanes: $lanes, policy: $policy) { pool sameGrantOrder grantsCompared firstDivergence
    settings { lanes policy levels } recordedSettings { lanes }
    actual { completedOk reaped latencyP50 laneWaste throughputPerMinute rateLimited }
    whatIf { completedOk reaped latencyP50 laneWaste throughputPerMinute rateLimited } } }"""


async def test_graphql_what_if_is_for_the_operator(server, operator, recorded_run):
    pool = recorded_run["pool"]
    own = (await operator(WHAT_IF, pool=pool))["whatIf"]
    fifo = (await operator(WHAT_IF, pool=pool, lanes=1, policy="fifo"))["whatIf"]
    assert own["sameGrantOrder"] and own["grantsCompared"] == 12
    assert own["actual"]["completedOk"] == own["whatIf"]["completedOk"] == 12
    assert fifo["settings"] == {"lanes": 1, "policy": "fifo", "levels": 1} and fifo["recordedSettings"]["lanes"] == 2
    _, agent_token = await register(operator, "nosy", pool)
    with pytest.raises(GraphQLError) as denied:
        await _execute(server, WHAT_IF, agent_token, pool=pool)
    assert denied.value.code == "FORBIDDEN"
    with pytest.raises(GraphQLError) as missing:
        await _execute(server, WHAT_IF, OPERATOR_TOKEN, pool="no_such_pool")
    assert missing.value.code == "NOT_FOUND"


WINDOW = """query($pool: String!, $from: Int, $to: Int) {
  whatIf(pool: $pool, fromPosition: $from, toPosition: $to) { fromPosition toPosition grantsCompared
    actual { turns completedOk reaped } whatIf { turns completedOk reaped } } }"""


async def test_graphql_what_if_over_windows_of_positions(server, operator, recorded_run):
    pool, first, last = recorded_run["pool"], recorded_run["first"], recorded_run["last"]
    requested = [e["position"] for e in (await operator(
        "query($a: Int!) { events(after: $a, limit: 1000, types: [\"TurnRequested\"]) { position data } }",
        a=first - 1))["events"] if e["data"]["pool"] == pool and e["position"] <= last]
    assert len(requested) == 13
    middle = requested[5]                      # the first six requests; the hung turn comes later
    early = (await operator(WINDOW, pool=pool, **{"from": first, "to": middle}))["whatIf"]
    late = (await operator(WINDOW, pool=pool, **{"from": middle + 1, "to": last}))["whatIf"]
    assert (early["fromPosition"], early["toPosition"]) == (first, middle)
    assert (late["fromPosition"], late["toPosition"]) == (middle + 1, last)
    assert early["actual"] == early["whatIf"] == {"turns": 6, "completedOk": 6, "reaped": 0}
    assert late["actual"] == late["whatIf"] == {"turns": 7, "completedOk": 6, "reaped": 1}
    assert early["grantsCompared"] == 6 and late["grantsCompared"] == 6
    for window in ({"from": middle, "to": first}, {"from": -1, "to": last}):
        with pytest.raises(GraphQLError) as err:
            await operator(WINDOW, pool=pool, **window)
        assert err.value.code == "BAD_USER_INPUT", (window, err.value.errors)


# -- subscriptions resume without a gap or a repeat ------------------------------------------

SUBSCRIBE = "subscription($after: Int, $types: [String!]) { events(after: $after, types: $types) { position type } }"


async def test_events_subscription_resumes_after_cut_connections_under_concurrent_appends(server, operator):
    store, kind, total = server.runtime.store, f"AuditProbe{uuid.uuid4().hex[:6]}", 120
    start = await store.head()
    appended: list[int] = []

    async def writer():
        for i in range(total):
            recorded = await store.append([NewEvent(f"probe-{uuid.uuid4().hex[:8]}", kind, {"n": i})])
            appended.append(recorded[0].position)
            await asyncio.sleep(0.002 if i % 10 else 0.02)

    seen: list[int] = []
    writing = asyncio.create_task(writer())
    cuts = 0
    while len(seen) < total:
        after = seen[-1] if seen else start
        async with operator.subscribe(SUBSCRIBE, after=after, types=[kind]) as sub:
            for _ in range(7):               # read a few events, then drop the connection mid-stream
                if len(seen) == total:
                    break
                event = (await sub.next(timeout=30))["events"]
                assert event["type"] == kind
                seen.append(event["position"])
        cuts += 1
    await writing
    assert cuts >= total // 7
    assert seen == appended, "resuming from the last position seen must give every event exactly once"

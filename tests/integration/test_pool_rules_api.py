"""The scheduling rules' settings through GraphQL createPool, over real HTTP against the real
database: what is given is stored, shown and obeyed; what is left out takes its default;
a bad value is refused with its reason and creates nothing. And Turn.runId."""
from __future__ import annotations

import pytest

from app.domain.settings import DEFAULTED, PoolSettings
from tests.client import (
    COMPLETE,
    HEARTBEAT,
    TURN_FIELDS,
    GraphQLClient,
    GraphQLError,
    appended_about,
    register,
)
from tests.integration.test_api import events_of, head, unique

RULE_FIELDS = ("policy classSlackSeconds runSlackPerService runSlackCapSeconds sizeSlackPerKtoken "
               "sizeSlackCapSeconds runForgetSeconds adaptiveLanes adaptiveLanesInitial adaptiveLanesMinimum "
               "stallTimeoutSeconds outageAfterSilentReaps probeBackoffCap outputCreditPerKtoken "
               "outputCreditCapSeconds agentBacklogSlackSeconds agentBacklogSlackCapSeconds lightAgentReserve")
CREATE = f"mutation($i: PoolInput!) {{ createPool(input: $i) {{ name lanes {RULE_FIELDS} }} }}"
POOLS = f"{{ pools {{ name {RULE_FIELDS} }} }}"
BASE = {"lanes": 8, "rpm": 60_000, "tpm": 10_000_000, "leaseSeconds": 30}

GIVEN = {"policy": "DEADLINE", "classSlackSeconds": [0.0, 2.5, 9.0], "runSlackPerService": 1.5,
         "runSlackCapSeconds": 40.0, "sizeSlackPerKtoken": 0.5, "sizeSlackCapSeconds": 10.0,
         "runForgetSeconds": 300.0, "adaptiveLanes": True, "adaptiveLanesInitial": 3,
         "adaptiveLanesMinimum": 1, "stallTimeoutSeconds": 3.0, "outageAfterSilentReaps": 5,
         "probeBackoffCap": 4, "outputCreditPerKtoken": 2.0, "outputCreditCapSeconds": 20.0,
         "agentBacklogSlackSeconds": 1.5, "agentBacklogSlackCapSeconds": 45.0, "lightAgentReserve": 0.25}
STREAM = ("mutation($run: String) { requestTurn(input: {estimatedTokens: 10, maxOutputTokens: 10, "
          f"waitSeconds: 0, streams: true, runId: $run}}) {{ {TURN_FIELDS} runId }} }}")


async def stored(server, pool: str) -> dict:
    first = (await server.runtime.store.read(0, 1, streams=[f"pool-{pool}"]))[0]
    return first.data["settings"]


async def test_every_rule_setting_given_to_create_pool_is_stored_shown_and_obeyed(server, operator):
    name = unique("rules")
    created = (await operator(CREATE, i={"name": name, **BASE, **GIVEN}))["createPool"]
    assert {k: created[k] for k in GIVEN} == GIVEN
    listed = [p for p in (await operator(POOLS))["pools"] if p["name"] == name]
    assert [{k: p[k] for k in GIVEN} for p in listed] == [GIVEN]
    settings = await stored(server, name)
    assert {k: settings[k] for k in ("class_slack_seconds", "run_slack_per_service", "run_slack_cap_seconds",
                                     "size_slack_per_ktoken", "size_slack_cap_seconds", "run_forget_seconds",
                                     "adaptive_lanes_initial", "adaptive_lanes_minimum", "stall_timeout_seconds",
                                     "outage_after_silent_reaps", "probe_backoff_cap", "output_credit_per_ktoken",
                                     "output_credit_cap_seconds", "agent_backlog_slack_seconds",
                                     "agent_backlog_slack_cap_seconds")} == \
        {"class_slack_seconds": [0.0, 2.5, 9.0], "run_slack_per_service": 1.5, "run_slack_cap_seconds": 40.0,
         "size_slack_per_ktoken": 0.5, "size_slack_cap_seconds": 10.0, "run_forget_seconds": 300.0,
         "adaptive_lanes_initial": 3, "adaptive_lanes_minimum": 1, "stall_timeout_seconds": 3.0,
         "outage_after_silent_reaps": 5, "probe_backoff_cap": 4, "output_credit_per_ktoken": 2.0,
         "output_credit_cap_seconds": 20.0, "agent_backlog_slack_seconds": 1.5,
         "agent_backlog_slack_cap_seconds": 45.0}
    assert (settings["policy"], settings["adaptive_lanes"]) == ("deadline", True)

    # Obeyed: 3 of the 8 lanes are in use before any first chunk, and a heartbeat after the
    # first chunk extends a streaming turn by the 3 s stall deadline, not the 30 s lease.
    _, token = await register(operator, "rules-agent", name)
    async with GraphQLClient(server, token) as agent:
        turns = [(await agent(STREAM, run=f"run-{i}"))["requestTurn"] for i in range(4)]
        assert [t["status"] for t in turns] == ["GRANTED", "GRANTED", "GRANTED", "QUEUED"]
        assert [t["runId"] for t in turns] == ["run-0", "run-1", "run-2", "run-3"]
        before = await head(server)
        await agent(HEARTBEAT, id=turns[0]["id"])    # the first chunk
        await agent(HEARTBEAT, id=turns[0]["id"])    # a chunk after it
        extended = await events_of(operator, before, ["LeaseExtended"])
        assert [e["data"]["turn_id"] for e in extended] == [turns[0]["id"]] * 2
        last = extended[-1]["data"]
        assert last["stall_deadline"] is True and last["lease_expires_at"] - last["at"] == pytest.approx(3.0)
        for turn in turns[:3]:
            await agent(COMPLETE, id=turn["id"], outcome="OK", p=10, c=5)


async def test_create_pool_without_the_rule_settings_gets_the_defaults_and_writes_none_of_the_new_keys(
        server, operator):
    name = unique("plain")
    created = (await operator(CREATE, i={"name": name, **BASE}))["createPool"]
    d = PoolSettings()
    assert created == {"name": name, "lanes": 8, "policy": "DEADLINE",
                       "classSlackSeconds": list(d.class_slack_seconds),
                       "runSlackPerService": d.run_slack_per_service, "runSlackCapSeconds": d.run_slack_cap_seconds,
                       "sizeSlackPerKtoken": d.size_slack_per_ktoken,
                       "sizeSlackCapSeconds": d.size_slack_cap_seconds, "runForgetSeconds": d.run_forget_seconds,
                       "adaptiveLanes": True, "adaptiveLanesInitial": 16, "adaptiveLanesMinimum": 2,
                       "stallTimeoutSeconds": 6.0, "outageAfterSilentReaps": 3, "probeBackoffCap": 2,
                       "outputCreditPerKtoken": 3.0, "outputCreditCapSeconds": 30.0,
                       "agentBacklogSlackSeconds": 2.0, "agentBacklogSlackCapSeconds": 60.0,
                       "lightAgentReserve": 0.1}
    # Settings that were constants before are not written at their default: a pool made
    # the old way stores what it always stored.
    assert not set(DEFAULTED) & set(await stored(server, name))


async def test_null_stall_timeout_means_no_stall_deadline_and_other_policies_take_their_own(server, operator):
    name = unique("nostall")
    created = (await operator(CREATE, i={"name": name, **BASE, "stallTimeoutSeconds": None,
                                         "adaptiveLanes": False, "outageAfterSilentReaps": 0}))["createPool"]
    assert (created["stallTimeoutSeconds"], created["adaptiveLanes"], created["outageAfterSilentReaps"]) == \
        (None, False, 0)
    _, token = await register(operator, "nostall-agent", name)
    async with GraphQLClient(server, token) as agent:
        turns = [(await agent(STREAM, run=None))["requestTurn"] for _ in range(8)]
        assert all(t["status"] == "GRANTED" for t in turns) and all(t["runId"] is None for t in turns)
        before = await head(server)
        await agent(HEARTBEAT, id=turns[0]["id"])
        await agent(HEARTBEAT, id=turns[0]["id"])
        last = (await events_of(operator, before, ["LeaseExtended"]))[-1]["data"]
        assert last.get("stall_deadline") is None and last["lease_expires_at"] - last["at"] == pytest.approx(30.0)
        for turn in turns:
            await agent(COMPLETE, id=turn["id"], outcome="OK", p=10, c=5)
    mlfq = unique("mlfq")
    created = (await operator(CREATE, i={"name": mlfq, **BASE, "policy": "MLFQ"}))["createPool"]
    assert created["policy"] == "MLFQ"
    settings = await stored(server, mlfq)
    assert settings["policy"] == "mlfq" and "class_slack_seconds" not in settings


BAD = [
    ({"classSlackSeconds": [0, 6]}, "classSlackSeconds must be three numbers"),
    ({"classSlackSeconds": [0, -1, 12]}, "classSlackSeconds must be three numbers"),
    ({"runSlackPerService": -0.5}, "runSlackPerService must be between 0 and 1000"),
    ({"runSlackCapSeconds": 4000}, "runSlackCapSeconds must be between 0 and 3600"),
    ({"sizeSlackPerKtoken": -1}, "sizeSlackPerKtoken must be between 0 and 3600"),
    ({"sizeSlackCapSeconds": -1}, "sizeSlackCapSeconds must be between 0 and 3600"),
    ({"runForgetSeconds": 0}, "runForgetSeconds must be between 1 and 86400"),
    ({"outputCreditPerKtoken": -1}, "outputCreditPerKtoken must be between 0 and 3600"),
    ({"outputCreditCapSeconds": 4000}, "outputCreditCapSeconds must be between 0 and 3600"),
    ({"agentBacklogSlackSeconds": -1}, "agentBacklogSlackSeconds must be between 0 and 3600"),
    ({"agentBacklogSlackCapSeconds": 4000}, "agentBacklogSlackCapSeconds must be between 0 and 3600"),
    ({"lightAgentReserve": 0.6}, "lightAgentReserve must be between 0 and 0.5"),
    ({"adaptiveLanesInitial": 0}, "adaptiveLanesInitial must be a whole number between 1 and 1024"),
    ({"adaptiveLanesInitial": 4, "adaptiveLanesMinimum": 5},
     "adaptiveLanesMinimum must be a whole number between 1 and adaptiveLanesInitial"),
    ({"adaptiveLanesMinimum": 0}, "adaptiveLanesMinimum must be a whole number between 1 and adaptiveLanesInitial"),
    ({"stallTimeoutSeconds": 0.1}, "stallTimeoutSeconds must be between 0.5 and 3600, or null for none"),
    ({"outageAfterSilentReaps": -1}, "outageAfterSilentReaps must be between 0 (off) and 1000"),
    ({"probeBackoffCap": 17}, "probeBackoffCap must be a whole number between 0 and 16"),
]


@pytest.mark.parametrize("bad,message", BAD, ids=[next(iter(b)) + str(i) for i, (b, _) in enumerate(BAD)])
async def test_a_bad_rule_setting_is_refused_with_its_reason_and_creates_nothing(server, operator, bad, message):
    name = unique("bad")
    before = await head(server)
    with pytest.raises(GraphQLError) as err:
        await operator(CREATE, i={"name": name, **BASE, **bad})
    assert err.value.code == "BAD_USER_INPUT" and message in str(err.value)
    assert await appended_about(server, before, name) == []
    assert name not in {p["name"] for p in (await operator(POOLS))["pools"]}


async def test_an_unknown_policy_is_refused_by_the_schema_and_creates_nothing(server, operator):
    name = unique("bad")
    before = await head(server)
    with pytest.raises(GraphQLError) as err:
        await operator(CREATE, i={"name": name, **BASE, "policy": "LOTTERY"})
    assert "SchedulingPolicy" in str(err.value) and "LOTTERY" in str(err.value)
    assert await appended_about(server, before, name) == []


async def test_turn_run_id_is_in_the_turn_query_and_the_turn_subscription(server, operator):
    name = unique("runs")
    await operator(CREATE, i={"name": name, "lanes": 1, "rpm": 6000, "tpm": 1_000_000})
    _, token = await register(operator, "runs-agent", name)
    request = ("mutation($run: String) { requestTurn(input: {estimatedTokens: 10, maxOutputTokens: 10, "
               f"waitSeconds: 0, runId: $run}}) {{ {TURN_FIELDS} runId }} }}")
    async with GraphQLClient(server, token) as agent:
        first = (await agent(request, run="job-7"))["requestTurn"]
        second = (await agent(request, run=None))["requestTurn"]
        assert (first["status"], first["runId"], second["status"], second["runId"]) == \
            ("GRANTED", "job-7", "QUEUED", None)
        query = "query($id: ID!) { turn(id: $id) { runId status } }"
        assert (await agent(query, id=first["id"]))["turn"] == {"runId": "job-7", "status": "GRANTED"}
        async with agent.subscribe("subscription($id: ID!) { turn(turnId: $id) { status runId } }",
                                   id=first["id"]) as sub:
            assert (await sub.next())["turn"] == {"status": "GRANTED", "runId": "job-7"}
            await agent(COMPLETE, id=first["id"], outcome="OK", p=10, c=5)
            assert (await sub.next())["turn"] == {"status": "COMPLETED", "runId": "job-7"}
        assert (await agent(query, id=second["id"]))["turn"] == {"runId": None, "status": "GRANTED"}
        await agent(COMPLETE, id=second["id"], outcome="OK", p=10, c=5)

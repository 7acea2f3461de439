"""The OpenAI- and Anthropic-compatible gateway, driven by the official SDKs, against a
fake upstream on loopback (tests/fake_upstream.py), through the real server and log."""
from __future__ import annotations

import asyncio
import uuid

import anthropic
import httpx
import openai
import pytest
import pytest_asyncio

from app.domain import events as ev
from tests.conftest import OPERATOR_TOKEN, Server
from tests.fake_upstream import FakeUpstream

UPSTREAM_KEY = "sk-upstream-secret-1234"
REPLY = "".join(f"word{i} " for i in range(12))


@pytest_asyncio.fixture
async def upstream():
    fake = await FakeUpstream().start()
    yield fake
    await fake.stop()


async def make_pool(operator, fake: FakeUpstream, **settings) -> str:
    name = "gw_" + uuid.uuid4().hex[:10]
    fields = {"name": name, "lanes": 4, "rpm": 6000, "tpm": 10_000_000, "leaseSeconds": 30.0,
              "upstreamBaseUrl": fake.url + "/v1", "upstreamApiKey": UPSTREAM_KEY, **settings}
    await operator("mutation($i: PoolInput!) { createPool(input: $i) { name } }", i=fields)
    return name


async def make_agent(operator, pool: str, name: str = "gw-agent") -> tuple[str, str]:
    data = await operator("mutation($i: RegisterAgentInput!) { registerAgent(input: $i) { agent { id } token } }",
                          i={"name": name, "pool": pool})
    return data["registerAgent"]["agent"]["id"], data["registerAgent"]["token"]


def turns_of(server, agent_id: str) -> list[dict]:
    model = server.runtime.projector.model
    return sorted((t for t in model.turns.values() if t["agent_id"] == agent_id), key=lambda t: t["requested_at"])


async def wait_model(server, predicate, timeout: float = 30.0) -> None:
    assert await server.runtime.projector.wait_until(predicate, timeout), "the read model never got there"


async def events_of(server, types: set[str], **match) -> list:
    found = await server.runtime.store.read(0, 100_000, types=sorted(types))
    return [e for e in found if all(e.data.get(k) == v for k, v in match.items())]


def openai_client(server, token: str, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key=token, max_retries=kw.pop("max_retries", 0), **kw)


def anthropic_client(server, token: str, **kw) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.base, api_key=token, max_retries=kw.pop("max_retries", 0), **kw)


MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say twelve words."}]


async def test_openai_sdk_streaming_and_not(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    reply = await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=64,
                                                 extra_headers={"x-agentrm-run-id": "run-42"})
    assert reply.choices[0].message.content == REPLY
    stream = await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=64, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == REPLY
    # The upstream got the pool's key, never the agent's AgentRM token.
    assert [s.api_key for s in upstream.seen] == [UPSTREAM_KEY, UPSTREAM_KEY]
    assert [s.stream for s in upstream.seen] == [False, True]
    turns = turns_of(server, agent_id)
    assert [t["status"] for t in turns] == [ev.COMPLETED, ev.COMPLETED]
    assert [t["streams"] for t in turns] == [False, True]
    done = await events_of(server, {ev.TURN_COMPLETED}, agent_id=agent_id)
    # Usage: the provider's counts, which the fake computes as the gateway's tiktoken does.
    assert [(e.data["prompt_tokens"], e.data["completion_tokens"]) for e in done] == \
        [(upstream.seen[0].prompt_tokens, reply.usage.completion_tokens)] * 2
    assert reply.usage.prompt_tokens == turns[0]["estimated_tokens"] == upstream.seen[0].prompt_tokens
    requested = await events_of(server, {ev.TURN_REQUESTED}, agent_id=agent_id)
    assert requested[0].data.get("run_id") == "run-42" and "run_id" not in requested[1].data
    assert [e.data["max_output_tokens"] for e in requested] == [64, 64]
    # The streamed turn got its full lease from a heartbeat at the first chunk.
    beats = await events_of(server, {ev.LEASE_EXTENDED}, turn_id=turns[1]["turn_id"])
    assert beats and beats[0].data.get("first_chunk_s") is not None
    await client.close()


async def test_anthropic_sdk_streaming_and_not(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool)
    client = anthropic_client(server, token)
    message = await client.messages.create(model="fake-claude", max_tokens=64, system="You are terse.",
                                           messages=[{"role": "user", "content": "Say twelve words."}])
    assert message.content[0].text == REPLY
    async with client.messages.stream(model="fake-claude", max_tokens=64,
                                      messages=[{"role": "user", "content": "Again."}]) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text == REPLY and final.usage.output_tokens == message.usage.output_tokens
    assert [s.api_key for s in upstream.seen] == [UPSTREAM_KEY, UPSTREAM_KEY]
    done = await events_of(server, {ev.TURN_COMPLETED}, agent_id=agent_id)
    assert [e.data["completion_tokens"] for e in done] == [message.usage.output_tokens] * 2
    assert done[0].data["prompt_tokens"] == message.usage.input_tokens
    await client.close()


async def test_a_wrong_or_missing_key_gets_the_providers_401(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    with pytest.raises(openai.AuthenticationError) as raised:
        await openai_client(server, "agt_not-a-token").chat.completions.create(model="m", messages=MESSAGES)
    assert raised.value.status_code == 401 and raised.value.body["code"] == "invalid_api_key"
    with pytest.raises(anthropic.AuthenticationError) as raised:
        await anthropic_client(server, "wrong").messages.create(model="m", max_tokens=5, messages=MESSAGES[1:])
    assert raised.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                            "message": raised.value.body["error"]["message"]}}
    async with httpx.AsyncClient() as http:
        missing = await http.post(f"{server.base}/v1/chat/completions", json={"model": "m", "messages": MESSAGES})
        operator_key = await http.post(f"{server.base}/v1/messages", headers={"x-api-key": OPERATOR_TOKEN},
                                       json={"model": "m", "max_tokens": 5, "messages": MESSAGES[1:]})
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "invalid_request_error"
    assert operator_key.status_code == 403 and operator_key.json()["error"]["type"] == "permission_error"
    # Bad input: a clear provider-shaped 400, nothing appended, nothing sent upstream.
    agent_id, token = await make_agent(operator, pool)
    async with httpx.AsyncClient() as http:
        bad = await http.post(f"{server.base}/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                              content=b"{not json")
        no_max = await http.post(f"{server.base}/v1/messages", headers={"x-api-key": token},
                                 json={"model": "m", "messages": MESSAGES[1:]})
        bad_wait = await http.post(f"{server.base}/v1/chat/completions",
                                   headers={"authorization": f"Bearer {token}", "x-agentrm-max-wait": "soon"},
                                   json={"model": "m", "messages": MESSAGES})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    assert no_max.status_code == 400 and "max_tokens" in no_max.json()["error"]["message"]
    assert bad_wait.status_code == 400 and "x-agentrm-max-wait" in bad_wait.json()["error"]["message"]
    assert await events_of(server, {ev.TURN_REQUESTED}, agent_id=agent_id) == [] and upstream.seen == []


async def test_an_upstream_429_pauses_its_model_and_every_client_is_then_served_once(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    agents = [await make_agent(operator, pool, f"c{i}") for i in range(4)]
    upstream.reject_next(1, retry_after=1)
    first = openai_client(server, agents[0][1])
    with pytest.raises(openai.RateLimitError) as raised:
        await first.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=32,
                                            extra_headers={"x-client-request-id": "a-0"})
    # The client gets what the upstream gave: status, body and retry-after.
    assert raised.value.response.headers["retry-after"] == "1"
    assert raised.value.body["code"] == "rate_limit_exceeded"
    assert "x-ratelimit-remaining-requests" in raised.value.response.headers
    # The call named its model: that model pauses (every call here names it), not the pool.
    paused = await events_of(server, {ev.POOL_PAUSED, ev.MODEL_PAUSED})
    paused = [e for e in paused if e.stream == f"pool-{pool}"]
    assert [e.type for e in paused] == [ev.MODEL_PAUSED]
    assert paused[0].data["retry_after"] == 1.0 and paused[0].data["model"] == "fake-gpt"
    assert paused[0].data["reporter"] == "gateway"

    # Everyone asks now, the rejected client again (its own retry, not the gateway's): all
    # wait their turn during the pause, none is refused, and each call reaches the upstream once.
    async def ask(i: int, token: str):
        client = openai_client(server, token)
        rid = f"{'a' if i == 0 else 'bcd'[i - 1]}-1"
        r = await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=32,
                                                 extra_headers={"x-client-request-id": rid})
        await client.close()
        return r.choices[0].message.content

    answers = await asyncio.gather(*(ask(i, tok) for i, (_aid, tok) in enumerate(agents)))
    assert answers == [REPLY] * 4
    ids = [s.request_id for s in upstream.seen]
    assert sorted(ids) == ["a-0", "a-1", "b-1", "c-1", "d-1"] and len(set(ids)) == len(ids)
    assert [s.status for s in upstream.seen].count(429) == 1
    # Nothing was sent upstream during the pause: every later grant is at or after its end.
    until = paused[0].data["until"]
    grants = [e for e in await events_of(server, {ev.TURN_GRANTED}) if e.stream == f"pool-{pool}"]
    assert len(grants) == 5 and all(g.data["at"] >= until for g in grants[1:])
    await first.close()


async def test_a_client_that_disconnects_mid_stream(server, operator):
    fake = await FakeUpstream(words=400, chunk_interval_s=0.01).start()
    try:
        pool = await make_pool(operator, fake)
        agent_id, token = await make_agent(operator, pool)
        client = openai_client(server, token)
        stream = await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=2000,
                                                      stream=True)
        got = []
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
            if len(got) == 5:
                break
        await stream.close()
        # The gateway closed the upstream request...
        await asyncio.wait_for(fake.seen[0].closed.wait(), 30)
        assert not fake.seen[0].finished
        # ...and completed the turn with the tokens streamed so far.
        await wait_model(server, lambda: turns_of(server, agent_id)[0]["status"] == ev.COMPLETED)
        done = (await events_of(server, {ev.TURN_COMPLETED}, agent_id=agent_id))[0]
        assert done.data["outcome"] == ev.OK
        from app.context.tokens import count_text
        assert count_text("".join(got)) <= done.data["completion_tokens"] < count_text(
            "".join(f"word{i} " for i in range(400)))
        await client.close()
    finally:
        await fake.stop()


async def test_a_hung_stream_becomes_a_suspect_frees_its_lane_and_is_closed_at_the_idle_timeout(
        server, operator, upstream):
    pool = await make_pool(operator, upstream, lanes=1, adaptiveLanes=False, startTimeoutFloorSeconds=0.5,
                           streamIdleTimeoutSeconds=3.0)
    agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    for _ in range(8):   # the model's deadline is learned from 8 first chunks, then it applies
        stream = await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16,
                                                      stream=True)
        async for _chunk in stream:
            pass
    upstream.hang_next(1)

    async def hung_call():
        stream = await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16,
                                                      stream=True)
        async for _chunk in stream:
            pass
    hung = asyncio.create_task(hung_call())
    await upstream.wait_for(lambda seen: len(seen) == 9 and seen[-1].hung)
    # One lane, held by the hung call: the next call is served once the hung one is a suspect.
    reply = await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16)
    assert reply.choices[0].message.content == REPLY
    assert not hung.done()                       # the suspect was not cut: its holder is alive
    with pytest.raises(openai.APIStatusError) as raised:
        await hung
    assert raised.value.status_code == 504 and "streamIdleTimeoutSeconds" in raised.value.message
    await asyncio.wait_for(upstream.seen[8].closed.wait(), 30)   # the gateway closed the hung upstream call
    [suspected] = await events_of(server, {ev.TURN_SUSPECTED}, agent_id=agent_id)
    assert suspected.data["lane_freed"] is True and suspected.data["waited_s"] < 3.0
    assert not await events_of(server, {ev.TURN_REAPED}, agent_id=agent_id)
    turn = next(t for t in turns_of(server, agent_id) if t["turn_id"] == suspected.data["turn_id"])
    assert turn["status"] == ev.COMPLETED and turn["outcome"] == ev.ERROR
    assert len(upstream.seen) == 10              # nothing was sent twice
    await client.close()


async def test_a_stream_that_stalls_is_closed_at_the_idle_timeout_and_charged_what_it_sent(
        server, operator, upstream):
    pool = await make_pool(operator, upstream, leaseSeconds=5.0, streamIdleTimeoutSeconds=2.0)
    agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    upstream.stall_next_after(3)
    stream = await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=64, stream=True)
    got = []
    with pytest.raises(openai.APIError) as raised:     # the stream ends with an error event
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
    assert got == ["word0 ", "word1 ", "word2 "] and "sent nothing for 2 s" in raised.value.message
    await asyncio.wait_for(upstream.seen[0].closed.wait(), 30)   # and the upstream call was closed
    await wait_model(server, lambda: turns_of(server, agent_id)[0]["status"] == ev.COMPLETED)
    turn = turns_of(server, agent_id)[0]
    assert turn["outcome"] == ev.ERROR and turn["completion_tokens"] == 7   # "word0 word1 word2 "
    await client.close()


async def test_max_wait_bounds_the_queue_time_with_a_429_and_an_estimate(server, operator, upstream):
    pool = await make_pool(operator, upstream, lanes=1)
    holder_id, holder_token = await make_agent(operator, pool, "holder")
    _agent_id, token = await make_agent(operator, pool, "waiter")
    from tests.client import GraphQLClient
    async with GraphQLClient(server, holder_token) as holder:
        held = await holder("mutation { requestTurn(input: {estimatedTokens: 10, waitSeconds: 10}) { id status } }")
        assert held["requestTurn"]["status"] == "GRANTED"
        with pytest.raises(openai.RateLimitError) as raised:
            await openai_client(server, token).chat.completions.create(
                model="fake-gpt", messages=MESSAGES, max_tokens=16, extra_headers={"x-agentrm-max-wait": "0.3"})
        assert int(raised.value.response.headers["retry-after"]) >= 1
        assert "estimated wait" in raised.value.message
        assert upstream.seen == []
        waiter_turn = [t for t in server.runtime.projector.model.turns.values() if t["agent_id"] == _agent_id]
        assert [t["status"] for t in waiter_turn] == [ev.CANCELLED]   # it left the queue
        await holder("mutation($t: ID!) { completeTurn(input: {turnId: $t, outcome: OK}) { id } }",
                     t=held["requestTurn"]["id"])


async def test_models_and_recording_the_exchange_in_context(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    models = await client.models.list()
    assert sorted(m.id for m in models.data) == ["fake-claude", "fake-gpt"]
    claude = anthropic_client(server, token)
    assert sorted([m.id async for m in claude.models.list()]) == ["fake-claude", "fake-gpt"]
    await claude.close()
    await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16,
                                         extra_headers={"x-agentrm-record-context": "true"})
    await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=16)
    appended = await events_of(server, {"ContextAppended"}, agent_id=agent_id)
    assert [(e.data["role"], e.data["content"]) for e in appended] == [("user", "Say twelve words."),
                                                                      ("assistant", REPLY)]
    await client.close()


async def test_three_workers_share_one_pool_and_never_exceed_its_rpm(server, operator, database_url):
    """litellm #40291 / #8430: replicas that each count alone admit N times the limit. Here
    three workers (three servers on one log) serve 36 calls against a pool of 30 RPM,
    4,000 TPM; the upstream enforces exactly that limit and must never answer 429."""
    rpm, tpm, calls = 30, 4000, 36
    fake = await FakeUpstream(rpm=rpm, tpm=tpm).start()
    others = [await Server(database_url).start() for _ in range(2)]
    try:
        # The upstream is a token bucket, and the pool says so (the window limiters have
        # their own test: tests/integration/test_rate_shapes.py).
        pool = await make_pool(operator, fake, rpm=rpm, tpm=tpm, lanes=8, limiter="TOKEN_BUCKET")
        agents = [await make_agent(operator, pool, f"w{i}") for i in range(6)]
        workers = [server, *others]

        async def call(i: int):
            worker = workers[i % 3]
            client = openai_client(worker, agents[i % len(agents)][1])
            r = await client.chat.completions.create(model="fake-gpt", messages=MESSAGES, max_tokens=100,
                                                     stream=i % 2 == 0)
            if i % 2 == 0:
                r = "".join([c.choices[0].delta.content or "" async for c in r if c.choices])
            else:
                r = r.choices[0].message.content
            await client.close()
            return r

        answers = await asyncio.gather(*(call(i) for i in range(calls)))
        assert answers == [REPLY] * calls
        statuses = [s.status for s in fake.seen]
        admitted = sorted(s.received_at for s in fake.seen if s.status == 200)
        # The count: what the upstream saw, against what its buckets allow.
        over = [k for k, t in enumerate(admitted, 1) if k > rpm + rpm * (t - admitted[0]) / 60.0 + 1]
        print(f"\nthree workers, one pool of {rpm} rpm / {tpm} tpm: upstream saw {len(statuses)} requests, "
              f"{statuses.count(200)} admitted, {statuses.count(429)} rejected with 429; "
              f"admissions over the bucket bound: {len(over)}")
        assert statuses.count(429) == 0 and len(statuses) == calls and over == []
        served_by = [sum(1 for i in range(calls) if i % 3 == w) for w in range(3)]
        assert served_by == [12, 12, 12]
    finally:
        for other in others:
            await other.stop()
        await fake.stop()


@pytest.mark.parametrize("leaves_at", ["requested", "queued"])
async def test_a_client_that_leaves_while_queued_cancels_its_turn(server, operator, upstream, leaves_at):
    """It leaves right after its TurnRequested (before the scheduler answered), or once the
    scheduler has queued the turn (it has a level): either way the turn is cancelled."""
    pool = await make_pool(operator, upstream, lanes=1)
    _holder_id, holder_token = await make_agent(operator, pool, "holder")
    agent_id, token = await make_agent(operator, pool, "leaver")
    from tests.client import GraphQLClient
    async with GraphQLClient(server, holder_token) as holder:
        held = await holder("mutation { requestTurn(input: {estimatedTokens: 10, waitSeconds: 10}) { id } }")
        http = httpx.AsyncClient()
        call = asyncio.create_task(http.post(f"{server.base}/v1/chat/completions",
                                             headers={"authorization": f"Bearer {token}"},
                                             json={"model": "fake-gpt", "messages": MESSAGES, "max_tokens": 8}))
        def there() -> bool:
            turns = turns_of(server, agent_id)
            return [t["status"] for t in turns] == [ev.QUEUED] and (leaves_at == "requested"
                                                                     or turns[0]["level"] is not None)
        await wait_model(server, there)
        call.cancel()
        await http.aclose()   # the connection closes: the gateway sees the disconnect
        await wait_model(server, lambda: [t["status"] for t in turns_of(server, agent_id)] == [ev.CANCELLED])
        assert upstream.seen == []
        await holder("mutation($t: ID!) { completeTurn(input: {turnId: $t, outcome: OK}) { id } }",
                     t=held["requestTurn"]["id"])

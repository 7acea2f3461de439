"""The gateway's endpoints beyond chat completions and messages, and its answers to paths it
does not serve, driven by the official SDKs through the real server against the fake
upstream (tests/fake_upstream.py)."""
from __future__ import annotations

import agents
import anthropic
import httpx
import openai
import pytest
import pytest_asyncio

from app.context.tokens import count_text
from app.domain import events as ev
from app.gateway.wire import ANTHROPIC
from tests.conftest import OPERATOR_TOKEN
from tests.fake_upstream import FakeUpstream, fake_vector
from tests.integration.test_gateway import (
    REPLY,
    UPSTREAM_KEY,
    anthropic_client,
    events_of,
    make_agent,
    make_pool,
    openai_client,
    turns_of,
    wait_model,
)


@pytest_asyncio.fixture
async def upstream():
    fake = await FakeUpstream().start()
    yield fake
    await fake.stop()


async def test_unknown_paths_and_methods_get_json_errors_in_the_callers_shape(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    _agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    with pytest.raises(openai.NotFoundError) as raised:
        await client.post("/no/such/path", cast_to=object, body={})
    assert raised.value.body == {"message": raised.value.body["message"], "type": "invalid_request_error",
                                 "param": None, "code": "not_found"}
    assert "POST /v1/no/such/path" in raised.value.body["message"]
    claude = anthropic_client(server, token)
    with pytest.raises(anthropic.NotFoundError) as raised_a:
        await claude.post("/v1/no/such/path", cast_to=object, body={})
    assert raised_a.value.body == {"type": "error", "error": {"type": "not_found_error",
                                                              "message": raised_a.value.body["error"]["message"]}}
    async with httpx.AsyncClient() as http:
        wrong = await http.get(f"{server.base}/v1/chat/completions", headers={"authorization": f"Bearer {token}"})
        wrong_a = await http.delete(f"{server.base}/v1/messages", headers={"x-api-key": token,
                                                                            "anthropic-version": "2023-06-01"})
        bare = await http.get(f"{server.base}/v1/nothing")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    assert wrong_a.status_code == 405 and wrong_a.json()["type"] == "error"
    assert wrong_a.json()["error"]["type"] == "invalid_request_error"
    assert bare.status_code == 404 and bare.json()["error"]["type"] == "invalid_request_error"
    assert upstream.seen == []
    await client.close()
    await claude.close()


async def test_one_model_from_the_pools_upstream_list_or_a_404_in_the_wires_shape(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    _agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    found = await client.models.retrieve("fake-gpt")
    assert (found.id, found.object, found.owned_by) == ("fake-gpt", "model", "fake")
    with pytest.raises(openai.NotFoundError) as raised:
        await client.models.retrieve("no-such-model")
    assert raised.value.body["code"] == "model_not_found" and "no-such-model" in raised.value.body["message"]
    with pytest.raises(openai.NotFoundError) as raised:   # an id with a slash reaches the lookup too
        await client.models.retrieve("org/no-such-model")
    assert raised.value.body["code"] == "model_not_found"
    claude = anthropic_client(server, token)
    info = await claude.models.retrieve("fake-claude")
    assert (info.id, info.type, info.display_name) == ("fake-claude", "model", "fake-claude")
    with pytest.raises(anthropic.NotFoundError) as raised_a:
        await claude.models.retrieve("no-such-model")
    assert raised_a.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(openai.AuthenticationError):
        await openai_client(server, "agt_wrong").models.retrieve("fake-gpt")
    with pytest.raises(anthropic.AuthenticationError):
        await anthropic_client(server, "agt_wrong").models.retrieve("fake-gpt")
    await client.close()
    await claude.close()


COUNT_MESSAGES = [{"role": "user", "content": "How many tokens is this?"}]


@pytest.mark.parametrize("upstream_counts", [True, False])
async def test_count_tokens_asks_the_upstream_or_counts_locally_and_takes_no_turn(
        server, operator, upstream_counts):
    fake = await FakeUpstream(count_tokens=upstream_counts).start()
    try:
        pool = await make_pool(operator, fake)
        agent_id, token = await make_agent(operator, pool)
        claude = anthropic_client(server, token)
        counted = await claude.messages.count_tokens(model="fake-claude", system="Be brief.",
                                                     messages=COUNT_MESSAGES)
        expected = ANTHROPIC.count_prompt({"system": "Be brief.", "messages": COUNT_MESSAGES}, "cl100k_base")
        assert counted.input_tokens == expected
        raw = await claude.messages.with_raw_response.count_tokens(model="fake-claude", messages=COUNT_MESSAGES)
        assert raw.headers["x-agentrm-token-count"] == ("upstream" if upstream_counts else "local")
        # Asked of the upstream each time it serves the path; once when it lacks it (remembered).
        assert [s.path for s in fake.seen] == ["/v1/messages/count_tokens"] * (2 if upstream_counts else 0)
        assert all(s.api_key == UPSTREAM_KEY for s in fake.seen)
        assert [t for t in server.runtime.projector.model.turns.values() if t["agent_id"] == agent_id] == []
        with pytest.raises(anthropic.AuthenticationError):
            await anthropic_client(server, "agt_wrong").messages.count_tokens(model="m", messages=COUNT_MESSAGES)
        with pytest.raises(anthropic.PermissionDeniedError):
            await anthropic_client(server, OPERATOR_TOKEN).messages.count_tokens(model="m", messages=COUNT_MESSAGES)
        with pytest.raises(anthropic.BadRequestError) as raised:
            await claude.messages.count_tokens(model="fake-claude", messages=[])
        assert "messages" in raised.value.message
        await claude.close()
    finally:
        await fake.stop()


async def test_embeddings_take_a_turn_and_complete_with_the_providers_prompt_tokens(server, operator, upstream):
    pool = await make_pool(operator, upstream)
    agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    inputs = ["The quick brown fox", "jumps over the lazy dog"]
    made = await client.embeddings.create(model="fake-embed", input=inputs)   # the SDK asks for base64
    assert [list(d.embedding) for d in made.data] == [fake_vector(i) for i in inputs]
    floats = await client.embeddings.create(model="fake-embed", input=[1, 2, 3], encoding_format="float")
    assert floats.data[0].embedding == fake_vector([1, 2, 3]) and floats.usage.prompt_tokens == 3
    expected = sum(count_text(i) for i in inputs)
    assert made.usage.prompt_tokens == expected
    assert [s.api_key for s in upstream.seen] == [UPSTREAM_KEY, UPSTREAM_KEY]
    turns = turns_of(server, agent_id)
    assert [t["status"] for t in turns] == [ev.COMPLETED, ev.COMPLETED]
    assert [t["estimated_tokens"] for t in turns] == [expected, 3]
    done = await events_of(server, {ev.TURN_COMPLETED}, agent_id=agent_id)
    assert [(e.data["prompt_tokens"], e.data["completion_tokens"]) for e in done] == [(expected, 0), (3, 0)]
    requested = await events_of(server, {ev.TURN_REQUESTED}, agent_id=agent_id)
    assert [e.data["max_output_tokens"] for e in requested] == [0, 0]
    with pytest.raises(openai.BadRequestError) as raised:
        await client.embeddings.create(model="fake-embed", input=[{"not": "text"}])
    assert "input must be" in raised.value.message and len(upstream.seen) == 2
    await client.close()


@pytest_asyncio.fixture(params=["native", "translated"])
async def responses_upstream(request):
    fake = await FakeUpstream(responses=request.param == "native").start()
    yield fake
    await fake.stop()


def upstream_paths(fake: FakeUpstream) -> list[str]:
    return [s.path for s in fake.seen]


async def test_responses_streaming_and_not_native_or_over_chat_completions(server, operator, responses_upstream):
    fake = responses_upstream
    native = fake.responses
    pool = await make_pool(operator, fake)
    agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    reply = await client.responses.create(model="fake-gpt", instructions="You are terse.",
                                          input="Say twelve words.", max_output_tokens=64)
    assert reply.output_text == REPLY and reply.status == "completed" and reply.object == "response"
    stream = await client.responses.create(model="fake-gpt", input=[{"role": "user", "content": "Again."}],
                                           max_output_tokens=64, stream=True)
    events = [e async for e in stream]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == REPLY
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    final = events[-1].response
    assert final.output_text == REPLY and final.usage.output_tokens == reply.usage.output_tokens
    # Native: the requests as sent. Translated: one 404 (remembered), then chat completions.
    assert upstream_paths(fake) == ["/v1/responses" if native else "/v1/chat/completions"] * 2
    assert fake.missing == ([] if native else ["/v1/responses"])
    assert [s.stream for s in fake.seen] == [False, True] and all(s.api_key == UPSTREAM_KEY for s in fake.seen)
    assert [s.max_tokens for s in fake.seen] == [64, 64]
    # One turn a call, completed once with the upstream's usage: the 404 was not billed.
    turns = turns_of(server, agent_id)
    assert [(t["status"], t["streams"]) for t in turns] == [(ev.COMPLETED, False), (ev.COMPLETED, True)]
    done = await events_of(server, {ev.TURN_COMPLETED}, agent_id=agent_id)
    assert [(e.data["outcome"], e.data["prompt_tokens"], e.data["completion_tokens"]) for e in done] == \
        [(ev.OK, fake.seen[0].prompt_tokens, reply.usage.output_tokens),
         (ev.OK, fake.seen[1].prompt_tokens, reply.usage.output_tokens)]
    assert (reply.usage.input_tokens, final.usage.input_tokens) == (fake.seen[0].prompt_tokens,
                                                                    fake.seen[1].prompt_tokens)
    await client.close()


CLOCK = {"type": "function", "name": "clock", "description": "The time.",
         "parameters": {"type": "object", "properties": {}}}


async def test_a_tool_call_round_trip_through_responses(server, operator, responses_upstream):
    fake = responses_upstream
    pool = await make_pool(operator, fake)
    _agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    asked = [{"role": "user", "content": "What time is it?"}]
    first = await client.responses.create(model="fake-gpt", input=asked, tools=[CLOCK])
    [call] = first.output
    assert (call.type, call.call_id, call.name, call.arguments) == ("function_call", "call_1", "clock", "{}")
    answered = [*asked, call.model_dump(exclude_none=True),
                {"type": "function_call_output", "call_id": call.call_id, "output": "12:00"}]
    second = await client.responses.create(model="fake-gpt", input=answered, tools=[CLOCK])
    assert second.output_text == "tool said: 12:00"
    # Streamed: the call's arguments as deltas, the call itself in response.completed.
    stream = await client.responses.create(model="fake-gpt", input=asked, tools=[CLOCK], stream=True)
    events = [e async for e in stream]
    assert "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta") == "{}"
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert [(i.type, i.call_id, i.name) for i in added] == [("function_call", "call_1", "clock")]
    [streamed_call] = events[-1].response.output
    assert (streamed_call.call_id, streamed_call.arguments) == ("call_1", "{}")
    stream = await client.responses.create(model="fake-gpt", input=answered, tools=[CLOCK], stream=True)
    text = "".join([e.delta async for e in stream if e.type == "response.output_text.delta"])
    assert text == "tool said: 12:00"
    if not fake.responses:
        chat = [s for s in fake.seen if s.path == "/v1/chat/completions"]
        assert len(chat) == 4 and fake.missing == ["/v1/responses"]
    await client.close()


async def test_what_the_translation_cannot_carry_is_a_400_and_costs_no_tokens(server, operator):
    fake = await FakeUpstream(responses=False).start()
    try:
        pool = await make_pool(operator, fake)
        agent_id, token = await make_agent(operator, pool)
        client = openai_client(server, token)
        # The first call finds out that the upstream lacks /v1/responses: its turn ends with nothing used.
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(model="fake-gpt", input="Find it.", tools=[{"type": "web_search"}])
        assert "web_search" in raised.value.message and raised.value.body["type"] == "invalid_request_error"
        [turn] = turns_of(server, agent_id)
        assert (turn["status"], turn["prompt_tokens"], turn["completion_tokens"]) == (ev.COMPLETED, 0, 0)
        # Known now: refused before any turn, nothing sent upstream.
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(model="fake-gpt", input="Go on.", previous_response_id="resp_1")
        assert "previous_response_id" in raised.value.message
        assert len(turns_of(server, agent_id)) == 1 and fake.seen == [] and fake.missing == ["/v1/responses"]
        await client.close()
    finally:
        await fake.stop()


async def test_an_openai_agents_sdk_agent_with_a_tool_runs_through_the_gateway(server, operator, responses_upstream):
    """The OpenAI Agents SDK with its defaults (the Responses API), pointed at AgentRM: the
    model calls the tool, the SDK runs it and sends its output back, the model answers."""
    fake = responses_upstream
    pool = await make_pool(operator, fake)
    agent_id, token = await make_agent(operator, pool)
    client = openai_client(server, token)
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_tracing_disabled(True)
    ran = []

    @agents.function_tool
    def clock() -> str:
        """The time now."""
        ran.append(True)
        return "12:00"

    agent = agents.Agent(name="timekeeper", instructions="Tell the time.", model="fake-gpt", tools=[clock])
    result = await agents.Runner.run(agent, "What time is it?")
    assert result.final_output == "tool said: 12:00" and ran == [True]
    paths = upstream_paths(fake)
    assert paths == (["/v1/responses"] * 2 if fake.responses else ["/v1/chat/completions"] * 2)
    assert [t["status"] for t in turns_of(server, agent_id)] == [ev.COMPLETED, ev.COMPLETED]
    await client.close()


async def test_a_translated_stream_that_stalls_ends_with_an_error_event_the_sdk_raises(server, operator):
    fake = await FakeUpstream(responses=False).start()
    try:
        pool = await make_pool(operator, fake, leaseSeconds=5.0, streamIdleTimeoutSeconds=2.0)
        agent_id, token = await make_agent(operator, pool)
        client = openai_client(server, token)
        fake.stall_next_after(3)
        stream = await client.responses.create(model="fake-gpt", input="Talk.", max_output_tokens=64, stream=True)
        got = []
        with pytest.raises(openai.APIError) as raised:
            async for event in stream:
                if event.type == "response.output_text.delta":
                    got.append(event.delta)
        assert got == ["word0 ", "word1 ", "word2 "] and "sent nothing for 2 s" in raised.value.message
        await wait_model(server, lambda: turns_of(server, agent_id)[0]["status"] == ev.COMPLETED)
        [turn] = turns_of(server, agent_id)
        assert turn["outcome"] == ev.ERROR and turn["completion_tokens"] == count_text("".join(got))
        await client.close()
    finally:
        await fake.stop()

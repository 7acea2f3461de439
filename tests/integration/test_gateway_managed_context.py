"""Managed context through the gateway: a framework that sends 200k tokens of history to a
model with a 32k window works unchanged (app/gateway/managed_context.py).

Real openai and anthropic SDKs, the real server and log, and a fake upstream whose model
has a 32,768-token window and answers the provider's own context error past it."""
from __future__ import annotations

import random

import anthropic
import openai
import pytest
import pytest_asyncio

from app.gateway.managed_context import CONTEXT_HEADER, CONTEXT_TIERS_HEADER, CONTEXT_TOKENS_HEADER
from tests.conftest import Server
from tests.fake_upstream import FakeUpstream
from tests.integration.test_gateway import anthropic_client, make_agent, make_pool, openai_client
from tests.tool_pairs import paired_openai

WINDOW = 32_768
MAX_TOKENS = 64
BUDGET = WINDOW - MAX_TOKENS
FACT = "The staging deploy password is tangerine-4471."
QUESTION = "What is the staging deploy password?"
WORDS = ("river bolt cedar lantern quartz meadow harbor signal copper violet orbit canyon ember "
         "falcon glacier hollow island juniper kettle ledger marble nectar oyster pepper ribbon saddle "
         "timber umber velvet walnut yonder zephyr anchor basalt cobalt delta estuary fjord granite").split()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) + (str(rng.randrange(100)) if rng.random() < 0.2 else "")
                    for _ in range(words)) + "."


def steps(n: int, seed: int = 7) -> list[tuple]:
    """An abstract conversation of ~500 tokens per step: user and assistant messages, a
    tool call with its result every fifth step, the fact planted early."""
    rng = random.Random(seed)
    out: list[tuple] = []
    for i in range(n):
        if i == 3:
            out.append(("user", f"Please remember this. {FACT}"))
            out.append(("assistant", "Noted."))
        out.append(("user", _text(rng, 180)))
        if i % 5 == 4:
            out.append(("tool", f"call_{i}", _text(rng, 120)))
        out.append(("assistant", _text(rng, 180)))
    return out


def openai_messages(conversation: list[tuple]) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": "You are a careful assistant."}]
    for step in conversation:
        if step[0] == "tool":
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": step[1], "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]})
            messages.append({"role": "tool", "tool_call_id": step[1], "content": step[2]})
        else:
            messages.append({"role": step[0], "content": step[1]})
    return messages


def anthropic_messages(conversation: list[tuple]) -> list[dict]:
    messages: list[dict] = []
    for step in conversation:
        if step[0] == "tool":
            messages.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": step[1], "name": "lookup", "input": {}}]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": step[1], "content": step[2]}]})
        else:
            messages.append({"role": step[0], "content": step[1]})
    return messages


def paired_anthropic(messages: list[dict]) -> bool:
    called: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        for block in m["content"] if isinstance(m["content"], list) else ():
            if block.get("type") == "tool_use":
                called.add(block["id"])
            if block.get("type") == "tool_result":
                if block["tool_use_id"] not in called:
                    return False
                answered.add(block["tool_use_id"])
    return called == answered and messages[0]["role"] == "user"


def held(server, agent_id: str) -> list[tuple[str, str]]:
    state = server.runtime.context.state(agent_id)
    return [(m.role, m.content) for m in sorted(state.cold.messages + state.hot, key=lambda m: m.seq)]


@pytest_asyncio.fixture
async def small_model():
    fake = await FakeUpstream(context_window=WINDOW).start()
    yield fake
    await fake.stop()


@pytest.fixture(scope="module")
def conversation() -> list[tuple]:
    return steps(360)   # ~200k tokens


async def test_openai_sdk_200k_history_on_a_32k_model(server, operator, small_model, conversation, database_url):
    pool = await make_pool(operator, small_model, contextWindowTokens=WINDOW)
    agent_id, token = await make_agent(operator, pool, "managed-openai")
    client = openai_client(server, token, timeout=120)
    messages = openai_messages(conversation) + [{"role": "user", "content": QUESTION}]
    # Unmanaged: the provider's own context error, as the client would get it directly.
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(model="fake-gpt", messages=messages, max_tokens=MAX_TOKENS)
    assert refused.value.code == "context_length_exceeded"
    assert small_model.seen[-1].prompt_tokens > 190_000

    managed = {CONTEXT_HEADER: "managed"}
    raw = await client.chat.completions.with_raw_response.create(
        model="fake-gpt", messages=messages, max_tokens=MAX_TOKENS, extra_headers=managed)
    reply = raw.parse()
    seen = small_model.seen[-1]
    assert seen.status == 200 and seen.prompt_tokens <= BUDGET
    assert int(raw.headers[CONTEXT_TOKENS_HEADER]) == seen.prompt_tokens
    tiers = raw.headers[CONTEXT_TIERS_HEADER].split(",")
    assert {"pinned", "relevant", "recent"} <= set(tiers)
    forwarded = seen.body["messages"]
    assert forwarded[0] == messages[0] and forwarded[-1] == messages[-1]
    assert paired_openai(forwarded)
    assert "tangerine-4471" in str(forwarded), "the planted fact is in the assembled prompt"
    # Every message of the history was appended once (system messages are not kept), plus the answer.
    kept = held(server, agent_id)
    assert len(kept) == len(messages) - 1 + 1 and kept[-1] == ("assistant", reply.choices[0].message.content)

    # The framework resends everything plus its next question: only that is appended.
    messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                 {"role": "user", "content": "And what did we say about copper?"}]
    raw = await client.chat.completions.with_raw_response.create(
        model="fake-gpt", messages=messages, max_tokens=MAX_TOKENS, extra_headers=managed)
    assert small_model.seen[-1].prompt_tokens <= BUDGET and paired_openai(small_model.seen[-1].body["messages"])
    assert len(held(server, agent_id)) == len(kept) + 2

    # Another worker (a process that has never seen this agent: as after a restart) reads
    # what is held from the log: a front-truncated resend, a regenerated answer and an
    # edited old message append nothing twice.
    other = await Server(database_url).start()
    try:
        client2 = openai_client(other, token, timeout=120)
        count = len(held(server, agent_id))
        window = [messages[0], *messages[-30:], {"role": "user", "content": "Summarise the copper notes."}]
        while window[1]["role"] == "tool":
            window.pop(1)
        await client2.chat.completions.create(model="fake-gpt", messages=window, max_tokens=MAX_TOKENS,
                                              extra_headers=managed)
        await server.runtime.projector.catch_up()
        assert len(held(server, agent_id)) == count + 2      # the new question and the answer
        edited = [dict(m) for m in window]
        edited[2] = {"role": edited[2]["role"], "content": "an edit of an old message"}
        await client2.chat.completions.create(model="fake-gpt", messages=edited, max_tokens=MAX_TOKENS,
                                              extra_headers=managed)
        await server.runtime.projector.catch_up()
        # the regenerated question (held) is not appended again; the new answer is
        assert len(held(server, agent_id)) == count + 3
        assert ("user", "an edit of an old message") not in held(server, agent_id)
    finally:
        await other.stop()


async def test_anthropic_sdk_200k_history_on_a_32k_model(server, operator, small_model, conversation):
    pool = await make_pool(operator, small_model, contextWindowTokens=WINDOW, contextMode="MANAGED")
    agent_id, token = await make_agent(operator, pool, "managed-anthropic")
    client = anthropic_client(server, token, timeout=120)
    messages = anthropic_messages(conversation) + [{"role": "user", "content": QUESTION}]
    system = "You are a careful assistant."
    # The pool manages context; a call can opt out, and then fails as it would directly.
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(model="fake-claude", system=system, messages=messages,
                                     max_tokens=MAX_TOKENS, extra_headers={CONTEXT_HEADER: "off"})
    assert "prompt is too long" in str(refused.value)

    for streaming in (False, True):
        if streaming:
            async with client.messages.stream(model="fake-claude", system=system, messages=messages,
                                              max_tokens=MAX_TOKENS) as stream:
                text = "".join([t async for t in stream.text_stream])
                headers = stream.response.headers
        else:
            raw = await client.messages.with_raw_response.create(model="fake-claude", system=system,
                                                                 messages=messages, max_tokens=MAX_TOKENS)
            text, headers = (await raw.parse()).content[0].text, raw.headers
        seen = small_model.seen[-1]
        assert seen.status == 200 and seen.prompt_tokens <= BUDGET
        assert int(headers[CONTEXT_TOKENS_HEADER]) == seen.prompt_tokens
        assert "relevant" in headers[CONTEXT_TIERS_HEADER]
        assert paired_anthropic(seen.body["messages"])
        assert seen.body["system"].startswith(system)
        if messages[-1]["content"] == QUESTION:
            assert "tangerine-4471" in str(seen.body), "the planted fact is in the assembled prompt"
        assert held(server, agent_id)[-1] == ("assistant", text)
        messages = messages + [{"role": "assistant", "content": text},
                               {"role": "user", "content": "And the granite figures?"}]
    # two calls, each appended its new question once and its answer once
    assert len(held(server, agent_id)) == len(messages) - 1


async def test_a_short_conversation_is_forwarded_as_sent_and_a_bad_mode_is_refused(server, operator, small_model):
    pool = await make_pool(operator, small_model, contextWindowTokens=WINDOW)
    agent_id, token = await make_agent(operator, pool, "managed-short")
    client = openai_client(server, token)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there."}]
    raw = await client.chat.completions.with_raw_response.create(
        model="fake-gpt", messages=messages, max_tokens=MAX_TOKENS, extra_headers={CONTEXT_HEADER: "managed"})
    assert raw.headers[CONTEXT_TIERS_HEADER] == "whole"
    assert small_model.seen[-1].body["messages"] == messages
    assert held(server, agent_id) == [("user", "Hello there."), ("assistant", raw.parse().choices[0].message.content)]
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(model="fake-gpt", messages=messages, max_tokens=MAX_TOKENS,
                                             extra_headers={CONTEXT_HEADER: "sometimes"})
    assert CONTEXT_HEADER in str(refused.value)
    assert len(small_model.seen) == 1   # refused before any turn or upstream call


def responses_items(conversation: list[tuple]) -> list[dict]:
    items: list[dict] = []
    for step in conversation:
        if step[0] == "tool":
            items.append({"type": "function_call", "call_id": step[1], "name": "lookup", "arguments": "{}"})
            items.append({"type": "function_call_output", "call_id": step[1], "output": step[2]})
        else:
            items.append({"type": "message", "role": step[0], "content": step[1]})
    return items


def paired_items(items: list[dict]) -> bool:
    called = [i["call_id"] for i in items if i.get("type") == "function_call"]
    answered = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    return called == answered and all(
        items.index(next(i for i in items if i.get("call_id") == c and i["type"] == "function_call"))
        < items.index(next(i for i in items if i.get("call_id") == c and i["type"] == "function_call_output"))
        for c in called)


@pytest.mark.parametrize("native", [True, False], ids=["native", "translated"])
async def test_responses_api_200k_history_on_a_32k_model(server, operator, conversation, native):
    fake = await FakeUpstream(context_window=WINDOW, responses=native).start()
    try:
        pool = await make_pool(operator, fake, contextWindowTokens=WINDOW, contextMode="MANAGED")
        agent_id, token = await make_agent(operator, pool, "managed-responses")
        client = openai_client(server, token, timeout=120)
        items = responses_items(conversation) + [{"type": "message", "role": "user", "content": QUESTION}]
        with pytest.raises(openai.BadRequestError):
            await client.responses.create(model="fake-gpt", instructions="Be careful.", input=items,
                                          max_output_tokens=MAX_TOKENS, extra_headers={CONTEXT_HEADER: "off"})
        raw = await client.responses.with_raw_response.create(model="fake-gpt", instructions="Be careful.",
                                                              input=items, max_output_tokens=MAX_TOKENS)
        reply = raw.parse()
        seen = fake.seen[-1]
        assert seen.status == 200 and seen.prompt_tokens <= BUDGET
        assert "relevant" in raw.headers[CONTEXT_TIERS_HEADER]
        if native:
            assert paired_items(seen.body["input"]) and seen.body["instructions"].startswith("Be careful.")
        else:
            assert paired_openai(seen.body["messages"])
        assert "tangerine-4471" in str(seen.body)
        assert held(server, agent_id)[-1] == ("assistant", reply.output_text)
        count = len(held(server, agent_id))
        items += [{"type": "message", "role": "assistant", "content": reply.output_text},
                  {"type": "message", "role": "user", "content": "And the cobalt notes?"}]
        await client.responses.create(model="fake-gpt", instructions="Be careful.", input=items,
                                      max_output_tokens=MAX_TOKENS)
        assert len(held(server, agent_id)) == count + 2
    finally:
        await fake.stop()


async def test_a_hibernated_agent_is_woken_and_appends_nothing_twice(server, operator, small_model):
    pool = await make_pool(operator, small_model, contextWindowTokens=WINDOW, contextMode="MANAGED")
    agent_id, token = await make_agent(operator, pool, "managed-sleeper")
    client = openai_client(server, token)
    messages = [{"role": "user", "content": f"message {i}: " + "cedar " * 20} for i in range(10)]
    reply = await client.chat.completions.create(model="fake-gpt", messages=messages, max_tokens=MAX_TOKENS)
    before = held(server, agent_id)
    await operator("mutation($a: ID!) { hibernateAgent(agentId: $a) { id } }", a=agent_id)
    assert server.runtime.context.state(agent_id).hibernated
    messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                 {"role": "user", "content": "one more"}]
    await client.chat.completions.create(model="fake-gpt", messages=messages, max_tokens=MAX_TOKENS)
    after = held(server, agent_id)
    assert after[:len(before)] == before and after[len(before):] == [("user", "one more"), before[-1]]

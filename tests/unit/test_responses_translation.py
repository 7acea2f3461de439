"""The Responses API <-> chat completions translation (app/gateway/responses.py): requests,
whole answers and streams, checked against the OpenAI SDK's own types of the Responses API
(validated strictly, so a missing or mistyped field fails here, not in a client)."""
from __future__ import annotations

import json

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from app.gateway.responses import ChatToResponses, Untranslatable, chat_request
from app.gateway.wire import SSEParser

EVENTS = TypeAdapter(ResponseStreamEvent)


def translator(request: dict | None = None) -> ChatToResponses:
    return ChatToResponses(request or {"model": "m", "input": "hi"}, "resp_abc", 1_700_000_000)


def events(data: bytes) -> list[dict]:
    """The SSE bytes as events, each checked to be a valid Responses stream event, and each
    `event:` line to name its payload's type."""
    out = []
    for block in data.decode().split("\n\n"):
        if not block:
            continue
        head, body = block.split("\n", 1)
        payload = json.loads(body.removeprefix("data: "))
        assert head == f"event: {payload['type']}"
        EVENTS.validate_python(payload)
        out.append(payload)
    assert SSEParser().feed(data) == out   # what the gateway's own reader sees
    return out


# -- requests ---------------------------------------------------------------------------------

def test_instructions_and_a_string_input_become_system_and_user_messages():
    chat = chat_request({"model": "m", "instructions": "Be terse.", "input": "Hello", "max_output_tokens": 50,
                         "temperature": 0.2, "top_p": 0.9, "user": "u1", "store": True, "metadata": {"a": "b"},
                         "include": ["reasoning.encrypted_content"], "truncation": "auto"})
    assert chat == {"model": "m", "temperature": 0.2, "top_p": 0.9, "user": "u1", "max_tokens": 50,
                    "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hello"}]}


def test_message_items_text_parts_images_and_roles():
    chat = chat_request({"model": "m", "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Look: "},
                                     {"type": "input_image", "image_url": "https://x/cat.png", "detail": "low"}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "A cat.", "annotations": []}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
    ]})
    image = {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "low"}}
    assert chat["messages"] == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": [{"type": "text", "text": "Look: "}, image]},
        {"role": "assistant", "content": "A cat."}]


def test_function_calls_join_the_assistant_message_and_outputs_become_tool_messages():
    chat = chat_request({"model": "m", "input": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sun"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
        {"type": "function_call", "call_id": "c3", "name": "clock", "arguments": ""},
    ]})
    call = {"type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}, "id": "c1"}
    assert chat["messages"] == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            call, {**call, "id": "c2", "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sun"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "clock", "arguments": "{}"}}]}]


def test_tools_choice_format_reasoning_and_streaming():
    chat = chat_request({
        "model": "m", "input": "go", "stream": True, "parallel_tool_calls": False,
        "tools": [{"type": "function", "name": "f", "description": "F.", "strict": True,
                   "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}},
                  {"type": "function", "name": "g"}],
        "tool_choice": {"type": "function", "name": "f"},
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True},
                 "verbosity": "low"},
        "reasoning": {"effort": "low", "summary": "auto"}})
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "f", "description": "F.", "strict": True,
                                          "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}},
        {"type": "function", "function": {"name": "g", "parameters": {"type": "object", "properties": {}}}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "out", "schema": {
        "type": "object"}, "strict": True}}
    assert (chat["verbosity"], chat["reasoning_effort"], chat["parallel_tool_calls"]) == ("low", "low", False)
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat_request({"model": "m", "input": "x", "tool_choice": "required",
                         "text": {"format": {"type": "json_object"}}})["response_format"] == {"type": "json_object"}
    assert "response_format" not in chat_request({"model": "m", "input": "x", "text": {"format": {"type": "text"}}})


@pytest.mark.parametrize("extra, named", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"background": True}, "background"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"tools": [{"type": "web_search"}]}, "web_search"),
    ({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}, "file_search"),
    ({"tools": [{"type": "mcp", "server_label": "s"}]}, "mcp"),
    ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
    ({"text": {"format": {"type": "grammar"}}}, "grammar"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "item_reference"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "web_search_call"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input_file"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}, "file_id"),
    ({"input": None}, "input is required"),
    ({"input": []}, "no messages"),
])
def test_what_chat_completions_cannot_carry_is_refused_by_name(extra, named):
    with pytest.raises(Untranslatable) as raised:
        chat_request({"model": "m", "input": "x", **extra})
    assert named in str(raised.value)


# -- whole answers ----------------------------------------------------------------------------

def chat_reply(message: dict, finish: str = "stop", usage: dict | None = None) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m-2024",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            **({"usage": usage} if usage else {})}


def test_a_text_reply_becomes_a_message_with_output_text_and_usage():
    usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16,
             "prompt_tokens_details": {"cached_tokens": 4}}
    out = translator({"model": "m", "input": "hi", "instructions": "Be terse."}).reply(
        chat_reply({"content": "Hello there"}, usage=usage), (99, 99))
    response = Response.model_validate(out, strict=True)
    assert response.output_text == "Hello there" and response.status == "completed"
    assert (response.id, response.created_at, response.model, response.instructions) == (
        "resp_abc", 1_700_000_000, "m-2024", "Be terse.")
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens,
            response.usage.input_tokens_details.cached_tokens) == (11, 5, 16, 4)


def test_tool_calls_become_function_call_items_and_a_cut_answer_is_incomplete():
    out = translator().reply(chat_reply({"content": None, "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "clock", "arguments": "{}"}}]},
        finish="tool_calls"), (7, 3))
    response = Response.model_validate(out, strict=True)
    [call] = response.output
    assert (call.type, call.call_id, call.name, call.arguments) == ("function_call", "call_9", "clock", "{}")
    assert response.usage is not None and (response.usage.input_tokens, response.usage.output_tokens) == (7, 3)
    cut = Response.model_validate(translator().reply(chat_reply({"content": "Once upon"}, finish="length"),
                                                     (1, 1)), strict=True)
    assert cut.status == "incomplete" and cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens" and cut.output_text == "Once upon"


# -- streams ----------------------------------------------------------------------------------

def chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m-2024",
            "choices": choices, **({"usage": usage} if usage else {})}


def run(t: ChatToResponses, chunks: list[dict], fallback=(0, 0)) -> list[dict]:
    data = t.open() + b"".join(t.open() + t.feed(c) for c in chunks) + t.close(fallback)
    got = events(data)
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    return got


def test_a_text_stream_becomes_the_responses_event_sequence_with_usage_at_the_end():
    got = run(translator(), [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}),
                             chunk({"content": "lo"}), chunk({}, "stop"),
                             chunk(usage={"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10})])
    assert [e["type"] for e in got] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [e["delta"] for e in got if e["type"] == "response.output_text.delta"] == ["Hel", "lo"]
    item_ids = {e["item_id"] for e in got if "item_id" in e}
    assert len(item_ids) == 1 and got[2]["item"]["id"] in item_ids
    done = Response.model_validate(got[-1]["response"], strict=True)
    assert done.output_text == "Hello" and done.status == "completed"
    assert done.usage is not None and (done.usage.input_tokens, done.usage.output_tokens) == (8, 2)


def test_a_tool_call_stream_closes_the_text_first_and_streams_the_arguments():
    got = run(translator(), [
        chunk({"role": "assistant", "content": "Let me look."}),
        chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "weather", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
                               "function": {"name": "clock", "arguments": "{}"}}]}),
        chunk({}, "tool_calls")], fallback=(12, 9))
    kinds = [e["type"] for e in got]
    # The message is done before the first call is added; each call is done before the next.
    assert kinds.index("response.output_item.done") < kinds.index("response.function_call_arguments.delta")
    added = [e for e in got if e["type"] == "response.output_item.added"]
    assert [(e["output_index"], e["item"]["type"]) for e in added] == [(0, "message"), (1, "function_call"),
                                                                      (2, "function_call")]
    args = [e for e in got if e["type"] == "response.function_call_arguments.delta"]
    assert [(e["output_index"], e["delta"]) for e in args] == [(1, '{"city": '), (1, '"Paris"}'), (2, "{}")]
    finished = [e for e in got if e["type"] == "response.function_call_arguments.done"]
    assert [(e["name"], e["arguments"]) for e in finished] == [("weather", '{"city": "Paris"}'), ("clock", "{}")]
    done = Response.model_validate(got[-1]["response"], strict=True)
    assert [o.type for o in done.output] == ["message", "function_call", "function_call"]
    assert [(o.call_id, o.arguments) for o in done.output[1:]] == [("call_1", '{"city": "Paris"}'), ("call_2", "{}")]
    # No usage in the stream: the gateway's own count is the fallback.
    assert done.usage is not None and (done.usage.input_tokens, done.usage.output_tokens) == (12, 9)


def test_a_stream_cut_at_the_length_limit_ends_incomplete_and_an_empty_one_still_completes():
    got = run(translator(), [chunk({"content": "Once"}), chunk({}, "length")])
    assert got[-1]["type"] == "response.incomplete"
    assert got[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    empty = run(translator(), [])
    assert [e["type"] for e in empty] == ["response.created", "response.in_progress", "response.completed"]
    assert empty[-1]["response"]["output"] == []


def test_the_same_input_translates_to_the_same_bytes():
    chunks = [chunk({"content": "a"}), chunk({}, "stop")]
    first, second = translator(), translator()
    assert first.open() + first.feed(chunks[0]) + first.feed(chunks[1]) + first.close((1, 1)) == \
        second.open() + second.feed(chunks[0]) + second.feed(chunks[1]) + second.close((1, 1))

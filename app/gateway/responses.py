"""OpenAI's Responses API carried over chat completions, for upstreams that lack /v1/responses.

Pure translation, no I/O: a Responses request becomes a chat completions request
(`chat_request`), and the chat answer becomes the Responses answer, whole (`ChatToResponses.
reply`) or as the Responses stream's events (`ChatToResponses.open/feed/close`). Ids and the
creation time are given by the caller, so the same input always translates the same way.

What is carried: `instructions` (a system message), `input` as a string or as items -
messages (text and image parts; `developer` becomes `system`, which every chat server
knows), `function_call` items (an assistant message's `tool_calls`, consecutive calls in one
message) and `function_call_output` items (tool messages) - function tools, `tool_choice`,
`parallel_tool_calls`, `max_output_tokens`, `temperature`, `top_p`, `text.format` (as
`response_format`), `text.verbosity`, `reasoning.effort`, `user`, `service_tier`,
`prompt_cache_key` and `safety_identifier`. Reasoning items in the input are dropped (a
chat model takes none). Dropped too, having no chat counterpart that changes the answer:
`store`, `metadata`, `include`, `truncation`, `stream_options`, `prompt_cache_retention`,
`reasoning.summary` and any field not named here.

What is refused, with `Untranslatable` (a 400 in OpenAI's shape): the stateful features
(`previous_response_id`, `conversation`, `background`, stored `prompt` templates,
`context_management`), every tool but function tools (web search, file search, computer
use, code interpreter, MCP, custom tools, ...), a `tool_choice` naming one of those, input
items other than the ones above (`item_reference`, hosted tools' calls), and file, audio or
file-id image parts.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .wire import BadRequest

# Request fields that need state the chat upstream does not keep: refused. Every field that
# is neither refused nor translated below is dropped.
REFUSED_FIELDS = ("previous_response_id", "conversation", "background", "prompt", "context_management")
# Fields chat completions takes under the same name and meaning.
SAME_FIELDS = ("model", "temperature", "top_p", "parallel_tool_calls", "user", "service_tier",
               "prompt_cache_key", "safety_identifier")


class Untranslatable(BadRequest):
    """The Responses request uses a feature that chat completions cannot carry."""


# -- the request ------------------------------------------------------------------------------

def _text_of_parts(parts: Any, where: str) -> str:
    """The text of a string, or of a list of input_text / output_text parts."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        raise Untranslatable(f"{where}: content must be a string or a list of parts")
    out = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            out.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            out.append(part["refusal"])
        else:
            raise Untranslatable(f"{where}: a part of type {kind!r} is not translated to chat completions")
    return "".join(out)


def _chat_content(content: Any, where: str) -> str | list[dict]:
    """A message's content for chat: a string when it is all text (what every chat server
    reads), else text and image_url parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Untranslatable(f"{where}: content must be a string or a list of parts")
    if all(isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text", "refusal")
           for p in content):
        return _text_of_parts(content, where)
    parts: list[dict] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_image" and isinstance(part.get("image_url"), str):
            image = {"url": part["image_url"]}
            if part.get("detail"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_image":
            raise Untranslatable(f"{where}: an input_image by file_id is not translated (give image_url)")
        else:
            parts.append({"type": "text", "text": _text_of_parts([part], where)})
    return parts


def _messages(body: dict) -> list[dict]:
    messages: list[dict] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise Untranslatable("instructions must be a string")
        if instructions:
            messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    if not isinstance(items, list):
        raise Untranslatable("input is required: a string or a list of items")
    for n, item in enumerate(items):
        where = f"input[{n}]"
        if not isinstance(item, dict):
            raise Untranslatable(f"{where} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise Untranslatable(f"{where}: role {role!r} is not translated")
            messages.append({"role": "system" if role == "developer" else role,
                             "content": _chat_content(item.get("content"), where)})
        elif kind == "function_call":
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
                raise Untranslatable(f"{where}: a function_call needs call_id and name")
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise Untranslatable(f"{where}: a function_call_output needs call_id")
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _text_of_parts(item.get("output", ""), where)})
        elif kind == "reasoning":
            continue   # a chat model takes no reasoning items; the answer does not depend on them
        else:
            raise Untranslatable(f"{where}: an item of type {kind!r} is not translated to chat completions")
    if not messages:
        raise Untranslatable("input has no messages")
    return messages


def _tools(tools: Any) -> list[dict]:
    if not isinstance(tools, list):
        raise Untranslatable("tools must be a list")
    out = []
    for n, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise Untranslatable(f"tools[{n}]: a tool of type {kind!r} is not translated to chat completions "
                                 "(function tools are)")
        if not isinstance(tool.get("name"), str):
            raise Untranslatable(f"tools[{n}]: a function tool needs a name")
        function = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object",
                                                                                  "properties": {}}}
        for key in ("description", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise Untranslatable(f"tool_choice {json.dumps(choice)} is not translated to chat completions")


def _response_format(fmt: Any) -> dict | None:
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": schema}
    raise Untranslatable(f"text.format of type {kind!r} is not translated to chat completions")


def chat_request(body: dict) -> dict:
    """The chat completions request that asks what the Responses request `body` asks.
    Raises Untranslatable for what chat completions cannot carry."""
    for name in REFUSED_FIELDS:
        if body.get(name) not in (None, False):
            raise Untranslatable(f"{name} is not supported by this upstream: it lacks /v1/responses, and "
                                 "AgentRM's translation to chat completions keeps no state")
    chat: dict[str, Any] = {k: body[k] for k in SAME_FIELDS if body.get(k) is not None}
    chat["messages"] = _messages(body)
    if body.get("tools"):
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    text = body.get("text")
    if isinstance(text, dict):
        fmt = _response_format(text.get("format"))
        if fmt is not None:
            chat["response_format"] = fmt
        if text.get("verbosity") is not None:
            chat["verbosity"] = text["verbosity"]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    if body.get("stream") is True:
        # Responses always end with usage; a chat stream sends it only when asked.
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


# -- the answer -------------------------------------------------------------------------------

def _obj(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _count(value: Any, fallback: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else fallback


def _usage(chat_usage: Any, fallback: tuple[int, int]) -> dict:
    u = _obj(chat_usage)
    prompt = _count(u.get("prompt_tokens"), fallback[0])
    completion = _count(u.get("completion_tokens"), fallback[1])
    cached = _count(_obj(u.get("prompt_tokens_details")).get("cached_tokens"), 0)
    reasoning = _count(_obj(u.get("completion_tokens_details")).get("reasoning_tokens"), 0)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + completion}


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


@dataclass
class ChatToResponses:
    """One translated exchange: the client's Responses request, and the ids and time the
    answer carries. `reply` translates a whole chat answer; `open`, `feed` and `close`
    translate a chat stream into the Responses stream's SSE bytes."""
    request: dict
    response_id: str
    created_at: int
    _sequence: int = 0
    _items: list[dict] = field(default_factory=list)
    _open: dict | None = None                                   # the item being streamed
    _calls: dict[int, dict] = field(default_factory=dict)       # chat tool-call index -> its item
    _finish: str | None = None
    _usage: Any = None
    _model: str | None = None
    _opened: bool = False

    def _skeleton(self, status: str, output: list[dict], usage: dict | None) -> dict:
        r = self.request
        reasoning = _obj(r.get("reasoning"))
        incomplete = {"reason": _INCOMPLETE[self._finish]} if self._finish in _INCOMPLETE else None
        return {"id": self.response_id, "object": "response", "created_at": self.created_at, "status": status,
                "error": None, "incomplete_details": incomplete if status == "incomplete" else None,
                "instructions": r.get("instructions"), "max_output_tokens": r.get("max_output_tokens"),
                "model": self._model or r.get("model"), "output": output,
                "parallel_tool_calls": r.get("parallel_tool_calls", True), "previous_response_id": None,
                "reasoning": {"effort": reasoning.get("effort"), "summary": None}, "store": False,
                "temperature": r.get("temperature", 1.0), "text": r.get("text") or {"format": {"type": "text"}},
                "tool_choice": r.get("tool_choice", "auto"), "tools": r.get("tools") or [],
                "top_p": r.get("top_p", 1.0), "truncation": "disabled", "usage": usage,
                "user": r.get("user"), "metadata": r.get("metadata") or {}}

    def _status(self) -> str:
        return "incomplete" if self._finish in _INCOMPLETE else "completed"

    def _message_id(self, n: int) -> str:
        return f"msg_{self.response_id.removeprefix('resp_')}_{n}"

    # -- whole ------------------------------------------------------------------------------
    def reply(self, chat: dict, fallback_usage: tuple[int, int]) -> dict:
        """The Responses object for the chat completion `chat`; `fallback_usage` (prompt,
        completion) is used where the chat answer reports none."""
        chat = _obj(chat)
        choices = chat.get("choices")
        choice = _obj(choices[0]) if isinstance(choices, list) and choices else {}
        message = _obj(choice.get("message"))
        self._finish = choice.get("finish_reason")
        self._model = chat.get("model") if isinstance(chat.get("model"), str) else None
        output: list[dict] = []
        parts = []
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str) and content:
            parts.append({"type": "output_text", "text": content, "annotations": [], "logprobs": []})
        if isinstance(message.get("refusal"), str) and message["refusal"]:
            parts.append({"type": "refusal", "refusal": message["refusal"]})
        if parts:
            output.append({"type": "message", "id": self._message_id(0), "status": "completed",
                           "role": "assistant", "content": parts})
        for call in message.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            function = _obj(call.get("function"))
            output.append({"type": "function_call", "id": f"fc_{call.get('id')}", "call_id": call.get("id"),
                           "name": function.get("name"), "arguments": function.get("arguments") or "",
                           "status": "completed"})
        return self._skeleton(self._status(), output, _usage(chat.get("usage"), fallback_usage))

    # -- streamed ---------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return f"event: {kind}\ndata: ".encode() + json.dumps(payload).encode() + b"\n\n"

    def open(self) -> bytes:
        """The stream's first events: the response, created and in progress; nothing when
        called again (the relay calls it before each chunk's events)."""
        if self._opened:
            return b""
        self._opened = True
        return (self._event("response.created", response=self._skeleton("in_progress", [], None))
                + self._event("response.in_progress", response=self._skeleton("in_progress", [], None)))

    def _start(self, item: dict) -> bytes:
        out = self._close_open()
        item["_index"] = len(self._items)
        self._items.append(item)
        self._open = item
        return out + self._event("response.output_item.added", output_index=item["_index"], item=_public(item))

    def _close_open(self) -> bytes:
        item, self._open = self._open, None
        if item is None:
            return b""
        index, out = item["_index"], b""
        item["status"] = "completed"
        if item["type"] == "message":
            for n, part in enumerate(item["content"]):
                kind, key = ("output_text", "text") if part["type"] == "output_text" else ("refusal", "refusal")
                extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
                out += self._event(f"response.{kind}.done", item_id=item["id"], output_index=index,
                                   content_index=n, **{key: part[key]}, **extra)
                out += self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                   content_index=n, part=part)
        else:
            out += self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                               name=item["name"], arguments=item["arguments"])
        return out + self._event("response.output_item.done", output_index=index, item=_public(item))

    def _part_delta(self, kind: str, text: str) -> bytes:
        out = b""
        if self._open is None or self._open["type"] != "message":
            out += self._start({"type": "message", "id": self._message_id(len(self._items)),
                                "status": "in_progress", "role": "assistant", "content": []})
        item = self._open
        assert item is not None
        key = "text" if kind == "output_text" else "refusal"
        part = next((p for p in item["content"] if p["type"] == kind), None)
        if part is None:
            part = {"type": kind, key: ""}
            if kind == "output_text":
                part.update(annotations=[], logprobs=[])
            item["content"].append(part)
            out += self._event("response.content_part.added", item_id=item["id"], output_index=item["_index"],
                               content_index=item["content"].index(part), part={**part})
        part[key] += text
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        return out + self._event(f"response.{kind}.delta", item_id=item["id"], output_index=item["_index"],
                                 content_index=item["content"].index(part), delta=text, **extra)

    def _call_delta(self, call: dict) -> bytes:
        out = b""
        index = call.get("index", 0)
        function = _obj(call.get("function"))
        item = self._calls.get(index)
        if item is None:
            call_id = call.get("id") or f"call_{self.response_id.removeprefix('resp_')}_{index}"
            item = self._calls[index] = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id,
                                         "name": function.get("name") or "", "arguments": "",
                                         "status": "in_progress"}
            out += self._start(item)
        elif function.get("name") and item is self._open:
            item["name"] += function["name"]   # a server that streams the name in pieces
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item["arguments"] += arguments
            # A delta for a call already closed (chat servers stream calls in order, so
            # this is rare) still reaches the final item, without an event of its own.
            if item is self._open:
                out += self._event("response.function_call_arguments.delta", item_id=item["id"],
                                   output_index=item["_index"], delta=arguments)
        return out

    def feed(self, chunk: dict) -> bytes:
        """The Responses events for one chat completion chunk (a `data:` object)."""
        out = b""
        if isinstance(chunk.get("model"), str):
            self._model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = _obj(choice.get("delta"))
            if isinstance(delta.get("content"), str) and delta["content"]:
                out += self._part_delta("output_text", delta["content"])
            if isinstance(delta.get("refusal"), str) and delta["refusal"]:
                out += self._part_delta("refusal", delta["refusal"])
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    out += self._call_delta(call)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
                out += self._close_open()
        return out

    def close(self, fallback_usage: tuple[int, int]) -> bytes:
        """The stream's last events: every item done, then the response with its usage
        (`fallback_usage` where the chat stream reported none)."""
        out = self._close_open()
        status = self._status()
        response = self._skeleton(status, [_public(i) for i in self._items], _usage(self._usage, fallback_usage))
        return out + self._event(f"response.{status}", response=response)


def _public(item: dict) -> dict:
    """An item as the wire shows it (without the translator's own bookkeeping), a copy."""
    out = {k: v for k, v in item.items() if not k.startswith("_")}
    if "content" in out:
        out["content"] = [dict(p) for p in out["content"]]
    return out

"""Managed context, the pure part: how a chat request's messages read as context messages,
which of them are new, and which recent ones can be forwarded verbatim without breaking a
tool call's pairing. No I/O: app/gateway/managed_context.py does the appends and views.

Two shapes, OpenAI chat completions and Anthropic messages:

- **System messages** (OpenAI `system`/`developer`, Anthropic `system`) are the pinned tier:
  always forwarded, never appended (the client sends them on every call).
- **Units**: the forwarded tail is cut only between units, so a tool call is never
  forwarded without its results nor a result without its call. An assistant message with
  tool calls is one unit with the results that follow it (OpenAI `tool` messages; the
  Anthropic `user` message of `tool_result` blocks); every other message is a unit alone.
- **Keys**: a message is known by (role, its text as appended), where the text carries
  its tool call ids, names and arguments and a result's call id, so two calls with the
  same words are two messages.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.domain.context.limits import MAX_MESSAGE_CHARS

Key = tuple[str, str]

# How many of the context's latest messages must appear in a row in the request for the
# request to be read as a resend of the conversation the context holds (fewer when the
# request or the context is shorter).
ANCHOR_MESSAGES = 4


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _parts_text(content: Any) -> str:
    """Text of a content given as a string or a list of parts; other parts (images, files)
    by a short marker, not their bytes."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return _json(content)
    out = []
    for part in content:
        if not isinstance(part, dict):
            out.append(str(part))
            continue
        kind = part.get("type")
        if isinstance(part.get("text"), str):
            out.append(part["text"])
        elif kind == "tool_use":
            out.append(f"[tool call {part.get('id')}: {part.get('name')}({_json(part.get('input'))})]")
        elif kind == "tool_result":
            out.append(f"[result of tool call {part.get('tool_use_id')}] {_parts_text(part.get('content'))}")
        elif kind in ("thinking", "redacted_thinking"):
            continue   # reasoning is the model's, not the conversation's
        else:
            out.append(f"[{kind or 'part'}]")
    return "\n".join(p for p in out if p)


def clip(text: str) -> str:
    """A context message holds at most MAX_MESSAGE_CHARS characters."""
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS]


class ChatShape(ABC):
    """One wire's messages as managed context reads and rebuilds them."""
    name: str

    @abstractmethod
    def system_of(self, body: dict) -> Any:
        """The request's system messages (the pinned tier), in the wire's own form."""

    @abstractmethod
    def turns_of(self, body: dict) -> list[dict]:
        """The request's other messages, oldest first."""

    @abstractmethod
    def key(self, message: dict) -> Key:
        """(role, text) of a message as the context holds it."""

    @abstractmethod
    def is_result(self, message: dict) -> bool:
        """A message of tool results, which belongs with the call before it."""

    @abstractmethod
    def is_user(self, message: dict) -> bool:
        """The user's own message (not tool results): where a turn begins."""

    @abstractmethod
    def rebuild(self, body: dict, system: Any, block: str | None, turns: list[dict]) -> dict:
        """``body`` with these system messages, the context block and these turns."""

    @abstractmethod
    def reply_key(self, reply: dict) -> Key | None:
        """The key of a whole (not streamed) answer's message."""

    def placeholder(self) -> dict:
        """A user message that opens a tail beginning with the assistant."""
        return {"role": "user", "content": PLACEHOLDER}

    def alone(self, message: dict) -> dict:
        """A body of this one message, to count it as the wire counts a prompt."""
        return {"messages": [message]}

    def joins(self, message: dict, previous: dict) -> bool:
        """Whether ``message`` belongs to the unit of the message before it."""
        return self.is_result(message)

    def units(self, turns: Sequence[dict]) -> list[list[int]]:
        """The turns' indices grouped so that a tool call and its results are one unit."""
        units: list[list[int]] = []
        for i, m in enumerate(turns):
            if units and self.joins(m, turns[i - 1]):
                units[-1].append(i)   # with its call (a stray result: with the message before it)
                continue
            units.append([i])
        return units


class OpenAIShape(ChatShape):
    name = "openai"
    SYSTEM_ROLES = ("system", "developer")

    def system_of(self, body: dict) -> list[dict]:
        return [m for m in body["messages"] if m.get("role") in self.SYSTEM_ROLES]

    def turns_of(self, body: dict) -> list[dict]:
        return [m for m in body["messages"] if m.get("role") not in self.SYSTEM_ROLES]

    def key(self, message: dict) -> Key:
        role = message.get("role")
        text = _parts_text(message.get("content"))
        if role == "tool":
            return "tool", clip(f"[result of tool call {message.get('tool_call_id')}] {text}")
        calls = message.get("tool_calls") or ()
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") or {} if isinstance(call, dict) else {}
            text += (("\n" if text else "") + f"[tool call {call.get('id')}: {function.get('name')}"
                     f"({function.get('arguments')})]")
        return ("assistant" if role == "assistant" else "user"), clip(text)

    def is_result(self, message: dict) -> bool:
        return message.get("role") == "tool"

    def is_user(self, message: dict) -> bool:
        return message.get("role") == "user"

    def rebuild(self, body: dict, system: Any, block: str | None, turns: list[dict]) -> dict:
        added = [{"role": "system", "content": block}] if block else []
        return {**body, "messages": [*system, *added, *turns]}

    def reply_key(self, reply: dict) -> Key | None:
        try:
            message = reply["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            return None
        return self.key({**message, "role": "assistant"}) if isinstance(message, dict) else None


class AnthropicShape(ChatShape):
    name = "anthropic"

    def system_of(self, body: dict) -> Any:
        return body.get("system")

    def turns_of(self, body: dict) -> list[dict]:
        return list(body["messages"])

    def key(self, message: dict) -> Key:
        role = "assistant" if message.get("role") == "assistant" else "user"
        return role, clip(_parts_text(message.get("content")))

    @staticmethod
    def _blocks(message: dict) -> list[dict]:
        content = message.get("content")
        return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []

    def is_result(self, message: dict) -> bool:
        return message.get("role") == "user" and any(b.get("type") == "tool_result" for b in self._blocks(message))

    def is_user(self, message: dict) -> bool:
        return message.get("role") == "user" and not self.is_result(message)

    def rebuild(self, body: dict, system: Any, block: str | None, turns: list[dict]) -> dict:
        out = {**body, "messages": turns}
        if block:
            if isinstance(system, list):
                out["system"] = [*system, {"type": "text", "text": block}]
            elif isinstance(system, str) and system:
                out["system"] = f"{system}\n\n{block}"
            else:
                out["system"] = block
        return out

    def reply_key(self, reply: dict) -> Key | None:
        content = reply.get("content") if isinstance(reply, dict) else None
        return self.key({"role": "assistant", "content": content}) if isinstance(content, list) else None


class ResponsesShape(ChatShape):
    """OpenAI's Responses API: ``instructions`` and system input messages are pinned; input
    items are the turns. A reasoning item stays with what follows it, and parallel calls
    (function_call items in a row) with their outputs, as the API requires."""
    name = "responses"
    SYSTEM_ROLES = ("system", "developer")

    @staticmethod
    def _items(body: dict) -> list[dict]:
        items = body.get("input")
        if isinstance(items, str):
            return [{"type": "message", "role": "user", "content": items}]
        return list(items) if isinstance(items, list) else []

    def _is_system(self, item: dict) -> bool:
        return item.get("type", "message") == "message" and item.get("role") in self.SYSTEM_ROLES

    def system_of(self, body: dict) -> tuple[Any, list[dict]]:
        return body.get("instructions"), [i for i in self._items(body) if self._is_system(i)]

    def turns_of(self, body: dict) -> list[dict]:
        return [i for i in self._items(body) if not self._is_system(i)]

    def key(self, message: dict) -> Key:
        kind = message.get("type", "message")
        if kind == "function_call":
            return "assistant", clip(f"[tool call {message.get('call_id')}: {message.get('name')}"
                                     f"({message.get('arguments')})]")
        if kind == "function_call_output":
            return "tool", clip(f"[result of tool call {message.get('call_id')}] "
                                f"{_parts_text(message.get('output'))}")
        if kind != "message":
            return "assistant", ""   # reasoning and other items: the model's, not kept
        role = "assistant" if message.get("role") == "assistant" else "user"
        return role, clip(_parts_text(message.get("content")))

    def is_result(self, message: dict) -> bool:
        return message.get("type") == "function_call_output"

    def is_user(self, message: dict) -> bool:
        return message.get("type", "message") == "message" and message.get("role") == "user"

    def joins(self, message: dict, previous: dict) -> bool:
        kind, before = message.get("type", "message"), previous.get("type", "message")
        return (kind == "function_call_output" or before == "reasoning"
                or (kind == "function_call" and before == "function_call"))

    def alone(self, message: dict) -> dict:
        return {"input": [message]}

    def rebuild(self, body: dict, system: Any, block: str | None, turns: list[dict]) -> dict:
        instructions, system_items = system
        out = {**body, "input": [*system_items, *turns]}
        if block:
            out["instructions"] = f"{instructions}\n\n{block}" if instructions else block
        return out

    def reply_key(self, reply: dict) -> Key | None:
        output = reply.get("output") if isinstance(reply, dict) else None
        if not isinstance(output, list) or any(isinstance(i, dict) and i.get("type") == "function_call"
                                               for i in output):
            return None   # a tool call comes back as the client's own items, with its results
        text = "".join(p.get("text", "") for i in output if isinstance(i, dict) and i.get("type") == "message"
                       for p in i.get("content") or () if isinstance(p, dict) and p.get("type") == "output_text")
        return "assistant", clip(text)

    def placeholder(self) -> dict:
        return {"type": "message", "role": "user", "content": PLACEHOLDER}


OPENAI_SHAPE = OpenAIShape()
ANTHROPIC_SHAPE = AnthropicShape()
RESPONSES_SHAPE = ResponsesShape()
PLACEHOLDER = "[Earlier messages of this conversation are in the context above.]"
BLOCK_HEAD = ("[Context kept by AgentRM for this conversation: what no longer fits verbatim. "
              "The most recent messages follow as they were sent.]")


def new_from(held: Sequence[Key], sent: Sequence[Key], anchor: int = ANCHOR_MESSAGES) -> int:
    """The index of the first message of ``sent`` that the context (``held``, oldest first)
    does not hold yet: everything from it on is appended.

    1. A resend: the context's latest messages (up to ``anchor`` of them, fewer when
       ``sent`` is shorter) appear in a row in ``sent``; what follows them is new. Their
       last occurrence wins, so a conversation that repeats itself ("ok", "ok") still
       appends its newest repeat.
    2. Otherwise the client changed its history (edited or dropped a message the context
       holds, regenerated an answer): what follows the last message of ``sent`` that the
       context holds anywhere is new. An edited message before that point is not appended
       again: the context keeps what was said first, and the forwarded prompt carries the
       edit in its verbatim tail.
    3. Nothing of ``sent`` held: it is all new (a first call, another conversation)."""
    if not held:
        return 0
    k = min(anchor, len(held))
    for j in range(len(sent), 0, -1):
        if sent[j - 1] != held[-1]:
            continue
        t = min(j, k)
        if list(sent[j - t:j]) == list(held[-t:]):
            return j
    known = set(held)
    for j in range(len(sent), 0, -1):
        if sent[j - 1] in known:
            return j
    return 0


@dataclass(frozen=True)
class Window:
    """The verbatim tail chosen for a budget: the turns' indices, and its tokens."""
    indices: list[int]
    tokens: int
    placeholder: bool = False


def recent_window(shape: ChatShape, turns: Sequence[dict], costs: Sequence[int], budget: int,
                  share_limit: int) -> Window:
    """The latest units that fit ``share_limit`` tokens (the last unit always, if it fits
    ``budget``), contiguous from the end. A window that does not begin with the user's
    own message gets the message that opened its turn when that fits ``budget`` too, else
    (Anthropic needs a user message first) a one-line placeholder user message."""
    units = shape.units(turns)
    chosen: list[list[int]] = []
    spent = 0
    for unit in reversed(units):
        cost = sum(costs[i] for i in unit)
        limit = budget if not chosen else share_limit
        if spent + cost > limit:
            break
        chosen.insert(0, unit)
        spent += cost
    if not chosen:
        return Window([], 0)
    indices = [i for unit in chosen for i in unit]
    if shape.is_user(turns[indices[0]]):
        return Window(indices, spent)
    first_unit = units.index(chosen[0])
    opener = next((u for u in reversed(units[:first_unit]) if shape.is_user(turns[u[0]])), None)
    if opener is not None and len(opener) == 1 and spent + costs[opener[0]] <= budget:
        return Window([opener[0], *indices], spent + costs[opener[0]])
    return Window(indices, spent, placeholder=True)


def render_block(lines: Sequence[tuple[str, str]]) -> str:
    """The context block: a heading, then each (section, text) under its section's title."""
    out = [BLOCK_HEAD]
    section = None
    titles = {"pinned": "Pinned:", "facts": "Key facts:", "relevant": "Earlier messages relevant to the "
              "latest request (oldest first):"}
    for name, text in lines:
        if name != section:
            out.append(titles[name])
            section = name
        out.append(text)
    return "\n".join(out)

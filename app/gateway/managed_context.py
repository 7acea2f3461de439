"""Managed context: the gateway keeps an agent's conversation and forwards a prompt that fits
its model's window.

Asked per pool (`contextMode: MANAGED`) or per call (`x-agentrm-context: managed`; `off`
opts a call out of a managed pool), for chat completions, Anthropic messages and the
Responses API. Each call:

1. **Append.** The request's messages that the agent's context does not hold yet are
   appended (app/gateway/managed_wire.new_from: a client that resends its whole history, or
   a recent window of it, appends only its new tail). The context itself is the record of
   what is held: it is folded from the log by every worker and survives a restart, so any
   worker deduplicates alike with no state of its own. Calls of one agent on one worker are
   serialised here; two workers appending the same new tail at the same instant can both
   append it (the context then holds it twice; nothing is lost).
2. **Assemble.** A request that fits the budget (the model's window minus the output the
   call reserves) is forwarded as sent. Otherwise the prompt is: the system messages
   (pinned), then a context block of the context's pinned messages, its key facts and the
   messages relevant to the latest user message (a context view with that message as its
   query), then the most recent units verbatim (at most RECENT_SHARE of the room, the latest
   always), never splitting a tool call from its results.
3. **Answer.** The answer of a call is appended when it is text (a tool call comes back in
   the client's next request, with its results), and the response says what was forwarded:
   `x-agentrm-context-tokens` (the forwarded prompt, by the pool's tokenizer) and
   `x-agentrm-context-tiers` (`whole` when the request fitted as sent, else which of
   `pinned,facts,relevant,recent` were used).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.auth import Principal
from app.context.tokens import count_message, count_text
from app.domain.context.limits import MAX_MESSAGES_PER_APPEND, MIN_BUDGET_TOKENS
from app.errors import ServiceError

from .managed_wire import (
    ANTHROPIC_SHAPE,
    OPENAI_SHAPE,
    RESPONSES_SHAPE,
    ChatShape,
    Key,
    new_from,
    recent_window,
    render_block,
)
from .responses_wire import RESPONSES
from .wire import ANTHROPIC, OPENAI, BadRequest, WireFormat

log = logging.getLogger("agentrm.gateway")

CONTEXT_HEADER = "x-agentrm-context"
CONTEXT_TOKENS_HEADER = "x-agentrm-context-tokens"
CONTEXT_TIERS_HEADER = "x-agentrm-context-tiers"
MANAGED, OFF = "managed", "off"

# Shares of the room left after the system messages: the verbatim tail may take up to half
# (the latest unit always, when it fits at all), the key facts a tenth; relevant history
# gets the rest.
RECENT_SHARE = 0.5
FACTS_SHARE = 0.10
# The query-less view gives its key facts at most this share of its budget
# (app.domain.context.view.ViewSettings.facts_share).
VIEW_FACTS_SHARE = 0.30
# The block's heading and section titles, and the drift between a view's own count of its
# items and the block's lines: kept free so a first assembly fits without a second try.
BLOCK_SLACK_TOKENS = 64

_SHAPES: dict[str, ChatShape] = {OPENAI.name: OPENAI_SHAPE, ANTHROPIC.name: ANTHROPIC_SHAPE,
                                 RESPONSES.name: RESPONSES_SHAPE}


def shape_of(wire: WireFormat) -> ChatShape | None:
    """The managed shape of a wire format, None for one managed context does not cover."""
    return _SHAPES.get(wire.name) if wire in (OPENAI, ANTHROPIC, RESPONSES) else None


def wanted(headers: Mapping[str, str], pool_mode: str) -> bool:
    """Whether this call's context is managed: its header, else its pool's setting."""
    asked = headers.get(CONTEXT_HEADER, "").strip().lower()
    if not asked:
        return pool_mode == MANAGED
    if asked not in (MANAGED, OFF):
        raise BadRequest(f"{CONTEXT_HEADER} must be {MANAGED} or {OFF}, got {asked!r}")
    return asked == MANAGED


@dataclass
class Assembled:
    """What one managed call forwards, and what its response says about it."""
    body: dict
    tokens: int
    tiers: list[str]
    shape: ChatShape
    tool_calls_streamed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        return {CONTEXT_TOKENS_HEADER: str(self.tokens), CONTEXT_TIERS_HEADER: ",".join(self.tiers) or "none"}

    def reply_key(self, reply: dict, *, translated: bool) -> Key | None:
        """The key of a whole answer; ``translated``: a chat answer to a Responses call, kept
        when it is text (a tool call comes back as the client's own items)."""
        if not translated:
            return self.shape.reply_key(reply)
        try:
            calls = reply["choices"][0]["message"].get("tool_calls")
        except (KeyError, IndexError, TypeError, AttributeError):
            return None
        return None if calls else OPENAI_SHAPE.reply_key(reply)

    def observe(self, payload: dict) -> None:
        """One event of the answer's stream: notes whether it calls a tool."""
        if payload.get("type") in ("content_block_start", "response.output_item.added"):
            block = payload.get("content_block") or payload.get("item") or {}
            if isinstance(block, dict) and block.get("type") in ("tool_use", "function_call"):
                self.tool_calls_streamed = True
        for choice in payload.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and delta.get("tool_calls"):
                self.tool_calls_streamed = True


def _message_cost(wire: WireFormat, shape: ChatShape, message: dict, encoding: str) -> int:
    return sum(count_message(role, text, encoding) for role, text in wire.messages(shape.alone(message)))


class ManagedContext:
    """One per worker: the per-agent order of managed calls, and the assembly."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def _lock(self, agent_id: str):
        """One agent's managed calls one at a time; the lock leaves with its last user, so
        a worker keeps none for agents it no longer serves."""
        lock, users = self._locks.setdefault(agent_id, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                self._locks.pop(agent_id, None)

    @staticmethod
    def _held(context, agent_id: str) -> list[tuple[int, Key]]:
        state = context.state(agent_id)
        messages = sorted((m for m in state.cold.messages + state.hot if not m.pinned), key=lambda m: m.seq)
        return [(m.seq, (m.role, m.content)) for m in messages]

    async def _append(self, context, principal: Principal, keys: list[Key]) -> None:
        for start in range(0, len(keys), MAX_MESSAGES_PER_APPEND):
            batch = keys[start:start + MAX_MESSAGES_PER_APPEND]
            await context.append(principal, [(role, text, False) for role, text in batch])

    async def prepare(self, context, principal: Principal, wire: WireFormat, body: dict, prompt: int,
                      encoding: str, budget: int) -> Assembled:
        """Append the request's new messages, then assemble what to forward within ``budget``."""
        shape = _SHAPES[wire.name]
        agent_id = str(principal.agent_id)
        turns = shape.turns_of(body)
        keys = [shape.key(m) for m in turns]
        sent = [k for k in keys if k[1]]   # an empty message (no text, no call) is not kept
        async with self._lock(agent_id):
            if context.state(agent_id).hibernated:
                await context.set_hibernated(principal, agent_id, False)
            held = [key for _seq, key in self._held(context, agent_id)]
            new = sent[new_from(held, sent):]
            try:
                await self._append(context, principal, new)
            except ServiceError as exc:   # the call goes on with the context as it is
                log.warning("managed context: not appended", extra={"reason": str(exc)})
        if prompt <= budget:
            return Assembled(body, prompt, ["whole"], shape)
        return await self._assemble(context, principal, shape, wire, body, turns, keys, encoding, budget)

    async def _assemble(self, context, principal: Principal, shape: ChatShape, wire: WireFormat, body: dict,
                        turns: list[dict], keys: list[Key], encoding: str, budget: int) -> Assembled:
        agent_id = str(principal.agent_id)
        system = shape.system_of(body)
        fixed = wire.count_prompt(shape.rebuild(body, system, None, []), encoding)
        costs = await asyncio.to_thread(lambda: [_message_cost(wire, shape, m, encoding) for m in turns])
        room = budget - fixed
        window = recent_window(shape, turns, costs, room, int(room * RECENT_SHARE))
        if not window.indices:
            # Not even the latest message fits: forwarded as sent, the provider says why.
            return Assembled(body, wire.count_prompt(body, encoding), ["none"], shape)
        kept = [turns[i] for i in window.indices]
        if window.placeholder:
            kept.insert(0, shape.placeholder())
        left = room - window.tokens - (_message_cost(wire, shape, shape.placeholder(), encoding) if window.placeholder
                                       else 0) - BLOCK_SLACK_TOKENS
        lines = await self._context_lines(context, principal, agent_id, shape, turns, keys, window.indices,
                                          left) if left >= MIN_BUDGET_TOKENS else []
        has_system = any(system) if isinstance(system, tuple) else bool(system)
        while True:
            block = render_block(lines) if lines else None
            forwarded = shape.rebuild(body, system, block, kept)
            tokens = wire.count_prompt(forwarded, encoding)
            if tokens <= budget or not lines:
                break
            # Over by a little (the block's framing): drop the oldest relevant lines first.
            excess, dropped = tokens - budget, 0
            while lines and dropped < excess:
                at = next((i for i, (name, _t) in enumerate(lines) if name == "relevant"), 0)
                dropped += count_text(lines.pop(at)[1], encoding) + 1
        tiers = [name for name, present in (
            ("pinned", has_system or any(n == "pinned" for n, _ in lines)),
            ("facts", any(n == "facts" for n, _ in lines)),
            ("relevant", any(n == "relevant" for n, _ in lines)),
            ("recent", True)) if present]
        return Assembled(forwarded, tokens, tiers, shape)

    async def _context_lines(self, context, principal: Principal, agent_id: str, shape: ChatShape,
                             turns: list[dict], keys: list[Key], recent: list[int], left: int
                             ) -> list[tuple[str, str]]:
        """The block's lines within ``left`` tokens: pinned messages, key facts, and the
        messages relevant to the latest user message that the verbatim tail does not carry."""
        recent_keys = {keys[i] for i in recent}
        by_seq = {str(seq): key for seq, key in self._held(context, agent_id)}
        query = next((keys[i][1] for i in range(len(turns) - 1, -1, -1) if shape.is_user(turns[i])),
                     keys[-1][1] if keys else "") or None
        lines: list[tuple[str, str]] = []
        if context.state(agent_id).live_facts:
            facts_view = await context.view(principal, agent_id,
                                            max(MIN_BUDGET_TOKENS, int(left * FACTS_SHARE / VIEW_FACTS_SHARE)))
            for item in facts_view.items:
                if item.kind == "facts" and item.tokens <= left * FACTS_SHARE * 1.5:
                    lines.append(("facts", item.content))
                    left -= item.tokens
        if left < MIN_BUDGET_TOKENS:
            return lines
        asked = left
        for _attempt in range(2):
            view = await context.view(principal, agent_id, asked, query)
            chosen, overlap = [], 0
            for item in view.items:
                if item.kind == "pinned":
                    chosen.append(("pinned", f"{item.role}: {item.content}"))
                elif item.kind == "facts":
                    continue   # the facts view above chose them
                elif by_seq.get(item.ref) in recent_keys:
                    overlap += item.tokens   # forwarded verbatim already
                else:
                    chosen.append(("relevant", f"{item.role}: {item.content}"))
            if overlap == 0 or asked + overlap > 1_048_576:
                break
            asked += overlap   # what the verbatim tail took of this view goes to other messages
        pinned = [line for line in chosen if line[0] == "pinned"]
        return pinned + lines + [line for line in chosen if line[0] == "relevant"]

    async def record_reply(self, context, principal: Principal, key: Key | None) -> None:
        """Append the call's answer (text only), so a client that sends just its next
        message still has it in the context; a resend of it is recognised as held."""
        if key is None or not key[1]:
            return
        try:
            async with self._lock(str(principal.agent_id)):
                await context.append(principal, [(key[0], key[1], False)])
        except ServiceError as exc:
            log.warning("managed context: answer not appended", extra={"reason": str(exc)})

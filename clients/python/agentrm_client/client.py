"""The agent-side client: one turn per LLM call, without hand-written GraphQL.

    async with AgentRM(url, token) as rm:
        async with rm.turn(estimated_tokens=800, max_output_tokens=256, run_id="run-1") as turn:
            stream = await llm.chat.completions.create(..., stream=True)
            async for chunk in stream:
                turn.chunk()                       # heartbeats from the stream's own code
            turn.report(prompt_tokens=..., completion_tokens=...)

Entering the block waits for the grant over the `turn` subscription (no polling). Leaving
it completes the turn: OK with the reported usage; RATE_LIMITED with retry-after and the
provider's headers when a 429 escapes the block (openai's, anthropic's or httpx's
exceptions, or `RateLimited`); ERROR for any other exception or a cancellation. A
cancellation while still queued cancels the turn. The exception itself always propagates:
the client never retries behind its caller's back.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from .transport import AgentRMError, Data, Transport

TURN_FIELDS = "id status lane level leaseExpiresAt grantedAt finishedAt outcome reason"
RATE_HEADER_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")


class TurnNotGranted(AgentRMError):
    """The turn ended (cancelled, reaped, the agent quarantined) before it was granted."""


class QueueTimeout(AgentRMError):
    """Still queued after `max_wait` seconds; the turn was cancelled."""


class RateLimited(Exception):
    """Raise inside a turn when a provider answered 429 and no SDK exception says so."""

    def __init__(self, retry_after: float | None = None, headers: dict[str, Any] | None = None):
        super().__init__(f"rate limited (retry after {retry_after}s)")
        self.retry_after = retry_after
        self.headers = headers or {}


def _rate_limit_of(exc: BaseException) -> tuple[float | None, dict[str, str]] | None:
    """(retry-after seconds, rate-limit headers) when `exc` is a 429, else None."""
    if isinstance(exc, RateLimited):
        return exc.retry_after, {k.lower(): str(v) for k, v in exc.headers.items()}
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None) or getattr(response, "status_code", None)
    if status != 429:
        return None
    headers: dict[str, str] = {k.lower(): v for k, v in (getattr(response, "headers", None) or {}).items()}
    picked = {k: v for k, v in headers.items() if k.startswith(RATE_HEADER_PREFIXES) or k == "retry-after"}
    retry: float | None = None
    with contextlib.suppress(KeyError, TypeError, ValueError):   # absent or not seconds: unknown
        retry = float(headers["retry-after"])
    return retry, picked


def _usage_of(usage: Any) -> tuple[int | None, int | None]:
    """Prompt and completion tokens from an SDK's usage object or a plain dict (OpenAI's
    prompt/completion_tokens, Anthropic's input/output_tokens)."""
    get: Callable[[str], Any] = usage.get if isinstance(usage, dict) else lambda k: getattr(usage, k, None)
    prompt = get("prompt_tokens")
    completion = get("completion_tokens")
    if prompt is None and completion is None:
        prompt, completion = get("input_tokens"), get("output_tokens")
    return prompt, completion


@dataclass
class Turn:
    """A granted turn, inside `async with rm.turn(...)`."""
    id: str
    lane: int | None
    level: int | None
    lease_seconds: float
    _rm: AgentRM = field(repr=False)
    # How far apart chunk() heartbeats: a third of what each one extends the lease by (a
    # streaming turn's heartbeat after its first chunk extends it by the pool's stall deadline).
    beat_every: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    _last_beat: float | None = None
    _beat: asyncio.Task[None] | None = field(default=None, repr=False)

    def chunk(self) -> None:
        """Call from the code that reads the answer, for every chunk: the first one
        heartbeats at once (the start deadline is met), later ones every lease/3. Never
        call it from a timer: a timer keeps a hung call alive."""
        now = time.monotonic()
        every = self.beat_every if self.beat_every is not None else self.lease_seconds / 3
        if self._last_beat is not None and now - self._last_beat < every:
            return
        if self._beat is not None and not self._beat.done():
            return
        self._last_beat = now
        self._beat = asyncio.get_running_loop().create_task(self._rm._heartbeat(self.id))

    def report(self, usage: Any = None, *, prompt_tokens: int | None = None,
               completion_tokens: int | None = None, headers: dict[str, Any] | None = None) -> None:
        """The call's real usage (an SDK usage object, or the counts) and, optionally, the
        provider's rate-limit headers; sent when the block ends."""
        if usage is not None:
            prompt_tokens, completion_tokens = _usage_of(usage)
        if prompt_tokens is not None:
            self.prompt_tokens = int(prompt_tokens)
        if completion_tokens is not None:
            self.completion_tokens = int(completion_tokens)
        if headers:
            self.headers.update({k.lower(): str(v) for k, v in headers.items()
                                 if k.lower().startswith(RATE_HEADER_PREFIXES) or k.lower() == "retry-after"})


class _TurnBlock:
    def __init__(self, rm: AgentRM, estimated_tokens: int, max_output_tokens: int | None,
                 run_id: str | None, streams: bool, max_wait: float | None):
        self.rm, self.args = rm, (estimated_tokens, max_output_tokens, run_id, streams, max_wait)
        self.turn: Turn | None = None
        self.turn_id: str | None = None

    async def __aenter__(self) -> Turn:
        estimated, max_out, run_id, streams, max_wait = self.args
        variables: Data = {"estimatedTokens": estimated, "maxOutputTokens": max_out, "streams": streams}
        if run_id is not None:
            variables["runId"] = run_id
        data = await self.rm.transport.query(
            f"mutation($i: TurnRequestInput!) {{ requestTurn(input: $i) {{ {TURN_FIELDS} }} }}", i=variables)
        doc = data["requestTurn"]
        self.turn_id = doc["id"]
        try:
            if doc["status"] == "QUEUED":
                doc = await asyncio.wait_for(self._granted(), max_wait) if max_wait is not None \
                    else await self._granted()
        except TimeoutError:
            await asyncio.shield(self.rm._cancel(self.turn_id))
            raise QueueTimeout(f"turn {self.turn_id} still queued after {max_wait}s", "QUEUE_TIMEOUT") from None
        except asyncio.CancelledError:
            await asyncio.shield(self.rm._cancel(self.turn_id))
            raise
        if doc["status"] != "GRANTED":
            raise TurnNotGranted(f"turn {self.turn_id} ended {doc['status']}: {doc.get('reason') or ''}",
                                 doc["status"])
        lease = await self.rm.lease_seconds()
        stall = self.rm._stall if streams else None
        self.turn = Turn(doc["id"], doc["lane"], doc["level"], lease, self.rm,
                         beat_every=min(lease, stall if stall is not None else lease) / 3)
        return self.turn

    async def _granted(self) -> Data:
        """Wait for the grant on the `turn` subscription: its first answer is the turn as
        it is now, so a grant that came before we subscribed is not missed."""
        async for data in self.rm.transport.subscribe(
                f"subscription($t: ID!) {{ turn(turnId: $t) {{ {TURN_FIELDS} }} }}", t=self.turn_id):
            doc: Data = data["turn"]
            if doc["status"] != "QUEUED":
                return doc
        raise TurnNotGranted(f"turn {self.turn_id}: the subscription ended before a grant", "UNAVAILABLE")

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool:
        turn = self.turn
        assert turn is not None, "__aexit__ runs only after __aenter__ returned the turn"
        if turn._beat is not None and not turn._beat.done():
            with contextlib.suppress(Exception):
                await turn._beat
        estimated = self.args[0]
        limited = _rate_limit_of(exc) if exc is not None else None
        fields: Data
        if limited is not None:
            retry, headers = limited
            fields = {"outcome": "RATE_LIMITED", "promptTokens": 0, "completionTokens": 0,
                      "retryAfterSeconds": retry, "rateLimitHeaders": headers or turn.headers or None}
        else:
            fields = {"outcome": "OK" if exc is None else "ERROR",
                      "promptTokens": turn.prompt_tokens if turn.prompt_tokens is not None else estimated,
                      "completionTokens": turn.completion_tokens or 0,
                      "rateLimitHeaders": turn.headers or None}
        # Shielded: a cancelled caller must still free its lane.
        await asyncio.shield(self.rm._complete(turn.id, fields))
        return False


class AgentRM:
    """An agent's connection to AgentRM (its GraphQL endpoint and its agent token)."""

    def __init__(self, url: str, token: str, *, timeout: float = 60.0):
        self.transport = Transport(url, token, timeout=timeout)
        self._lease: float | None = None
        self._stall: float | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.transport.close()

    def turn(self, estimated_tokens: int, max_output_tokens: int | None = None, *, run_id: str | None = None,
             streams: bool = True, max_wait: float | None = None) -> _TurnBlock:
        """`async with rm.turn(...) as turn:` one LLM call. `streams=True` promises
        `turn.chunk()` at the answer's first chunk (the start deadline); a call that does
        not stream passes False and calls `turn.chunk()` every lease/3 of a long call."""
        return _TurnBlock(self, estimated_tokens, max_output_tokens, run_id, streams, max_wait)

    async def lease_seconds(self) -> float:
        if self._lease is None:
            data = await self.transport.query("{ pools { leaseSeconds stallTimeoutSeconds } }")
            pool = data["pools"][0]   # an agent sees its own pool only
            self._lease = float(pool["leaseSeconds"])
            stall = pool.get("stallTimeoutSeconds")
            self._stall = float(stall) if stall is not None else None
        return self._lease

    async def _heartbeat(self, turn_id: str) -> None:
        with contextlib.suppress(AgentRMError):  # reaped meanwhile: the completion will say so
            await self.transport.query("mutation($t: ID!) { heartbeat(turnId: $t) { id } }", t=turn_id)

    async def _complete(self, turn_id: str, fields: Data) -> None:
        fields = {k: v for k, v in fields.items() if v is not None}
        try:
            await self.transport.query("mutation($i: CompleteTurnInput!) { completeTurn(input: $i) { id } }",
                                       i={"turnId": turn_id, **fields})
        except AgentRMError as exc:
            if exc.code != "CONFLICT":   # already reaped: its lane is free anyway
                raise

    async def _cancel(self, turn_id: str) -> None:
        with contextlib.suppress(AgentRMError):
            await self.transport.query("mutation($t: ID!) { cancelTurn(turnId: $t) { id } }", t=turn_id)

    # -- context ------------------------------------------------------------------------
    async def append(self, content: str, role: str = "user", *, pinned: bool = False) -> Data:
        """Append one message to this agent's context; returns its ContextStats."""
        data = await self.transport.query(
            "mutation($i: AppendContextInput!) { appendContext(input: $i) "
            "{ agentId hotTokens warmTokens coldTokens messages } }",
            i={"role": role, "content": content, "pinned": pinned})
        stats: Data = data["appendContext"]
        return stats

    async def view(self, budget: int, query: str | None = None) -> Data:
        """This agent's context within `budget` tokens (pinned facts first), ranked for `query`."""
        data = await self.transport.query(
            "query($b: Int!, $q: String) { context(budgetTokens: $b, query: $q) "
            "{ agentId tokens pinned items { tier role content tokens } } }", b=budget, q=query)
        view: Data = data["context"]
        return view

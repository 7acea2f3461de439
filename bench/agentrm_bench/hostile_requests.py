"""The memory part of `agentrm bench abuse`: 1,000 hostile requests, and the server's RSS
before and after them.

Five kinds, 200 of each, interleaved, 8 in flight:
- an anonymous `hibernateAgent` / `wakeAgent` naming a 1 MB agent id (each id distinct);
- a `requestTurn` with an invalid bearer token (each token distinct);
- a 9 MB body to the gateway's /v1/chat/completions (under its 16 MiB cap, so a valid
  agent's is decoded and counted), half with no token, half with a valid agent's;
- `completeTurn` / `heartbeat` / `cancelTurn` by an agent on turns that are not its own
  (honest agents' turns, finished and recalled from the read model; one in four an id
  that names no turn);
- a query of 20 aliased fields (the most a document may have), each document distinct, so
  that any cache keyed by the document sees 200 new keys.

First a warm-up of 20 of each kind (so code paths run for the first time, and lazily built
tables, count as warm-up and not as growth), a pause, the RSS sample; then PASSES passes of
the same 1,000, each followed by the same pause and a sample. One before/after difference
says little: the allocator hands memory back to the system in whole arenas, so RSS after
one pass moves by tens of MB either way whatever the requests hold. A leak keeps growing
pass after pass; memory kept after a peak (freed, but not handed back) stops growing once
the peak has been reached. So the figure judged is the growth over the last LATE_PASSES
passes (per 1,000 requests, the most of any one of them and in all), with the first pass's
growth and the whole series beside it. The pause (2 s) lets the server finish what the
requests left behind (writes of refusals, a projector's persist) before memory is read.
"""
from __future__ import annotations

import asyncio
import itertools
import secrets
from collections import Counter
from collections.abc import Callable

import httpx

from .abuse_scenario import CANCEL, COMPLETE_OK, HEARTBEAT, error_code

KINDS = ("anonymous 1 MB id", "invalid token", "9 MB gateway body", "foreign turn id", "20-alias document")
PER_KIND, WARMUP_PER_KIND, IN_FLIGHT, PAUSE_S = 200, 20, 8, 2.0
PASSES, LATE_PASSES = 5, 3
ID_BYTES = 1_000_000
GATEWAY_BODY_BYTES = 9 * 1024 * 1024
ALIASES = 20


def _label(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    if isinstance(body, dict) and body.get("errors"):
        return f"HTTP {response.status_code} {error_code(body)}"
    if isinstance(body, dict) and isinstance(body.get("error"), dict):   # the gateway's errors
        return f"HTTP {response.status_code} {body['error'].get('type', 'error')}"
    return f"HTTP {response.status_code}"


class Hostile:
    def __init__(self, http: httpx.AsyncClient, agent_token: str, foreign_turns: list[str]):
        self.http, self.agent_token = http, agent_token
        self.foreign_turns = foreign_turns or ["none"]
        self.filler = "x" * ID_BYTES
        chars = GATEWAY_BODY_BYTES - 80
        self.gateway_body = (b'{"model": "any", "messages": [{"role": "user", "content": "'
                             + b"a" * chars + b'"}]}')
        self.serial = itertools.count()

    async def _graphql(self, token: str | None, query: str, variables: dict | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return await self.http.post("/graphql", json={"query": query, "variables": variables or {}},
                                    headers=headers)

    async def anonymous_big_id(self, i: int) -> httpx.Response:
        field = "hibernateAgent" if i % 2 else "wakeAgent"
        return await self._graphql(None, f"mutation($a: ID!) {{ {field}(agentId: $a) {{ id }} }}",
                                   {"a": f"{next(self.serial):08d}" + self.filler})

    async def invalid_token(self, i: int) -> httpx.Response:
        return await self._graphql("agt_" + secrets.token_urlsafe(24), "mutation { requestTurn(input: "
                                   "{estimatedTokens: 10, maxOutputTokens: 10, waitSeconds: 0}) { id } }")

    async def oversized_gateway_body(self, i: int) -> httpx.Response:
        headers = {"Content-Type": "application/json"}
        if i % 2:
            headers["Authorization"] = f"Bearer {self.agent_token}"
        return await self.http.post("/v1/chat/completions", content=self.gateway_body, headers=headers)

    async def foreign_turn(self, i: int) -> httpx.Response:
        turn = ("t" + secrets.token_hex(12)) if i % 4 == 3 else self.foreign_turns[i % len(self.foreign_turns)]
        query = (COMPLETE_OK, HEARTBEAT, CANCEL)[i % 3]
        return await self._graphql(self.agent_token, query, {"id": turn})

    async def aliased(self, i: int) -> httpx.Response:
        n = next(self.serial)
        fields = " ".join(f"a{n}_{k}: me {{ id name }}" for k in range(ALIASES))
        return await self._graphql(self.agent_token, f"query {{ {fields} }}")

    def senders(self) -> dict[str, Callable]:
        return dict(zip(KINDS, (self.anonymous_big_id, self.invalid_token, self.oversized_gateway_body,
                                self.foreign_turn, self.aliased)))

    async def send(self, per_kind: int) -> dict[str, dict[str, int]]:
        """`per_kind` of each kind, interleaved, IN_FLIGHT at a time: each kind's answers
        counted by status and code (or the transport error's name)."""
        senders, counts = self.senders(), {kind: Counter[str]() for kind in KINDS}
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(kind: str, i: int) -> None:
            async with gate:
                try:
                    counts[kind][_label(await senders[kind](i))] += 1
                except httpx.HTTPError as exc:
                    counts[kind][f"connection: {type(exc).__name__}"] += 1
        await asyncio.gather(*(one(kind, i) for i in range(per_kind) for kind in KINDS))
        return {kind: dict(c) for kind, c in counts.items()}


async def measure(base: str, agent_token: str, foreign_turns: list[str], rss: Callable[[], dict], *,
                  per_kind: int = PER_KIND, passes: int = PASSES) -> dict:
    """The warm-up, RSS, then `passes` passes of the requests, RSS after each (`rss()`
    reads the server's)."""
    async with httpx.AsyncClient(base_url=base, timeout=120,
                                 limits=httpx.Limits(max_connections=IN_FLIGHT)) as http:
        hostile = Hostile(http, agent_token, foreign_turns)
        await hostile.send(min(WARMUP_PER_KIND, per_kind))
        await asyncio.sleep(PAUSE_S)
        series, answers, seconds = [rss()], None, []
        loop = asyncio.get_running_loop()
        for _ in range(passes):
            started = loop.time()
            answered = await hostile.send(per_kind)
            seconds.append(round(loop.time() - started, 1))
            answers = answers or answered   # the first pass's answers (every pass's are alike)
            await asyncio.sleep(PAUSE_S)
            series.append(rss())
    return summarise_series(series, per_kind, answers or {}, seconds)


def summarise_series(series: list[dict], per_kind: int, answers: dict, seconds: list[float]) -> dict:
    """The server's RSS after each pass, and its growth: the first pass's, each pass's, and
    over the last LATE_PASSES passes (what the target is judged on)."""
    server = [sample["server"] for sample in series]
    steps = [round(b - a, 1) for a, b in zip(server, server[1:])]
    late = steps[-LATE_PASSES:]
    return {"requests": per_kind * len(KINDS), "per_kind": per_kind,
            "warmup_per_kind": min(WARMUP_PER_KIND, per_kind), "passes": len(steps), "seconds": seconds,
            "answers": answers, "rss_series_mb": series, "growth_per_pass_mb": steps,
            "growth_mb": steps[0] if steps else 0.0,
            "late_passes": len(late), "late_growth_mb": round(sum(late), 1),
            "late_growth_max_mb": max(late) if late else 0.0}

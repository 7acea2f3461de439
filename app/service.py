"""The application service: validates commands, appends inputs, waits for decisions.

Every command is checked against the caller's rights and the current read model before
anything is appended, so bad input appends nothing. A scheduling command then waits
(briefly) for the pool's scheduler to answer it in the log, so the caller sees the
decision, not just the request.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
import uuid
from collections.abc import Sequence
from typing import Any

from app.auth import (
    Principal,
    hash_token,
    new_agent_token,
    require,
    require_operator,
    require_self_or_operator,
)
from app.domain import events as ev
from app.domain.context import resume_point_for
from app.domain.settings import PoolSettings
from app.domain.streams import agent_stream, pool_stream, turn_stream
from app.errors import BadInput, Conflict, Forbidden, NotFound
from app.eventstore.model import NO_STREAM, ConcurrencyError, NewEvent, RecordedEvent
from app.eventstore.store import EventStore
from app.ports import Clock, EventLog, Ids
from app.projections.runner import Projector

MAX_TOKENS_PER_CALL = 10_000_000
MAX_WAIT_SECONDS = 300.0
DECISION_TIMEOUT = 5.0      # how long a command waits for the scheduler's answer
MAX_HEADERS = 100
MAX_RUN_ID = 200           # characters of a runId (a client's own name for its run)


def _check_int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{name} must be an integer")
    if not low <= value <= high:
        raise BadInput(f"{name} must be between {low} and {high}, got {value}")
    return value


def _check_float(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise BadInput(f"{name} must be a number")
    if not low <= value <= high:
        raise BadInput(f"{name} must be between {low} and {high}, got {value}")
    return float(value)


def _new_id() -> str:
    return str(uuid.uuid4())


class Service:
    def __init__(self, store: EventLog, projector: Projector, *, clock: Clock = time.time,
                 ids: Ids = _new_id):
        self.store = store
        self.projector = projector
        self.clock = clock
        self.ids = ids
        # One lock per agent, owned here: hibernation, wakes and context appends of one agent
        # take it, so a resume point's digest describes the context its event follows and a
        # wake cannot interleave with an append or an idle hibernation of the same agent.
        self._agent_locks: dict[str, asyncio.Lock] = {}

    def agent_lock(self, agent_id: str) -> asyncio.Lock:
        return self._agent_locks.setdefault(agent_id, asyncio.Lock())

    @property
    def model(self):
        return self.projector.model

    async def _append(self, events: Sequence[NewEvent], expected: dict | None = None) -> list[RecordedEvent]:
        recorded = await self.store.append(events, expected)
        await self.projector.wait_position(recorded[-1].position)
        return recorded

    @staticmethod
    def _meta(principal: Principal, correlation: str | None = None, **extra) -> dict:
        meta = {"actor": principal.actor, "causation": f"request:{uuid.uuid4()}"}
        if correlation:
            meta["correlation"] = correlation
        meta.update(extra)
        return meta

    # -- pools ------------------------------------------------------------------------
    def pool_view(self, name: str) -> dict:
        state = self.model.pools.get(name)
        if state is None:
            raise NotFound(f"no pool named {name!r}")
        s = state.settings
        return {"name": name, "lanes": s.lanes, "rpm": s.rpm, "tpm": s.tpm,
                "lease_seconds": s.lease_seconds, "start_timeout_floor_seconds": s.start_timeout_floor_seconds,
                "levels": s.levels, "boost_seconds": s.boost_seconds,
                "upstream_base_url": s.upstream_base_url, "tokenizer": s.tokenizer,
                "has_upstream_api_key": bool(self.model.pool_docs.get(name, {}).get("upstream_api_key_fingerprint"))}

    async def create_pool(self, principal: Principal | None, settings: PoolSettings,
                          upstream_api_key: str | None = None, *, at: float | None = None) -> dict:
        principal = require_operator(principal)
        try:
            settings.validate()
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        if settings.name in self.model.pools:
            raise Conflict(f"pool {settings.name!r} already exists")
        data = {"settings": settings.to_dict(), "at": at if at is not None else self.clock()}
        if upstream_api_key:
            data["upstream_api_key_fingerprint"] = hashlib.sha256(upstream_api_key.encode()).hexdigest()[:12]
        event = NewEvent(pool_stream(settings.name), ev.POOL_CREATED, data, self._meta(principal))
        try:
            if isinstance(self.store, EventStore):
                await self._append_with_secret(event, settings.name, upstream_api_key)
            elif upstream_api_key:
                raise BadInput("this event log keeps no upstream API keys")
            else:
                await self.store.append([event], {event.stream: NO_STREAM})
        except ConcurrencyError:
            raise Conflict(f"pool {settings.name!r} already exists") from None
        await self.projector.catch_up()
        return self.pool_view(settings.name)

    async def _append_with_secret(self, event: NewEvent, pool: str, upstream_api_key: str | None) -> None:
        """PostgreSQL: the pool's creation and its upstream key commit together or not at all."""
        async with self.store.pool.acquire() as conn:
            async with conn.transaction():
                await self.store.append([event], {event.stream: NO_STREAM}, conn=conn)
                if upstream_api_key:
                    await conn.execute(
                        "INSERT INTO pool_secrets (pool, api_key) VALUES ($1, $2) "
                        "ON CONFLICT (pool) DO UPDATE SET api_key = EXCLUDED.api_key",
                        pool, upstream_api_key)

    # -- agents -----------------------------------------------------------------------
    async def fresh(self, lookup, *args):
        """Look something up; on a miss, catch up with the log once and look again. Another
        worker may have written it a moment ago (read-your-writes across workers)."""
        try:
            return lookup(*args)
        except NotFound:
            await self.projector.catch_up()
            return lookup(*args)

    def agent_view(self, agent_id: str) -> dict:
        view = self.model.agent_view(agent_id)
        if view is None:
            raise NotFound(f"no agent with id {agent_id!r}")
        return view

    def visible_agent(self, principal: Principal | None, agent_id: str) -> dict:
        require_self_or_operator(principal, agent_id)
        return self.agent_view(agent_id)

    def list_agents(self, principal: Principal | None, pool: str | None = None) -> list[dict]:
        require_operator(principal)
        ids = sorted(self.model.agents, key=lambda a: (self.model.agents[a]["registered_at"], a))
        views = [self.model.agent_view(a) for a in ids]
        return [v for v in views if pool is None or v["pool"] == pool]

    async def register_agent(self, principal: Principal | None, name: str, pool: str = "default",
                             priority_class: str = ev.INTERACTIVE,
                             context_budget_tokens: int | None = None) -> tuple[dict, str]:
        principal = require_operator(principal)
        if not isinstance(name, str) or not 1 <= len(name.strip()) <= 128 or "\x00" in name:
            raise BadInput("name must be 1 to 128 characters, without NUL")
        if pool not in self.model.pools:
            await self.projector.catch_up()
        if pool not in self.model.pools:
            raise NotFound(f"no pool named {pool!r}")
        if priority_class not in ev.PRIORITY_CLASSES:
            raise BadInput(f"priorityClass must be one of {', '.join(ev.PRIORITY_CLASSES)}")
        budget = 8192 if context_budget_tokens is None else _check_int(
            "contextBudgetTokens", context_budget_tokens, 256, 2_000_000)
        agent_id = self.ids()
        token = new_agent_token()
        data = {"agent_id": agent_id, "name": name.strip(), "pool": pool,
                "priority_class": priority_class, "token_hash": hash_token(token),
                "context_budget_tokens": budget, "at": self.clock()}
        await self._append([NewEvent(agent_stream(agent_id), ev.AGENT_REGISTERED, data,
                                     self._meta(principal))], {agent_stream(agent_id): NO_STREAM})
        return self.agent_view(agent_id), token

    async def release_agent(self, principal: Principal | None, agent_id: str) -> dict:
        principal = require_operator(principal)
        view = await self.fresh(self.agent_view, agent_id)
        if view["state"] != ev.QUARANTINED:
            raise Conflict(f"agent {agent_id} is not quarantined")
        await self._append([NewEvent(agent_stream(agent_id), ev.AGENT_RELEASED,
                                     {"agent_id": agent_id, "pool": view["pool"], "at": self.clock()},
                                     self._meta(principal))])
        await self.projector.wait_until(lambda: self.agent_view(agent_id)["state"] != ev.QUARANTINED,
                                        DECISION_TIMEOUT)
        return self.agent_view(agent_id)

    async def set_hibernated(self, principal: Principal | None, agent_id: str, hibernated: bool,
                             extra: dict | None = None) -> dict:
        """Hibernate or wake an agent, under its lock."""
        async with self.agent_lock(agent_id):
            return await self.set_hibernated_locked(principal, agent_id, hibernated, extra)

    async def set_hibernated_locked(self, principal: Principal | None, agent_id: str, hibernated: bool,
                                    extra: dict | None = None) -> dict:
        """set_hibernated for a caller that already holds `agent_lock(agent_id)`."""
        principal = require_self_or_operator(principal, agent_id)
        view = await self.fresh(self.agent_view, agent_id)
        if view["hibernated"] == hibernated:
            return view
        type_ = ev.AGENT_HIBERNATED if hibernated else ev.AGENT_WOKEN
        data = {"agent_id": agent_id, "pool": view["pool"], "at": self.clock(), **(extra or {})}
        if hibernated:
            # What a wake needs to restore the hot and warm tiers exactly (with a digest).
            data["resume_point"] = resume_point_for(self.model.context_of(agent_id))
        await self._append([NewEvent(agent_stream(agent_id), type_, data, self._meta(principal))])
        return self.agent_view(agent_id)

    # -- turns ------------------------------------------------------------------------
    def turn_view(self, turn_id: str) -> dict:
        doc = self.model.turns.get(turn_id)
        if doc is None:
            raise NotFound(f"no turn with id {turn_id!r}")
        return doc

    def visible_turn(self, principal: Principal | None, turn_id: str) -> dict:
        principal = require(principal)
        doc = self.turn_view(turn_id)
        if not principal.is_operator and doc["agent_id"] != principal.agent_id:
            raise Forbidden("this turn belongs to another agent")
        return doc

    def _calling_agent(self, principal: Principal | None) -> dict:
        principal = require(principal)
        if principal.is_operator:
            raise Forbidden("turns are requested by agents; use an agent token")
        return self.agent_view(principal.agent_id)

    async def request_turn(self, principal: Principal | None, estimated_tokens: int,
                           max_output_tokens: int | None = None, wait_seconds: float = 0.0,
                           streams: bool = False, run_id: str | None = None) -> dict:
        agent = await self.fresh(self._calling_agent, principal)
        est = _check_int("estimatedTokens", estimated_tokens, 0, MAX_TOKENS_PER_CALL)
        out = _check_int("maxOutputTokens", 0 if max_output_tokens is None else max_output_tokens,
                         0, MAX_TOKENS_PER_CALL)
        wait = _check_float("waitSeconds", wait_seconds or 0.0, 0.0, MAX_WAIT_SECONDS)
        if not isinstance(streams, bool):
            raise BadInput("streams must be true or false")
        if run_id is not None and not (isinstance(run_id, str) and 1 <= len(run_id) <= MAX_RUN_ID
                                       and run_id.isprintable()):
            raise BadInput(f"runId must be 1-{MAX_RUN_ID} printable characters")
        settings = self.model.pools[agent["pool"]].settings
        if est + out > settings.tpm:
            raise BadInput(f"estimatedTokens + maxOutputTokens = {est + out} exceeds pool "
                           f"{agent['pool']!r} tpm of {settings.tpm}; it could never be admitted")
        if agent["state"] == ev.QUARANTINED:
            raise Forbidden("agent is quarantined after repeated reaps; an operator must release it")
        if agent["hibernated"]:
            await self.set_hibernated(principal, agent["agent_id"], False, {"reason": "turn requested"})
        turn_id = self.ids()
        data = {"turn_id": turn_id, "agent_id": agent["agent_id"], "pool": agent["pool"],
                "estimated_tokens": est, "max_output_tokens": out, "at": self.clock()}
        if streams:
            data["streams"] = True
        if run_id is not None:
            data["run_id"] = run_id   # the pool charges the run's attained service (ordering.py)
        await self._append([NewEvent(turn_stream(turn_id), ev.TURN_REQUESTED, data,
                                     self._meta(principal, turn_id))], {turn_stream(turn_id): NO_STREAM})
        # Wait for the scheduler's answer: queued at least, granted if the caller waits.
        await self.projector.wait_until(lambda: self.model.turns[turn_id]["level"] is not None
                                        or self.model.turns[turn_id]["finished_at"] is not None,
                                        DECISION_TIMEOUT, turn_id=turn_id)
        if wait > 0:
            await self.projector.wait_until(
                lambda: self.model.turns[turn_id]["status"] != ev.QUEUED, wait, turn_id=turn_id)
        return self.turn_view(turn_id)

    def _own_turn(self, principal: Principal | None, turn_id: str, *, operator_ok: bool = False) -> dict:
        principal = require(principal)
        if not isinstance(turn_id, str) or not turn_id:
            raise BadInput("turnId is required")
        doc = self.turn_view(turn_id)
        if principal.is_operator:
            if not operator_ok:
                raise Forbidden("only the turn's agent may do this")
        elif doc["agent_id"] != principal.agent_id:
            raise Forbidden("this turn belongs to another agent")
        return doc

    async def _granted_turn(self, principal: Principal | None, turn_id: str) -> dict:
        """The caller's turn; if this worker does not see it GRANTED yet, catch up once:
        another worker's scheduler may have granted it a moment ago."""
        doc = await self.fresh(self._own_turn, principal, turn_id)
        if doc["status"] == ev.QUEUED:
            await self.projector.catch_up()
            doc = self._own_turn(principal, turn_id)
        return doc

    async def _input_and_wait(self, principal: Principal, doc: dict, type_: str, data: dict,
                              settled) -> dict:
        turn_id = doc["turn_id"]
        before = doc["version"]
        data = {"turn_id": turn_id, "agent_id": doc["agent_id"], "pool": doc["pool"], "at": self.clock(), **data}
        await self._append([NewEvent(turn_stream(turn_id), type_, data, self._meta(principal, turn_id))])
        await self.projector.wait_until(lambda: settled(self.model.turns[turn_id], before), DECISION_TIMEOUT,
                                        turn_id=turn_id)
        return self.turn_view(turn_id)

    async def heartbeat(self, principal: Principal | None, turn_id: str) -> dict:
        doc = await self._granted_turn(principal, turn_id)
        if doc["status"] != ev.GRANTED:
            raise Conflict(f"turn {turn_id} is {doc['status']}; only a GRANTED turn takes heartbeats")
        return await self._input_and_wait(principal, doc, ev.HEARTBEAT_SENT, {},
                                          lambda t, before: t["version"] > before)

    async def complete_turn(self, principal: Principal | None, turn_id: str, outcome: str = ev.OK,
                            prompt_tokens: int | None = None, completion_tokens: int | None = None,
                            retry_after_seconds: float | None = None,
                            rate_limit_headers: Any = None) -> dict:
        doc = await self._granted_turn(principal, turn_id)
        if outcome not in (ev.OK, ev.RATE_LIMITED, ev.ERROR):
            raise BadInput("outcome must be OK, RATE_LIMITED or ERROR")
        data: dict[str, Any] = {
            "outcome": outcome,
            "prompt_tokens": _check_int("promptTokens", prompt_tokens or 0, 0, MAX_TOKENS_PER_CALL),
            "completion_tokens": _check_int("completionTokens", completion_tokens or 0, 0, MAX_TOKENS_PER_CALL),
        }
        if retry_after_seconds is not None:
            data["retry_after_seconds"] = _check_float("retryAfterSeconds", retry_after_seconds, 0, 3600)
        if rate_limit_headers is not None:
            data["rate_limit_headers"] = _check_headers(rate_limit_headers)
        if doc["status"] != ev.GRANTED:
            state = doc["status"].lower()
            raise Conflict(f"turn {turn_id} is already {state}" if doc["finished_at"]
                           else f"turn {turn_id} is {doc['status']}; only a GRANTED turn can complete")
        return await self._input_and_wait(principal, doc, ev.COMPLETION_REPORTED, data,
                                          lambda t, _before: t["finished_at"] is not None)

    async def cancel_turn(self, principal: Principal | None, turn_id: str) -> dict:
        doc = await self.fresh(lambda: self._own_turn(principal, turn_id, operator_ok=True))
        if doc["finished_at"] is not None:
            raise Conflict(f"turn {turn_id} is already {doc['status'].lower()}")
        return await self._input_and_wait(principal, doc, ev.CANCEL_REQUESTED,
                                          {"reason": f"cancelled by {principal.actor}"},
                                          lambda t, _before: t["finished_at"] is not None)


def _check_headers(headers: Any) -> dict:
    if isinstance(headers, str):
        try:
            headers = json.loads(headers)
        except json.JSONDecodeError as exc:
            raise BadInput(f"rateLimitHeaders is not valid JSON: {exc.msg}") from None
    if not isinstance(headers, dict):
        raise BadInput("rateLimitHeaders must be a JSON object of header name to value")
    if len(headers) > MAX_HEADERS:
        raise BadInput(f"rateLimitHeaders may hold at most {MAX_HEADERS} headers")
    clean = {}
    for key, value in headers.items():
        if not isinstance(value, (str, int, float)) or isinstance(value, bool) or len(str(key)) > 128 \
                or "\x00" in str(key) + str(value):
            raise BadInput(f"rateLimitHeaders[{key!r}] must be a string or number")
        clean[str(key).lower()] = str(value)[:256]
    return clean

"""The application service: validates commands, appends inputs, waits for decisions.

Every command is checked against the caller's rights and the current read model before
anything is appended, so bad input appends nothing. A scheduling command then waits
(briefly) for the pool's scheduler to answer it in the log, so the caller sees the
decision, not just the request.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from app import idempotency
from app.auth import (
    Principal,
    hash_token,
    new_agent_token,
    require,
    require_operator,
    require_self_or_operator,
)
from app.domain import events as ev
from app.domain import limiter, pool_access, rules
from app.domain.context import resume_point_for
from app.domain.settings import MAX_MODEL_NAME, PoolSettings
from app.domain.streams import agent_stream, pool_stream, turn_stream
from app.errors import BadInput, Conflict, Forbidden, LimitExceeded, NotFound
from app.eventstore.model import NO_STREAM, ConcurrencyError, NewEvent, RecordedEvent
from app.eventstore.store import EventStore
from app.ports import Clock, EventLog, Ids
from app.projections.documents import AgentView, RequestIdKey, TurnDoc
from app.projections.runner import Projector
from app.provider_keys import ProviderKeys
from app.replies import Replies, answers_request, changes_turn, ends_turn, leaves_queue, lifts_quarantine

MAX_TOKENS_PER_CALL = 10_000_000
MAX_WAIT_SECONDS = 300.0
DECISION_TIMEOUT = 5.0      # how long a command waits for the scheduler's answer
MAX_HEADERS = 100
MAX_QUEUED_PER_AGENT = 32   # containment: turns one agent may have waiting at once
MAX_RUN_ID = 200           # characters of a runId (a client's own name for its run)
MAX_ATTEMPTS = 5           # a command with a request id, against concurrent appends to its turn
_Found = TypeVar("_Found")   # what a `fresh` lookup returns


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
    # The access manager's pool check of a turn request (set by the runtime): an async
    # callable (principal, agent view) that records a refusal and raises Forbidden.
    pool_guard: Callable[[Principal, dict[str, Any]], Awaitable[None]] | None = None

    def __init__(self, store: EventLog, projector: Projector, *, clock: Clock = time.time,
                 ids: Ids = _new_id, max_queued_per_agent: int = MAX_QUEUED_PER_AGENT,
                 timing_stamps: bool = False, provider_keys: ProviderKeys | None = None):
        # Seals the upstream API keys createPool stores (app/provider_keys.py); without it the
        # service stores none.
        self.provider_keys = provider_keys
        self.max_queued_per_agent = max_queued_per_agent
        # Opt-in (AGENTRM_TIMING_STAMPS): each TurnRequested's metadata records the process id
        # of the worker that took it, so a grant's latency can be split by whether its request
        # landed on the pool's leader (bench/agentrm_bench/grant_timing.py sets it for its server).
        self.timing_stamps = timing_stamps
        # Requests of each agent appended by this process and not answered yet: they count
        # towards its cap before the scheduler has queued them.
        self._unanswered: dict[str, int] = {}
        self._retry_locks: dict[str, list] = {}
        self.store = store
        self.projector = projector
        self.clock = clock
        self.ids = ids
        # One lock per agent, owned here: hibernation, wakes and context appends of one agent
        # take it, so a resume point's digest describes the context its event follows and a
        # wake cannot interleave with an append or an idle hibernation of the same agent.
        self._agent_locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}   # (lock, [users])
        # The scheduler's answers, as typed decisions, once the projector has folded them.
        self.replies = Replies(projector.subscribe)

    @contextlib.asynccontextmanager
    async def agent_lock(self, agent_id: str):
        """Hold the agent's lock. An entry lives only while someone holds or waits for it, so
        the table is bounded by the commands in flight, never by the ids ever asked about."""
        entry = self._agent_locks.setdefault(agent_id, (asyncio.Lock(), [0]))
        entry[1][0] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1][0] -= 1
            if not entry[1][0]:
                del self._agent_locks[agent_id]

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
    def pool_settings(self, name: str) -> PoolSettings:
        """A pool's settings, as its scheduler state holds them (the one shape of a pool)."""
        state = self.model.pools.get(name)
        if state is None:
            raise NotFound(f"no pool named {name!r}")
        return state.settings

    def has_upstream_api_key(self, name: str) -> bool:
        return bool(self.model.pool_docs.get(name, {}).get("upstream_api_key_fingerprint"))

    async def create_pool(self, principal: Principal | None, settings: PoolSettings,
                          upstream_api_key: str | None = None, *, at: float | None = None) -> PoolSettings:
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
            if isinstance(self.store, EventStore) and (self.provider_keys or not upstream_api_key):
                await self._append_with_secret(event, settings.name, upstream_api_key)
            elif upstream_api_key:
                raise BadInput("this event log keeps no upstream API keys")
            else:
                await self.store.append([event], {event.stream: NO_STREAM})
        except ConcurrencyError:
            raise Conflict(f"pool {settings.name!r} already exists") from None
        await self.projector.catch_up()
        return self.pool_settings(settings.name)

    async def _append_with_secret(self, event: NewEvent, pool: str, upstream_api_key: str | None) -> None:
        """PostgreSQL: the pool's creation and its upstream key commit together or not at all."""
        async with self.store.pool.acquire() as conn:
            async with conn.transaction():
                await self.store.append([event], {event.stream: NO_STREAM}, conn=conn)
                if upstream_api_key and self.provider_keys is not None:
                    await self.provider_keys.put(conn, pool, upstream_api_key)

    # -- agents -----------------------------------------------------------------------
    async def fresh(self, lookup: Callable[..., _Found], *args: Any) -> _Found:
        """Look something up; on a miss, catch up with the log once and look again. Another
        worker may have written it a moment ago (read-your-writes across workers)."""
        try:
            return lookup(*args)
        except NotFound:
            await self.projector.catch_up()
            return lookup(*args)

    def agent_view(self, agent_id: str) -> AgentView:
        view = self.model.agent_view(agent_id)
        if view is None:
            raise NotFound(f"no agent with id {agent_id!r}")
        return view

    def visible_agent(self, principal: Principal | None, agent_id: str) -> AgentView:
        require_self_or_operator(principal, agent_id)
        return self.agent_view(agent_id)

    def list_agents(self, principal: Principal | None, pool: str | None = None) -> list[AgentView]:
        require_operator(principal)
        ids = sorted(self.model.agents, key=lambda a: (self.model.agents[a]["registered_at"], a))
        views = [self.model.agent_view(a) for a in ids]
        return [v for v in views if pool is None or v["pool"] == pool]

    async def register_agent(self, principal: Principal | None, name: str, pool: str = "default",
                             priority_class: str = ev.INTERACTIVE,
                             context_budget_tokens: int | None = None) -> tuple[AgentView, str]:
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

    async def rotate_agent_token(self, principal: Principal | None, agent_id: str) -> tuple[AgentView, str]:
        """A new token for the agent (returned once, stored only as its hash); the old one,
        or a revoked state, ends when the event is folded."""
        principal = require_operator(principal)
        view = await self.fresh(self.agent_view, agent_id)
        token = new_agent_token()
        await self._append([NewEvent(agent_stream(agent_id), ev.AGENT_TOKEN_ROTATED,
                                     {"agent_id": agent_id, "token_hash": hash_token(token), "at": self.clock()},
                                     self._meta(principal))])
        return self.agent_view(view["agent_id"]), token

    async def revoke_agent_token(self, principal: Principal | None, agent_id: str) -> AgentView:
        """No token works for the agent until the operator rotates a new one."""
        principal = require_operator(principal)
        view = await self.fresh(self.agent_view, agent_id)
        if view["token_hash"] is None:
            raise Conflict(f"agent {agent_id} has no token to revoke")
        await self._append([NewEvent(agent_stream(agent_id), ev.AGENT_TOKEN_REVOKED,
                                     {"agent_id": agent_id, "at": self.clock()}, self._meta(principal))])
        return self.agent_view(agent_id)

    async def release_agent(self, principal: Principal | None, agent_id: str) -> AgentView:
        principal = require_operator(principal)
        view = await self.fresh(self.agent_view, agent_id)
        if rules.release_refusal(view["state"]):
            raise Conflict(f"agent {agent_id} is not quarantined")
        async with self.replies.expect(agent_id, lifts_quarantine) as lifted:
            await self._append([NewEvent(agent_stream(agent_id), ev.AGENT_RELEASED,
                                         {"agent_id": agent_id, "pool": view["pool"], "at": self.clock()},
                                         self._meta(principal))])
            await lifted.wait(DECISION_TIMEOUT)
        return self.agent_view(agent_id)

    async def set_hibernated(self, principal: Principal | None, agent_id: str, hibernated: bool,
                             extra: dict | None = None) -> AgentView:
        """Hibernate or wake an agent, under its lock (taken only for a caller allowed to, and
        an agent that exists: nothing is held for an anonymous caller's made-up id)."""
        require_self_or_operator(principal, agent_id)
        await self.fresh(self.agent_view, agent_id)
        async with self.agent_lock(agent_id):
            return await self.set_hibernated_locked(principal, agent_id, hibernated, extra)

    async def set_hibernated_locked(self, principal: Principal | None, agent_id: str, hibernated: bool,
                                    extra: dict | None = None) -> AgentView:
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
    def turn_view(self, turn_id: str) -> TurnDoc:
        doc = self.model.turns.get(turn_id)
        if doc is None:
            raise NotFound(f"no turn with id {turn_id!r}")
        return doc

    async def recall_turn(self, turn_id) -> None:
        """Finished turns leave memory (app/projections/core.py); one asked about comes back."""
        if isinstance(turn_id, str) and turn_id and turn_id not in self.model.turns:
            await self.projector.recall_turn(turn_id)

    def visible_turn(self, principal: Principal | None, turn_id: str) -> TurnDoc:
        principal = require(principal)
        if principal.is_operator:
            return self.turn_view(turn_id)
        doc = self.model.turns.get(turn_id)
        if doc is None or doc["agent_id"] != principal.agent_id:
            raise Forbidden("no turn of yours has this id")   # the same for no one's (see _own_turn)
        return doc

    def _calling_agent(self, principal: Principal | None) -> AgentView:
        principal = require(principal)
        if principal.is_operator:
            raise Forbidden("turns are requested by agents; use an agent token")
        return self.agent_view(principal.agent_id)

    async def request_turn(self, principal: Principal | None, estimated_tokens: int,
                           max_output_tokens: int | None = None, wait_seconds: float = 0.0,
                           streams: bool = False, request_id: str | None = None,
                           run_id: str | None = None, *, held_by_gateway: bool = False,
                           model: str | None = None) -> TurnDoc:
        agent = await self.fresh(self._calling_agent, principal)
        request_id = idempotency.checked(request_id)
        est = _check_int("estimatedTokens", estimated_tokens, 0, MAX_TOKENS_PER_CALL)
        out = _check_int("maxOutputTokens", 0 if max_output_tokens is None else max_output_tokens,
                         0, MAX_TOKENS_PER_CALL)
        wait = _check_float("waitSeconds", wait_seconds or 0.0, 0.0, MAX_WAIT_SECONDS)
        if not isinstance(streams, bool):
            raise BadInput("streams must be true or false")
        if run_id is not None and not (isinstance(run_id, str) and 1 <= len(run_id) <= MAX_RUN_ID
                                       and run_id.isprintable()):
            raise BadInput(f"runId must be 1-{MAX_RUN_ID} printable characters")
        turn_id = self.ids() if request_id is None else idempotency.turn_id_for(agent["agent_id"], request_id)
        if request_id is not None:
            await self.recall_turn(turn_id)   # the first attempt's turn may have ended and left memory
        if request_id is not None and turn_id in self.model.turns:   # a retry: the first answer
            self._refused_by_scheduler(idempotency.same_turn_request(self.turn_view(turn_id), request_id,
                                                                     est, out, streams))
            return await self._await_grant(turn_id, wait)
        pool = self.model.pools[agent["pool"]]
        settings = pool.settings
        # The scheduler's own rules, checked here too so that a request bound to be refused
        # gets an error and appends nothing. (An agent not admitted yet will be: its
        # registration comes before this request in the log.)
        if refusal := rules.reservation_refusal(rules.reservation(est, out), limiter.token_capacity(settings)):
            raise BadInput(f"estimatedTokens + maxOutputTokens = {refusal.need} exceeds pool "
                           f"{agent['pool']!r} {limiter.budget_name(settings)} of {refusal.limit}; "
                           "it could never be admitted")
        if rules.agent_refusal(agent["state"]):
            raise Forbidden("agent is quarantined after repeated reaps; an operator must release it")
        unanswered = self._unanswered.get(agent["agent_id"], 0)
        # The pool's whole queue under the cap: the agent's share is too (no count needed).
        queued = 0 if pool.queued_count() + unanswered < self.max_queued_per_agent \
            else pool.queued_of(agent["agent_id"])
        if refusal := rules.queue_refusal(queued + unanswered, self.max_queued_per_agent):
            raise LimitExceeded(f"agent has {refusal.need - 1} turns queued or on their way, the most "
                                f"one agent may have waiting is {refusal.limit}; finish or cancel some first")
        if self.pool_guard is not None:
            await self.pool_guard(principal, agent)
        if agent["hibernated"]:
            await self.set_hibernated(principal, agent["agent_id"], False, {"reason": "turn requested"})
        # The cap travels with the request: the pool's scheduler, which sees every worker's
        # requests in log order, refuses the one over it (this worker's check above sees
        # only its own requests on their way and what its projection has folded).
        data = {"turn_id": turn_id, "agent_id": agent["agent_id"], "pool": agent["pool"],
                "estimated_tokens": est, "max_output_tokens": out, "at": self.clock(),
                "queue_cap": self.max_queued_per_agent}
        if streams:
            data["streams"] = True
        if request_id is not None:
            data["request_id"] = request_id
        if held_by_gateway:
            # The gateway renews the lease while its upstream call is open (deadlines.py).
            data["holder"] = "gateway"
        if isinstance(model, str) and 0 < len(model) <= MAX_MODEL_NAME:
            data["model"] = model
        if run_id is not None:
            data["run_id"] = run_id   # the pool charges the run's attained service (ordering.py)
        agent_id = agent["agent_id"]
        meta = self._meta(principal, turn_id)
        if self.timing_stamps:
            meta["worker_pid"] = os.getpid()   # which worker took it (bench grant_timing)
        # Wait for the scheduler's answer: queued at least, granted if the caller waits.
        async with self.replies.expect(turn_id, answers_request) as answered, \
                self.replies.expect(turn_id, leaves_queue) as left_queue:
            self._unanswered[agent_id] = self._unanswered.get(agent_id, 0) + 1
            try:
                await self._append([NewEvent(turn_stream(turn_id), ev.TURN_REQUESTED, data, meta)],
                                   {turn_stream(turn_id): NO_STREAM})
                await answered.wait(DECISION_TIMEOUT)
            except ConcurrencyError:
                if request_id is None:
                    raise
                # The same request, appended a moment ago by a concurrent retry (maybe on
                # another worker): answer with that turn, read back if it has ended since.
                await self.recall_turn(turn_id)
                idempotency.same_turn_request(self.turn_view(turn_id), request_id, est, out, streams)
            finally:
                left = self._unanswered.get(agent_id, 1) - 1
                if left:
                    self._unanswered[agent_id] = left
                else:
                    self._unanswered.pop(agent_id, None)
            self._refused_by_scheduler(self.turn_view(turn_id))
            if wait > 0 and self.turn_view(turn_id)["status"] == ev.QUEUED:
                await left_queue.wait(wait)
        return self.turn_view(turn_id)

    def _refused_by_scheduler(self, doc: dict) -> None:
        """The API's error for a request the scheduler refused on a rule this worker had
        checked too but against what it had seen: the agent's queue cap (LIMIT_EXCEEDED),
        its pool capability (FORBIDDEN). Both are decided again in log order."""
        if doc["status"] != ev.CANCELLED:
            return
        if rules.is_queue_full_reason(doc.get("reason")):
            raise LimitExceeded(f"{doc['reason']}; finish or cancel some first")
        if pool_access.is_refused_reason(doc.get("reason")):
            raise Forbidden(doc["reason"])

    async def _await_grant(self, turn_id: str, wait: float) -> TurnDoc:
        """A queued turn's view once granted (or ended), or after `wait` seconds."""
        async with self.replies.expect(turn_id, leaves_queue) as left_queue:
            if wait > 0 and self.turn_view(turn_id)["status"] == ev.QUEUED:
                await left_queue.wait(wait)
        return self.turn_view(turn_id)

    def _own_turn(self, principal: Principal | None, turn_id: str, *, operator_ok: bool = False) -> TurnDoc:
        principal = require(principal)
        if not isinstance(turn_id, str) or not turn_id:
            raise BadInput("turnId is required")
        if principal.is_operator:
            doc = self.turn_view(turn_id)
            if not operator_ok:
                raise Forbidden("only the turn's agent may do this")
        else:
            # One answer whether the turn is another agent's or no one's: a NOT_FOUND for
            # missing ids beside a FORBIDDEN for foreign ones would tell an agent which ids
            # name turns (the `turn` query answers the same way).
            doc = self.model.turns.get(turn_id)
            if doc is None or doc["agent_id"] != principal.agent_id:
                raise Forbidden("no turn of yours has this id")
        if doc.get("holder") == "gateway" and not (principal.via_gateway or principal.is_operator):
            raise Forbidden("this turn is held by the gateway, which reports its heartbeats and completion "
                            "itself; an agent cannot change it")
        return doc

    async def _granted_turn(self, principal: Principal | None, turn_id: str) -> TurnDoc:
        """The caller's turn; if this worker does not see it GRANTED yet, catch up once:
        another worker's scheduler may have granted it a moment ago."""
        await self.recall_turn(turn_id)
        doc = await self.fresh(self._own_turn, principal, turn_id)
        if doc["status"] == ev.QUEUED:
            await self.projector.catch_up()
            doc = self._own_turn(principal, turn_id)
        return doc

    async def _input_and_wait(self, principal: Principal, doc: TurnDoc, type_: str, data: dict,
                              answered, expected: int | None = None) -> TurnDoc:
        """Append a turn's input and wait (briefly) for the first decision that `answered`
        takes as the scheduler's reply to it. `expected`: the turn stream's version the
        append requires (ConcurrencyError if anything was appended to it since)."""
        turn_id = doc["turn_id"]
        data = {"turn_id": turn_id, "agent_id": doc["agent_id"], "pool": doc["pool"], "at": self.clock(), **data}
        async with self.replies.expect(turn_id, answered) as reply:
            await self._append([NewEvent(turn_stream(turn_id), type_, data, self._meta(principal, turn_id))],
                               None if expected is None else {turn_stream(turn_id): expected})
            await reply.wait(DECISION_TIMEOUT)
        return self.turn_view(turn_id)

    async def heartbeat(self, principal: Principal | None, turn_id: str, request_id: str | None = None, *,
                        keepalive: bool = False, idle_s: float | None = None) -> TurnDoc:
        """A client's heartbeat; with `keepalive`, a holder's renewal, and `idle_s` the seconds
        since the held stream's last chunk (once it has begun: the stall suspicion's input)."""
        request_id = idempotency.checked(request_id)
        if keepalive:
            return await self._heartbeat(principal, turn_id, None, keepalive=True, idle_s=idle_s)
        if request_id is None:
            return await self._heartbeat(principal, turn_id, None)
        async with self._retry_lock(turn_id):
            return await self._once(turn_id, lambda expected: self._heartbeat(principal, turn_id, request_id,
                                                                              expected))

    async def _heartbeat(self, principal: Principal | None, turn_id: str, request_id: str | None,
                         expected: int | None = None, *, keepalive: bool = False,
                         idle_s: float | None = None) -> TurnDoc:
        doc = await self._granted_turn(principal, turn_id)
        if request_id is not None and (last := await self._answered_before(doc, "heartbeat_request_id",
                                                                           request_id)):
            return last   # a retry of the latest heartbeat: its lease extension stands
        if rules.report_refusal(doc["status"]):
            raise Conflict(f"turn {turn_id} is {doc['status']}; only a GRANTED turn takes heartbeats")
        data: dict[str, Any] = {} if request_id is None else {"request_id": request_id}
        if keepalive:
            data["keepalive"] = True   # the holder is alive; the call has shown nothing yet
            if idle_s is not None:
                data["idle_s"] = math.ceil(max(0.0, idle_s) * 1000) / 1000   # never rounded below the stall
        return await self._input_and_wait(principal, doc, ev.HEARTBEAT_SENT, data, changes_turn, expected)

    async def complete_turn(self, principal: Principal | None, turn_id: str, outcome: str = ev.OK,
                            prompt_tokens: int | None = None, completion_tokens: int | None = None,
                            retry_after_seconds: float | None = None,
                            rate_limit_headers: Any = None, request_id: str | None = None) -> TurnDoc:
        request_id = idempotency.checked(request_id)
        if request_id is not None:
            async with self._retry_lock(turn_id):
                return await self._once(turn_id, lambda expected: self._complete_turn(
                    principal, turn_id, outcome, prompt_tokens, completion_tokens, retry_after_seconds,
                    rate_limit_headers, request_id, expected))
        return await self._complete_turn(principal, turn_id, outcome, prompt_tokens, completion_tokens,
                                         retry_after_seconds, rate_limit_headers, None)

    async def _complete_turn(self, principal, turn_id, outcome, prompt_tokens, completion_tokens,
                             retry_after_seconds, rate_limit_headers, request_id: str | None,
                             expected: int | None = None) -> TurnDoc:
        doc = await self._granted_turn(principal, turn_id)
        if request_id is not None and (first := await self._answered_before(doc, "completion_request_id",
                                                                            request_id)):
            return first
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
        if request_id is not None:
            data["request_id"] = request_id
        if rules.report_refusal(doc["status"]):
            state = doc["status"].lower()
            raise Conflict(f"turn {turn_id} is already {state}" if doc["finished_at"]
                           else f"turn {turn_id} is {doc['status']}; only a GRANTED turn can complete")
        return await self._input_and_wait(principal, doc, ev.COMPLETION_REPORTED, data, ends_turn, expected)

    async def cancel_turn(self, principal: Principal | None, turn_id: str, request_id: str | None = None) -> TurnDoc:
        request_id = idempotency.checked(request_id)
        if request_id is None:
            return await self._cancel_turn(principal, turn_id, None)
        async with self._retry_lock(turn_id):
            return await self._once(turn_id, lambda expected: self._cancel_turn(principal, turn_id, request_id,
                                                                                expected))

    async def _cancel_turn(self, principal: Principal | None, turn_id: str, request_id: str | None,
                           expected: int | None = None) -> TurnDoc:
        await self.recall_turn(turn_id)
        doc = await self.fresh(lambda: self._own_turn(principal, turn_id, operator_ok=True))
        if request_id is not None and (first := await self._answered_before(doc, "cancel_request_id", request_id)):
            return first
        if doc["finished_at"] is not None:
            raise Conflict(f"turn {turn_id} is already {doc['status'].lower()}")
        data = {"reason": f"cancelled by {principal.actor}"}
        if request_id is not None:
            data["request_id"] = request_id
        return await self._input_and_wait(principal, doc, ev.CANCEL_REQUESTED, data, ends_turn, expected)

    # -- retries ----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _retry_lock(self, turn_id: str):
        """One command with a request id per turn at a time in this process, so that a
        retry racing its first attempt sees the first one's event (across workers, the
        scheduler answers only the first report of a turn)."""
        entry = self._retry_locks.setdefault(turn_id, [asyncio.Lock(), 0])   # [lock, users]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self._retry_locks[turn_id]

    async def _once(self, turn_id: str, command):
        """Run a turn command that has a request id so that it appends at most once across
        workers. `command(expected)` checks the earlier answers (`_answered_before`, which
        reads the log to its head) and appends its input only at the turn stream's version
        `expected`, read before that check: an attempt appended by another worker in
        between makes our append fail, and the command runs again, finding it. The
        in-process retry lock cannot do this: the retries may be on two workers."""
        for _ in range(MAX_ATTEMPTS):
            expected = await self.store.stream_version(turn_stream(turn_id))
            try:
                return await command(expected)
            except ConcurrencyError:
                continue   # something was appended to the turn meanwhile: look again
        raise Conflict(f"turn {turn_id} kept changing under this command; retry it")

    async def _answered_before(self, doc: TurnDoc, key: RequestIdKey, request_id: str) -> TurnDoc | None:
        """The turn as the first command with `request_id` left it, if there was one; the
        log is read up to its head first (the first attempt may have gone to another worker,
        and a heartbeat's key may hold an earlier heartbeat's id)."""
        if doc.get(key) != request_id:
            await self.projector.catch_up()
            doc = self.turn_view(doc["turn_id"])
        if doc.get(key) != request_id:
            return None
        return await self._once_answered(doc, key, request_id)

    async def _once_answered(self, doc: TurnDoc, key: RequestIdKey, request_id: str) -> TurnDoc:
        """The turn once the scheduler has answered that first command: on another worker
        it may have been appended a moment ago and not be answered yet."""
        turn_id = doc["turn_id"]
        if key != "heartbeat_request_id":   # a completion or a cancel: answered when the turn ends
            async with self.replies.expect(turn_id, ends_turn) as ended:
                if self.turn_view(turn_id)["finished_at"] is None:
                    await ended.wait(DECISION_TIMEOUT)
            return self.turn_view(turn_id)
        # A heartbeat: answered by the lease extension that cites its input as its cause.
        [first] = await self.store.read(0, 1, streams=[turn_stream(turn_id)], types=[ev.HEARTBEAT_SENT],
                                        data={"request_id": request_id})

        def extends_for_it(d) -> bool:
            return isinstance(d, ev.LeaseExtended) and isinstance(d.cause, int) and d.cause >= first.position
        async with self.replies.expect(turn_id, extends_for_it) as extended:
            answer = await self.store.read(first.position, 1, streams=[pool_stream(doc["pool"])],
                                           types=[ev.LEASE_EXTENDED], data={"turn_id": turn_id,
                                                                            "cause": first.position})
            if answer:
                await self.projector.wait_position(answer[0].position)
            else:
                await extended.wait(DECISION_TIMEOUT)
        return self.turn_view(turn_id)


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

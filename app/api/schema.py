"""The strawberry schema: thin resolvers over app.service (rules live there)."""
from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import cast

import strawberry
from strawberry.types import Info

from app import config
from app.auth import Principal, require, require_operator
from app.db.outage import is_outage
from app.domain.decide import available
from app.errors import BadInput, Forbidden, NotFound, ServiceError
from app.eventstore.listener import follow
from app.gateway.upstream_urls import check_upstream_url
from app.projections.documents import TurnDoc
from app.replay import replay_check
from app.replies import changes_turn

from . import types as t
from .audit_schema import AuditQuery
from .console_schema import ConsoleQuery
from .context import principal, runtime
from .context_schema import ContextMutation, ContextQuery
from .document_cache import SmallDocumentParserCache, SmallDocumentValidationCache
from .errors import ErrorCodes, as_graphql_error, assign_codes, is_input_error
from .hot_documents import HotDocuments, LearnHotDocuments
from .pool_input import settings_of
from .resources_schema import ResourceMutation, ResourceQuery
from .security import RefuseInvalidCredentials, limit_extensions


def _scheduler_state(state, now: float) -> t.SchedulerState:
    requests, tokens = available(state, now)
    s = state.settings
    paused = state.paused_until if state.paused_until and state.paused_until > now else None
    return t.SchedulerState(
        pool=s.name, position=state.position,
        lanes=[_lane(i, tid, state.turns.get(tid)) for i, tid in enumerate(state.lanes)],
        levels=[t.LevelQueue(level=i, queued=[_queued(state.turns[tid]) for tid in queue])
                for i, queue in enumerate(state.queues)],
        rate_limit=t.RateLimit(rpm=s.rpm, tpm=s.tpm, available_requests=round(requests, 3),
                               available_tokens=round(tokens, 3), paused_until=t.ts(paused),
                               rate_factor=round(state.rate_factor, 4)))


def _lane(index: int, turn_id: strawberry.ID | None, turn) -> t.LaneSlot:
    if turn is None:
        return t.LaneSlot(index=index, turn_id=turn_id, agent_id=None)
    return t.LaneSlot(index=index, turn_id=turn_id, agent_id=turn.agent_id, granted_at=t.ts(turn.granted_at),
                      lease_expires_at=t.ts(turn.lease_expires_at),
                      awaiting_first_chunk=turn.streams and not turn.progressed)


def _queued(turn) -> t.QueuedTurn:
    return t.QueuedTurn(turn_id=turn.turn_id, agent_id=turn.agent_id, queued_at=t.ts(turn.queued_at),
                        estimated_tokens=turn.estimated_tokens)


async def _visible_turn(info: Info, who: Principal, turn_id: str) -> TurnDoc:
    """The turn, for a caller already authenticated. An agent gets FORBIDDEN for any turn
    not its own, one that does not exist included; only the operator learns NOT_FOUND."""
    service = runtime(info).service
    await service.recall_turn(turn_id)
    try:
        return service.visible_turn(who, turn_id)
    except NotFound:
        if who.is_operator:
            raise
        raise Forbidden("no turn of yours has this id") from None


def _check_pool_visible(info: Info, pool: str) -> None:
    who = require(principal(info))
    if not who.is_operator:
        agent = runtime(info).service.agent_view(cast(str, who.agent_id))   # an agent's principal names it
        if agent["pool"] != pool:
            raise Forbidden("agents may read only their own pool")




@strawberry.type
class Query(AuditQuery, ConsoleQuery, ContextQuery, ResourceQuery):
    @strawberry.field
    def me(self, info: Info) -> t.Agent | None:
        who = principal(info)
        if who is None or who.is_operator:
            return None
        return t.Agent.of(runtime(info).service.agent_view(cast(str, who.agent_id)))   # an agent's principal

    @strawberry.field
    def agent(self, info: Info, id: strawberry.ID) -> t.Agent | None:
        try:
            return t.Agent.of(runtime(info).service.visible_agent(principal(info), str(id)))
        except NotFound:
            return None

    @strawberry.field
    def agents(self, info: Info, pool: str | None = None) -> list[t.Agent]:
        return [t.Agent.of(v) for v in runtime(info).service.list_agents(principal(info), pool)]

    @strawberry.field
    def pools(self, info: Info) -> list[t.Pool]:
        who = require(principal(info))
        svc = runtime(info).service
        if who.is_operator:
            return [t.Pool.of(svc.pool_settings(name), svc.has_upstream_api_key(name))
                    for name in sorted(svc.model.pools)]
        # An agent reads its own pool only (other pools' budgets are not its business), and
        # never the upstream endpoint: that is the operator's.
        own = svc.agent_view(cast(str, who.agent_id))["pool"]   # not the operator: an agent
        return [t.Pool.of(svc.pool_settings(own), svc.has_upstream_api_key(own), show_upstream=False)]

    @strawberry.field(description="A turn: null when there is none with this id (the operator). An agent "
                                  "asking for a turn that is not its own is FORBIDDEN whether the turn exists "
                                  "or not, so that the answer tells nothing of other agents' turns.")
    async def turn(self, info: Info, id: strawberry.ID) -> t.Turn | None:
        who = require(principal(info))   # who asks is judged before anything is read
        try:
            return t.Turn.of(await _visible_turn(info, who, str(id)))
        except NotFound:
            return None

    @strawberry.field
    def scheduler(self, info: Info, pool: str = "default") -> t.SchedulerState:
        _check_pool_visible(info, pool)
        state = runtime(info).projector.model.pools.get(pool)
        if state is None:
            raise NotFound(f"no pool named {pool!r}")
        return _scheduler_state(state, time.time())

    @strawberry.field(description="A pool's scheduler state as of a past position of the log. Each answer "
                                  "folds the pool's stream: a document may ask for it at most twice "
                                  "(LIMIT_EXCEEDED otherwise).")
    async def scheduler_at(self, info: Info, position: int, pool: str = "default") -> t.SchedulerState:
        _check_pool_visible(info, pool)
        if position < 0:
            raise BadInput("position must be >= 0")
        state = await runtime(info).past_pool_states.at(pool, position)
        if state is None:
            raise NotFound(f"pool {pool!r} did not exist at position {position}")
        return _scheduler_state(state, state.clock)

    @strawberry.field
    async def events(self, info: Info, after: int = 0, limit: int = 100, types: list[str] | None = None,
                     agent_id: strawberry.ID | None = None) -> list[t.Event]:
        require_operator(principal(info))
        if not 1 <= limit <= 1000:
            raise BadInput("limit must be between 1 and 1000")
        if after < 0:
            raise BadInput("after must be >= 0")
        found = await runtime(info).store.read(after, limit, types=types or None,
                                               agent_id=str(agent_id) if agent_id else None)
        return [t.Event.of(e) for e in found]

    @strawberry.field
    async def replay_check(self, info: Info, pool: str | None = None) -> t.ReplayReport:
        require_operator(principal(info))
        rt = runtime(info)
        if pool is not None and pool not in rt.projector.model.pools:
            raise NotFound(f"no pool named {pool!r}")
        report = await replay_check(rt.store, rt.projector, pool)
        return t.ReplayReport(events_replayed=report.events_replayed, live_hash=report.live_hash,
                              replay_hash=report.replay_hash, matches=report.matches,
                              position=report.position)


@strawberry.type
class Mutation(ContextMutation, ResourceMutation):
    @strawberry.mutation
    async def create_pool(self, info: Info, input: t.PoolInput) -> t.Pool:
        try:
            settings = settings_of(input)
        except (TypeError, ValueError) as exc:
            raise BadInput(str(exc)) from None
        svc = runtime(info).service
        require_operator(principal(info))   # who asks is judged before what is asked
        if settings.upstream_base_url is not None:
            check_upstream_url(settings.upstream_base_url, config.load().upstream_allowed_hosts or frozenset())
        created = await svc.create_pool(principal(info), settings, input.upstream_api_key)
        return t.Pool.of(created, svc.has_upstream_api_key(created.name))

    @strawberry.mutation
    async def register_agent(self, info: Info, input: t.RegisterAgentInput) -> t.AgentRegistration:
        agent, token = await runtime(info).service.register_agent(
            principal(info), input.name, input.pool, input.priority_class.value, input.context_budget_tokens)
        return t.AgentRegistration(agent=t.Agent.of(agent), token=token)

    @strawberry.mutation(description="Operator: a new token for the agent, shown once; the old one stops working.")
    async def rotate_agent_token(self, info: Info, agent_id: strawberry.ID) -> t.AgentRegistration:
        agent, token = await runtime(info).service.rotate_agent_token(principal(info), str(agent_id))
        return t.AgentRegistration(agent=t.Agent.of(agent), token=token)

    @strawberry.mutation(description="Operator: the agent's token stops working until a rotation.")
    async def revoke_agent_token(self, info: Info, agent_id: strawberry.ID) -> t.Agent:
        return t.Agent.of(await runtime(info).service.revoke_agent_token(principal(info), str(agent_id)))

    @strawberry.mutation
    async def release_agent(self, info: Info, agent_id: strawberry.ID) -> t.Agent:
        return t.Agent.of(await runtime(info).service.release_agent(principal(info), str(agent_id)))

    @strawberry.mutation
    async def request_turn(self, info: Info, input: t.TurnRequestInput) -> t.Turn:
        return t.Turn.of(await runtime(info).service.request_turn(
            principal(info), input.estimated_tokens, input.max_output_tokens, input.wait_seconds,
            streams=input.streams, request_id=input.request_id, run_id=input.run_id))

    @strawberry.mutation
    async def heartbeat(self, info: Info, turn_id: strawberry.ID, request_id: str | None = None) -> t.Turn:
        return t.Turn.of(await runtime(info).service.heartbeat(principal(info), str(turn_id),
                                                               request_id=request_id))

    @strawberry.mutation
    async def complete_turn(self, info: Info, input: t.CompleteTurnInput) -> t.Turn:
        return t.Turn.of(await runtime(info).service.complete_turn(
            principal(info), str(input.turn_id), input.outcome.value, input.prompt_tokens,
            input.completion_tokens, input.retry_after_seconds, input.rate_limit_headers,
            request_id=input.request_id))

    @strawberry.mutation
    async def cancel_turn(self, info: Info, turn_id: strawberry.ID, request_id: str | None = None) -> t.Turn:
        return t.Turn.of(await runtime(info).service.cancel_turn(principal(info), str(turn_id),
                                                                 request_id=request_id))

    @strawberry.mutation
    async def hibernate_agent(self, info: Info, agent_id: strawberry.ID) -> t.Agent:
        return t.Agent.of(await runtime(info).context.set_hibernated(principal(info), str(agent_id), True))

    @strawberry.mutation
    async def wake_agent(self, info: Info, agent_id: strawberry.ID) -> t.Agent:
        return t.Agent.of(await runtime(info).context.set_hibernated(principal(info), str(agent_id), False))


async def _follow_turn(info: Info, who: Principal, turn_id: str) -> AsyncGenerator[t.Turn, None]:
    """The turn now, then each change of its record until its end has been sent."""
    rt = runtime(info)
    try:
        doc = await _visible_turn(info, who, turn_id)
    except ServiceError as exc:
        raise as_graphql_error(exc) from None
    key = (doc["status"], doc["version"])
    yield t.Turn.of(doc)
    while True:
        # The projector updates the turn's record in place, so the record may have
        # changed, even to its end, while the last state was being sent: read it afresh
        # after every yield, and stop only once its end has been sent.
        doc = rt.service.turn_view(turn_id)
        if (doc["status"], doc["version"]) != key:
            key = (doc["status"], doc["version"])
            yield t.Turn.of(doc)
            continue
        if doc["finished_at"] is not None:
            return
        # The next decision that changes the turn's record, unless one came meanwhile.
        async with rt.service.replies.expect(turn_id, changes_turn) as change:
            now = rt.service.turn_view(turn_id)
            if (now["status"], now["version"]) == key:
                await change.wait(30.0)


@strawberry.type
class Subscription:
    @strawberry.subscription
    async def events(self, info: Info, after: int | None = None, types: list[str] | None = None,
                     agent_id: strawberry.ID | None = None) -> AsyncGenerator[t.Event, None]:
        try:
            who = require(principal(info))
            if not who.is_operator:
                if agent_id is not None and str(agent_id) != who.agent_id:
                    raise Forbidden("agents may follow only their own events")
                agent_id = strawberry.ID(cast(str, who.agent_id))   # an agent's principal names it
            if after is not None and after < 0:
                raise BadInput("after must be >= 0")
        except ServiceError as exc:
            raise as_graphql_error(exc) from None
        rt = runtime(info)
        try:
            give_back = rt.subscription_slots.take(who)
        except ServiceError as exc:
            raise as_graphql_error(exc) from None
        try:
            start = after if after is not None else await rt.store.head()
            # Filtered in the log's read (its type and agent indexes), not here: a follower
            # of one agent reads that agent's rows, never the whole log.
            async for event in follow(rt.store, rt.listener, start, types=list(types) if types else None,
                                      agent_id=str(agent_id) if agent_id else None):
                yield t.Event.of(event)
        finally:
            give_back()

    @strawberry.subscription
    async def turn(self, info: Info, turn_id: strawberry.ID) -> AsyncGenerator[t.Turn, None]:
        rt = runtime(info)
        try:
            who = require(principal(info))   # who asks is judged before anything is read
            give_back = rt.subscription_slots.take(who)
        except ServiceError as exc:
            raise as_graphql_error(exc) from None
        try:
            async for turn in _follow_turn(info, who, str(turn_id)):
                yield turn
        finally:
            give_back()


class AgentRMSchema(strawberry.Schema):
    hot_documents: HotDocuments   # set by build_schema

    def process_errors(self, errors, execution_context=None) -> None:
        # A client's mistake is an answer, not a server fault: log only the unexpected.
        unexpected = [e for e in errors if e.original_error is not None and not is_input_error(e)
                      and not isinstance(e.original_error, ServiceError) and not is_outage(e.original_error)]
        if unexpected:
            super().process_errors(unexpected, execution_context)

    # Errors that strawberry catches around the extensions (one raised by an extension
    # itself) never pass ErrorCodes: they get their code here, on the way out.
    async def execute(self, *args, **kwargs):
        result = await super().execute(*args, **kwargs)
        assign_codes(result.errors, escaped=True)
        return result

    async def stream(self, *args, **kwargs):
        results = await super().stream(*args, **kwargs)
        if not hasattr(results, "__aiter__"):
            assign_codes(results.errors, escaped=True)  # type: ignore[attr-defined]  # one result, not a stream
            return results

        async def coded():
            async for result in results:
                assign_codes(getattr(result, "errors", None), escaped=True)
                yield result
        return coded()


def build_schema(*, introspection: bool = True) -> AgentRMSchema:
    """The schema with its limits (app/api/security.py); introspection can be switched off
    for production (AGENTRM_INTROSPECTION=0, read by app/config.py)."""
    built = AgentRMSchema(query=Query, mutation=Mutation, subscription=Subscription,
                          extensions=[ErrorCodes, RefuseInvalidCredentials, *limit_extensions(introspection),
                                      SmallDocumentParserCache, SmallDocumentValidationCache, LearnHotDocuments])
    built.hot_documents = HotDocuments(built)   # the turn documents' plans (hot_documents.py)
    return built


schema = build_schema()

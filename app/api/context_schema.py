"""GraphQL for the context tiers (CONTRACT.md: appendContext, compactContext, context)."""
from __future__ import annotations

import strawberry
from strawberry.types import Info

from .context import principal, runtime


@strawberry.type
class ContextStats:
    agent_id: strawberry.ID
    hot_tokens: int
    warm_tokens: int
    cold_tokens: int
    messages: int
    hibernated: bool

    @classmethod
    def of(cls, s: dict) -> ContextStats:
        return cls(agent_id=strawberry.ID(s["agent_id"]), hot_tokens=s["hot_tokens"], warm_tokens=s["warm_tokens"],
                   cold_tokens=s["cold_tokens"], messages=s["messages"], hibernated=s["hibernated"])


@strawberry.type
class ContextItem:
    tier: str
    kind: str
    role: str
    content: str
    tokens: int
    ref: str


@strawberry.type
class ContextView:
    agent_id: strawberry.ID
    budget_tokens: int
    tokens: int
    pinned: list[str]
    items: list[ContextItem]
    omitted_pinned: list[int]


@strawberry.type
class CompactionResult:
    agent_id: strawberry.ID
    compacted: bool
    tokens_before: int
    tokens_after: int
    key_facts_kept: int
    summarizer: str | None


@strawberry.input
class AppendContextInput:
    role: str
    content: str
    pinned: bool = False
    agent_id: strawberry.ID | None = None  # the operator names the agent; an agent omits it


@strawberry.input
class ContextMessageInput:
    role: str
    content: str
    pinned: bool = False


def _view(view) -> ContextView:
    return ContextView(agent_id=strawberry.ID(view.agent_id), budget_tokens=view.budget_tokens,
                       tokens=view.tokens, pinned=list(view.pinned),
                       items=[ContextItem(tier=i.tier, kind=i.kind, role=i.role, content=i.content,
                                          tokens=i.tokens, ref=i.ref) for i in view.items],
                       omitted_pinned=list(view.omitted_pinned))


@strawberry.type
class ContextQuery:
    @strawberry.field
    async def context(self, info: Info, budget_tokens: int, agent_id: strawberry.ID | None = None,
                      query: str | None = None) -> ContextView:
        return _view(await runtime(info).context.view(principal(info), str(agent_id) if agent_id else None,
                                                      budget_tokens, query))

    @strawberry.field(description="The context view as it was at a past log position (time travel; "
                                  "cold chunks rank by recency there, with no query).")
    async def context_at(self, info: Info, position: int, budget_tokens: int,
                         agent_id: strawberry.ID | None = None) -> ContextView:
        return _view(await runtime(info).context.view_at(principal(info), str(agent_id) if agent_id else None,
                                                         budget_tokens, position))

    @strawberry.field
    async def context_stats(self, info: Info, agent_id: strawberry.ID | None = None) -> ContextStats:
        rt = runtime(info)
        agent = await rt.service.fresh(rt.context._target, principal(info), str(agent_id) if agent_id else None)
        from app.domain.context import context_stats
        return ContextStats.of(context_stats(rt.context.state(agent["agent_id"])))


@strawberry.type
class ContextMutation:
    @strawberry.mutation
    async def append_context(self, info: Info, input: AppendContextInput) -> ContextStats:
        stats = await runtime(info).context.append(principal(info), [(input.role, input.content, input.pinned)],
                                                   str(input.agent_id) if input.agent_id else None)
        return ContextStats.of(stats)

    @strawberry.mutation
    async def append_context_messages(self, info: Info, messages: list[ContextMessageInput],
                                      agent_id: strawberry.ID | None = None) -> ContextStats:
        stats = await runtime(info).context.append(principal(info), [(m.role, m.content, m.pinned) for m in messages],
                                                   str(agent_id) if agent_id else None)
        return ContextStats.of(stats)

    @strawberry.mutation
    async def compact_context(self, info: Info, agent_id: strawberry.ID | None = None) -> CompactionResult:
        r = await runtime(info).context.compact(principal(info), str(agent_id) if agent_id else None)
        return CompactionResult(agent_id=strawberry.ID(r["agent_id"]), compacted=r["compacted"],
                                tokens_before=r["tokens_before"], tokens_after=r["tokens_after"],
                                key_facts_kept=r["key_facts_kept"], summarizer=r["summarizer"])

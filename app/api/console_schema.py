"""GraphQL for the operator console: what its panels need beyond the contract's queries.

`ConsoleQuery` is merged into the root Query by inheritance, like `AuditQuery`. Operator
only. Every field here is a read of the in-memory read model or a pure function over the
log (the audit's verify); none writes.
- `agentActivity`: per-agent counters the agents table shows (turns, tokens, last
  activity), folded from the turns read model in one pass for the whole fleet, so a table
  of 1,000 agents costs one query, not 1,000.
- `contextTiers`: an agent's context as tiers (pinned, key facts with the superseded ones,
  warm summaries, hot messages, cold counts), what the console's context view draws.
- `verify`: `agentrm audit verify` over the log, with its first violation.
"""
from __future__ import annotations

import asyncio
from datetime import datetime

import strawberry
from strawberry.types import Info

from app.audit import load_records
from app.audit.verify import verify
from app.auth import require_operator
from app.domain.streams import pool_stream
from app.errors import BadInput, NotFound
from app.projections.context_archive import archived_context
from app.projections.documents import TurnDoc

from . import types as t
from .context import principal, runtime

_RECENT_TURNS_MAX = 200


@strawberry.type
class AgentActivity:
    agent_id: strawberry.ID
    turns: int
    queued: int
    granted: int
    tokens: int = strawberry.field(description="prompt plus completion tokens of its finished turns")
    last_activity_at: datetime | None


@strawberry.type
class ContextMessageView:
    seq: int
    role: str
    content: str
    tokens: int
    pinned: bool


@strawberry.type
class KeyFactView:
    fact_id: str
    kind: str
    text: str
    tokens: int
    superseded_by: str | None


@strawberry.type
class WarmSummaryView:
    segment_id: str
    from_seq: int
    to_seq: int
    summary: str
    tokens: int


@strawberry.type
class ContextTiers:
    agent_id: strawberry.ID
    hibernated: bool
    pinned: list[ContextMessageView]
    key_facts: list[KeyFactView]
    warm_summaries: list[WarmSummaryView]
    hot: list[ContextMessageView]
    cold_chunks: int
    cold_messages: int
    pinned_tokens: int
    facts_tokens: int
    warm_tokens: int
    hot_tokens: int
    cold_tokens: int
    compactions: int


@strawberry.type
class VerifyViolation:
    position: int
    stream: str
    type: str
    message: str


@strawberry.type
class VerifyReportView:
    ok: bool
    events_checked: int
    decisions_checked: int
    pools: list[str]
    first_violation: VerifyViolation | None


def _message(m) -> ContextMessageView:
    return ContextMessageView(seq=m.seq, role=m.role, content=m.content, tokens=m.tokens, pinned=m.pinned)


def activity_by_agent(turns: dict[str, TurnDoc]) -> dict[str, dict]:
    """Counters per agent over the turns read model (one pass)."""
    out: dict[str, dict] = {}
    for doc in turns.values():
        a = out.setdefault(doc["agent_id"], {"turns": 0, "queued": 0, "granted": 0, "tokens": 0, "last": None})
        a["turns"] += 1
        if doc["status"] == "QUEUED":
            a["queued"] += 1
        elif doc["status"] == "GRANTED":
            a["granted"] += 1
        a["tokens"] += (doc.get("prompt_tokens") or 0) + (doc.get("completion_tokens") or 0)
        latest = max(x for x in (doc["requested_at"], doc.get("granted_at"), doc.get("finished_at")) if x is not None)
        a["last"] = latest if a["last"] is None else max(a["last"], latest)
    return out


@strawberry.type
class ConsoleQuery:
    @strawberry.field(description="The log's last position: where a live view starts reading.")
    async def log_head(self, info: Info) -> int:
        require_operator(principal(info))
        return await runtime(info).store.head()

    @strawberry.field
    def agent_activity(self, info: Info, pool: str | None = None) -> list[AgentActivity]:
        require_operator(principal(info))
        model = runtime(info).projector.model
        counters = activity_by_agent(model.turns)
        out = []
        for agent_id, doc in model.agents.items():
            if pool is not None and doc["pool"] != pool:
                continue
            c = counters.get(agent_id, {"turns": 0, "queued": 0, "granted": 0, "tokens": 0, "last": None})
            last = max(x for x in (c["last"], doc.get("last_active_at"), doc["registered_at"]) if x is not None)
            out.append(AgentActivity(agent_id=strawberry.ID(agent_id), turns=c["turns"], queued=c["queued"],
                                     granted=c["granted"], tokens=c["tokens"], last_activity_at=t.ts(last)))
        return out

    @strawberry.field
    def agent_turns(self, info: Info, agent_id: strawberry.ID, limit: int = 20) -> list[t.Turn]:
        """An agent's most recent turns, newest first."""
        require_operator(principal(info))
        rt = runtime(info)
        if not 1 <= limit <= _RECENT_TURNS_MAX:
            raise BadInput(f"limit must be between 1 and {_RECENT_TURNS_MAX}")
        rt.service.agent_view(str(agent_id))  # NotFound for an unknown agent
        mine = [d for d in rt.projector.model.turns.values() if d["agent_id"] == str(agent_id)]
        mine.sort(key=lambda d: d["requested_at"], reverse=True)
        return [t.Turn.of(d) for d in mine[:limit]]

    @strawberry.field
    async def context_tiers(self, info: Info, agent_id: strawberry.ID) -> ContextTiers:
        require_operator(principal(info))
        rt = runtime(info)
        agent = await rt.service.fresh(rt.service.agent_view, str(agent_id))
        state = rt.context.state(agent["agent_id"])
        hibernated = state.hibernated
        if hibernated:
            # What a wake would restore, read without waking (as the context view does).
            state = await archived_context(rt.store, state.agent_id, rt.projector.model.position)
        pinned = [m for m in state.hot if m.pinned]
        hot = [m for m in state.hot if not m.pinned]
        live_facts = [f for f in state.facts if f.superseded_by is None]
        return ContextTiers(
            agent_id=strawberry.ID(state.agent_id), hibernated=hibernated,
            pinned=[_message(m) for m in pinned],
            key_facts=[KeyFactView(fact_id=f.fact_id, kind=f.kind, text=f.text, tokens=f.tokens,
                                   superseded_by=f.superseded_by) for f in state.facts],
            warm_summaries=[WarmSummaryView(segment_id=s.segment_id, from_seq=s.from_seq, to_seq=s.to_seq,
                                            summary=s.summary, tokens=s.summary_tokens)
                            for s in state.warm_segments],
            hot=[_message(m) for m in hot],
            cold_chunks=len(state.cold.chunks), cold_messages=len(state.cold.messages),
            pinned_tokens=sum(m.tokens for m in pinned), facts_tokens=sum(f.tokens for f in live_facts),
            warm_tokens=sum(s.summary_tokens for s in state.warm_segments),
            hot_tokens=sum(m.tokens for m in hot), cold_tokens=sum(m.tokens for m in state.cold.messages),
            compactions=state.compactions)

    @strawberry.field
    async def verify(self, info: Info, pool: str | None = None) -> VerifyReportView:
        require_operator(principal(info))
        rt = runtime(info)
        if pool is not None and pool not in rt.projector.model.pools:
            raise NotFound(f"no pool named {pool!r}")
        records = await load_records(rt.store, streams=[pool_stream(pool)] if pool else None)
        records = [r for r in records if r.stream.startswith("pool-")]
        report = await asyncio.to_thread(verify, records, pool)  # CPU-bound: off the event loop
        first = report.first
        return VerifyReportView(
            ok=report.ok, events_checked=report.events_checked, decisions_checked=report.decisions_checked,
            pools=list(report.pools),
            first_violation=None if first is None else VerifyViolation(
                position=first.position, stream=first.stream, type=first.type, message=first.message))

"""A hibernated agent's context lives only in the log: this folds it back.

Hibernation drops every tier from memory (app.domain.context); the agent's
`context-<id>` stream, whose ContextAppended and ContextCompacted events fold into the
whole context, is the archive. A wake reads that one stream (one indexed query, about a
thousand events for a long session) and `ctx.restore` checks the result against the
resume point the hibernation recorded.
"""
from __future__ import annotations

from app.domain import context as ctx
from app.eventstore.model import RecordedEvent
from app.ports import EventLog

PAGE = 5000


async def archived_context(store: EventLog, agent_id: str, up_to: int) -> ctx.AgentContext:
    """The agent's context as of global position ``up_to``: the fold of its context stream.
    Never hibernated: hibernation parks a context, it does not change it."""
    state = ctx.new_context(agent_id)
    after = 0
    while True:
        events = await store.read(after, PAGE, streams=[f"context-{agent_id}"], up_to=up_to)
        for event in events:
            state = ctx.apply(state, event.type, event.data)
        if len(events) < PAGE:
            return state
        after = events[-1].position


async def restore_if_parked(model, event: RecordedEvent, store: EventLog) -> bool:
    """Before ``model`` folds ``event``: if the event needs a context that hibernation
    parked, fold that context back from the log. True if it did."""
    agent_id = model.parked_context_needed_by(event)
    if agent_id is None:
        return False
    archived = await archived_context(store, agent_id, event.position - 1)
    model.restore_context(agent_id, archived)
    return True

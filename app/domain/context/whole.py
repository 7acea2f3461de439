"""The whole history, verbatim, when it fits the budget.

A view without a query spends its budget on tiers: key facts, warm summaries, recent hot
messages, then cold chunks. After a compaction that can show less than everything even
when every original message would fit: the summaries and the chunks' headers take room,
and chunks are taken by recency until one does not fit. When the agent's whole history
fits, nothing needs choosing, so the view is all of it: pinned messages first (oldest
first), then every other message of every tier in time order, each as it was appended.
"""
from __future__ import annotations

from collections.abc import Callable

from .limits import validate_budget
from .state import COLD, HOT, AgentContext, ContextStateError
from .view import REPLY_PRIMING_TOKENS, ContextView, ViewItem


def whole_history_view(state: AgentContext, budget_tokens: int,
                       count_message: Callable[[str, str], int]) -> ContextView | None:
    """Every message verbatim within ``budget_tokens`` (counted by ``count_message``, plus
    the reply-priming tokens), or None when they do not all fit."""
    validate_budget(budget_tokens)
    if state.hibernated:
        raise ContextStateError(f"agent {state.agent_id} is hibernated; wake it before reading its context")
    remaining = budget_tokens - REPLY_PRIMING_TOKENS
    items: list[ViewItem] = []
    hot_seqs = {m.seq for m in state.hot}
    pinned = [m for m in state.hot if m.pinned]
    rest = sorted((m for m in state.cold.messages + state.hot if not m.pinned), key=lambda m: m.seq)
    for m, kind in [(m, "pinned") for m in pinned] + [(m, "message") for m in rest]:
        cost = count_message(m.role, m.content)
        remaining -= cost
        if remaining < 0:
            return None
        items.append(ViewItem(HOT if m.seq in hot_seqs else COLD, kind, m.role, m.content, cost, str(m.seq)))
    total = REPLY_PRIMING_TOKENS + sum(i.tokens for i in items) if items else 0
    return ContextView(agent_id=state.agent_id, budget_tokens=budget_tokens, tokens=total, items=tuple(items))

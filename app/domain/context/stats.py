"""ContextStats of the public contract, read from the state."""
from __future__ import annotations

from typing import Any

from .state import AgentContext


def context_stats(state: AgentContext) -> dict[str, Any]:
    """ContextStats of the public contract. A hibernated agent reports 0 hot and warm
    tokens: nothing of its context is in memory; every message is counted under cold (its
    archive is the log)."""
    rp = state.resume_point if state.hibernated else None
    return {
        "agent_id": state.agent_id,
        "hot_tokens": state.hot_tokens,
        "warm_tokens": sum(s.summary_tokens for s in state.warm_segments)
        + sum(f.tokens for f in state.live_facts),
        "cold_tokens": rp.tokens if rp else sum(m.tokens for m in state.cold.messages),
        "messages": rp.messages if rp else len(state.hot) + len(state.cold.messages),
        "hibernated": state.hibernated,
    }

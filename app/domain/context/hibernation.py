"""When an idle agent's context is parked (hibernated): the policy, with ``now`` passed in."""
from __future__ import annotations

from .state import AgentContext

DEFAULT_IDLE_SECONDS = 30 * 60  # an agent quiet for half an hour is parked; waking is cheap


def should_hibernate(state: AgentContext, now: float, idle_seconds: float = DEFAULT_IDLE_SECONDS) -> bool:
    return (not state.hibernated and state.last_seq > 0
            and now - state.last_activity_at >= idle_seconds)

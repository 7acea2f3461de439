"""The agent-side client of AgentRM: `from agentrm_client import AgentRM, SyncAgentRM`.

One turn per LLM call (`rm.turn(...)`), heartbeats from the stream (`turn.chunk()`),
completion with real usage and outcome, and the agent's context (`append`, `view`).
`register_agent` is a convenience for scripts that hold the operator token."""
from __future__ import annotations

import httpx

from .client import AgentRM, QueueTimeout, RateLimited, Turn, TurnNotGranted
from .sync import SyncAgentRM, SyncTurn
from .transport import AgentRMError


def register_agent(url: str, operator_token: str, name: str, *, pool: str = "default",
                   priority_class: str = "INTERACTIVE") -> str:
    """Register an agent with the operator token; returns the agent's own token."""
    answer = httpx.post(f"{url.rstrip('/')}/graphql", headers={"authorization": f"Bearer {operator_token}"},
                        json={"query": "mutation($i: RegisterAgentInput!) { registerAgent(input: $i) { token } }",
                              "variables": {"i": {"name": name, "pool": pool, "priorityClass": priority_class}}},
                        timeout=30)
    body = answer.json()
    if body.get("errors"):
        first = body["errors"][0]
        raise AgentRMError(first.get("message", "error"), (first.get("extensions") or {}).get("code"))
    return str(body["data"]["registerAgent"]["token"])


__all__ = ["AgentRM", "AgentRMError", "QueueTimeout", "RateLimited", "SyncAgentRM", "SyncTurn", "Turn",
           "TurnNotGranted", "register_agent"]

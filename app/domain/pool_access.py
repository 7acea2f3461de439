"""The pool capability check of a turn request, decided by the pool's scheduler in log order.

The API checks it too, against its read model, before appending (a refused request then
appends nothing but its AccessRefused). That check can be a moment behind the log: a
revocation committed just before the request, and not yet folded by the worker that took
the request, would let one turn through. So the writer decides it again: the access
events and the turn requests are in one log, and the scheduler folds the grants and
revocations (of every agent: patterns are global) in the same order as the requests. A
request behind a revocation in the log is refused, whatever any worker had seen.

The policy is passed to decide beside the pool's state, not in it: the pool's state stays
the fold of its own stream (its hash and replay are unchanged), and the refusal, a
TurnCancelled with the rule that refused, is what the log records."""
from __future__ import annotations

from typing import Any

from . import resource_events as rev
from .access import AccessPolicy, Verdict

CHANGES = frozenset({rev.ACCESS_GRANTED, rev.ACCESS_REVOKED})
REFUSED = "access refused"


def fold(policy: AccessPolicy, type_: str, data: dict[str, Any]) -> None:
    if type_ == rev.ACCESS_GRANTED:
        policy.grant(data["grant_id"], data["agent_id"], data["pattern"], data["modes"], data["at"])
    elif type_ == rev.ACCESS_REVOKED:
        policy.revoke(data["grant_id"], data["at"])


def refusal(policy: AccessPolicy | None, agent_id: str, pool: str) -> Verdict | None:
    """The verdict that refuses the agent this pool, or None (allowed, or no policy given)."""
    if policy is None:
        return None
    verdict = policy.check_pool(agent_id, pool)
    return None if verdict.allowed else verdict


def reason(verdict: Verdict) -> str:
    return f"{REFUSED}: {verdict.reason}"


def is_refused_reason(text: str | None) -> bool:
    return isinstance(text, str) and text.startswith(REFUSED + ":")

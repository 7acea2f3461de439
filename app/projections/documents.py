"""The shapes of the core read model's documents: a pool's, an agent's and a turn's.

These are the documents that `CoreModel` folds from the log, persists in `read_models`
(as JSON, compared byte for byte by replayCheck) and serves to the API, the gateway and
the service. They are plain dicts at run time; these types only name their keys. A field
the service's commands always carry (an agent's pool, a request's sizes and times) is typed
as set, though the event's own type allows it to be absent: the fold converts at that edge.
The generic persistence path (`CoreModel.doc`, `all_docs`, `from_docs`) keeps them as
`dict[str, Any]`, like the other projections' documents.
"""
from __future__ import annotations

from typing import Literal, TypedDict


class PoolDoc(TypedDict):
    name: str
    created_at: float
    upstream_api_key_fingerprint: str | None


class AgentDoc(TypedDict):
    agent_id: str
    name: str
    pool: str
    priority_class: str
    token_hash: str | None          # None once revoked
    context_budget_tokens: int | None
    registered_at: float
    hibernated: bool
    last_active_at: float


class AgentView(AgentDoc):
    """An agent's document with its live scheduler state (CoreModel.agent_view)."""
    level: int
    state: str
    reaps: int
    completions: int


class _TurnDocWhenSet(TypedDict, total=False):
    # Kept only when set (TURN_DOC_WHEN_SET and the idempotent inputs' request ids), so the
    # documents of turns without them are what they always were.
    run_id: str
    holder: str                 # "gateway": only the gateway may heartbeat, complete or cancel it
    model: str
    completion_request_id: str
    cancel_request_id: str
    heartbeat_request_id: str


class TurnDoc(_TurnDocWhenSet):
    """A turn's document: the fields TURN_DOC names of its TurnHistory, in that order."""
    turn_id: str
    agent_id: str
    pool: str
    status: str
    level: int | None
    lane: int | None
    estimated_tokens: int
    max_output_tokens: int
    streams: bool
    requested_at: float
    queued_at: float | None
    granted_at: float | None
    lease_expires_at: float | None
    finished_at: float | None
    outcome: str | None
    reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    reserved_tokens: int | None
    version: int | None


# Where a turn's document keeps the request id of a retried input (core._IDEMPOTENT_INPUTS).
RequestIdKey = Literal["completion_request_id", "cancel_request_id", "heartbeat_request_id"]

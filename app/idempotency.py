"""Client request ids: a retried command with the same id gets the first answer and appends
nothing, across retries, workers and restarts.

A requestTurn's turn id is derived from the agent and its request id (a name-based UUID),
so the retry names the very turn stream the first attempt created: the read model finds
it, and two attempts racing on different workers cannot both append, because the turn's
stream must not exist yet (the second gets a ConcurrencyError and answers with the first's
turn). A completion or a cancel records its request id in the event; the turns read model
keeps the first one per turn, which is what a retry is answered from. Both live in the
log, so they outlast any process. Two attempts of one completion, cancel or heartbeat
racing on two workers append once: each appends only at the turn stream's version it read
before looking for the first answer (Service._once), so the later one fails its append,
looks again, finds the first and waits for its answer."""
from __future__ import annotations

import uuid

from app.errors import BadInput, Conflict
from app.projections.documents import TurnDoc

MAX_REQUEST_ID_CHARS = 128
_NAMESPACE = uuid.UUID("5b0c3f7e-6b1e-4a53-9d43-0f3e7f1c2a10")   # fixed: ids must not change


def checked(request_id) -> str | None:
    if request_id is None:
        return None
    if not isinstance(request_id, str) or not 1 <= len(request_id) <= MAX_REQUEST_ID_CHARS \
            or "\x00" in request_id:
        raise BadInput(f"requestId must be 1 to {MAX_REQUEST_ID_CHARS} characters, without NUL")
    return request_id


def turn_id_for(agent_id: str, request_id: str) -> str:
    """The turn a requestTurn with this id creates: the same for every retry of it."""
    return str(uuid.uuid5(_NAMESPACE, f"{agent_id}\n{request_id}"))


def same_turn_request(doc: TurnDoc, request_id: str, estimated: int, max_output: int, streams: bool) -> TurnDoc:
    """The first answer's turn, if the retry asks for what the first attempt asked for."""
    if (doc["estimated_tokens"], doc["max_output_tokens"], bool(doc["streams"])) != (estimated, max_output, streams):
        raise Conflict(f"requestId {request_id!r} was already used for a different turn request")
    return doc

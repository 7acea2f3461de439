"""Idempotency-Key at the gateway: a retried call gets the first call's answer, with no new
turn and no second provider call.

The key is the `Idempotency-Key` header (any case, as HTTP header names are), scoped per
agent: two agents may use the same key for different calls. The first call with a key
claims it in the GatewayReplies store (app/ports.py) and runs; what it answered is stored
when it is the request's own answer:

- a 2xx, or a 400, 404, 413 or 422 of the upstream (the request itself is wrong, and would
  be again): status, the headers that describe the answer (KEPT_HEADERS), and the body; for
  a stream, every SSE byte, stored once the stream has ended;
- never a 429, a 5xx, a timeout, a gateway error or a call the client left: the claim is
  dropped, and the retry really runs again. Nor a body over MAX_STORED_REPLY_BYTES.

A retry with the key and the same body (its canonical JSON, with the endpoint's format)
gets the stored answer with `x-agentrm-idempotent-replay: true`; one that arrives while
the first still runs waits for it (on any worker: app/adapters/pg_gateway_replies.py polls
the row) and gets the same. The key with another body is a 409 in the wire's error shape.
The first call renews its claim every CLAIM_REFRESH_S, so a claim whose worker died is
taken over by a retry after CLAIM_STALE_SECONDS instead of blocking the key for the window.

The OpenAI and Anthropic Python SDKs generate a key per call for their own retries but do
not send it on chat completions or messages: a client passes its own with
`extra_headers={"Idempotency-Key": ...}`.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable

from app.ports import (
    CLAIM_STALE_SECONDS,
    CLAIMED,
    MAX_STORED_REPLY_BYTES,
    RUNNING,
    STORED,
    GatewayReplies,
    StoredReply,
)

from .correlation import TURN_ID_HEADER, UPSTREAM_REQUEST_ID_HEADER
from .wire import BadRequest

log = logging.getLogger("agentrm.gateway")

IDEMPOTENCY_KEY_HEADER = "idempotency-key"
REPLAY_HEADER = "x-agentrm-idempotent-replay"
MAX_KEY_CHARS = 255
CLAIM_REFRESH_S = CLAIM_STALE_SECONDS / 6
STORED_ERRORS = frozenset({400, 404, 413, 422})
# What a replay carries besides status and body. Not the rate-limit headers (they told the
# provider's budget at the first call, not now) nor x-request-id (each retry has its own).
KEPT_HEADERS = ("content-type", "cache-control", TURN_ID_HEADER, UPSTREAM_REQUEST_ID_HEADER, "request-id",
                "openai-processing-ms")


class KeyReused(Exception):
    """The key is live for another body."""


def key_of(headers) -> str | None:
    """The request's idempotency key, None without one; BadRequest when it is not 1-255
    printable ASCII characters."""
    key = headers.get(IDEMPOTENCY_KEY_HEADER)
    if key is None:
        return None
    if not 1 <= len(key) <= MAX_KEY_CHARS or not all(" " <= c <= "~" for c in key):
        raise BadRequest(f"Idempotency-Key must be 1 to {MAX_KEY_CHARS} printable ASCII characters")
    return key


def body_hash(wire_name: str, body: dict) -> str:
    """What "the same body" means: the request's JSON with sorted keys, and its format (the
    same key on /v1/messages and /v1/chat/completions names two different calls)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{wire_name}\n{canonical}".encode()).hexdigest()


def storable(status: int) -> bool:
    return 200 <= status < 300 or status in STORED_ERRORS


class Capture:
    """What the exchange sent, up to the size cap (past it, nothing is kept)."""

    def __init__(self, cap: int = MAX_STORED_REPLY_BYTES):
        self.cap = cap
        self.status = 0
        self.headers: dict[str, str] = {}
        self._parts: list[bytes] = []
        self._size = 0
        self.over = False

    def started(self, status: int, headers: dict) -> None:
        self.status = status
        self.headers = {k.lower(): str(v) for k, v in headers.items() if k.lower() in KEPT_HEADERS}

    def sent(self, data: bytes) -> None:
        if self.over or not data:
            return
        self._size += len(data)
        if self._size > self.cap:
            self.over, self._parts = True, []
            return
        self._parts.append(data)

    def reply(self) -> StoredReply | None:
        if self.over or not self.status:
            return None
        return StoredReply(self.status, self.headers, b"".join(self._parts))


class Claim:
    """The first call's hold on its key, renewed while it runs, then settled once."""

    def __init__(self, store: GatewayReplies, agent_id: str, key: str, owner: str):
        self.store, self.agent_id, self.key, self.owner = store, agent_id, key, owner
        self._renew = asyncio.create_task(self._keep())

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(CLAIM_REFRESH_S)
            try:
                if not await self.store.touch(self.agent_id, self.key, self.owner, time.time()):
                    return   # taken over: this call's answer will not be stored
            except Exception as exc:  # noqa: BLE001 - a database blip: the next renewal may pass
                log.warning("idempotency claim not renewed", extra={"reason": str(exc)})

    async def settle(self, reply: StoredReply | None) -> None:
        """Store `reply` (None: the call is not to be replayed, drop the claim)."""
        self._renew.cancel()
        try:
            # A refused finish (the claim was taken over, or the body is over the store's
            # cap) stores nothing; the store drops an over-cap claim itself.
            if reply is not None and storable(reply.status):
                await self.store.finish(self.agent_id, self.key, self.owner, reply, time.time())
            else:
                await self.store.abandon(self.agent_id, self.key, self.owner)
        except Exception as exc:  # noqa: BLE001 - the answer is sent; a stuck claim goes stale
            log.warning("idempotency claim not settled", extra={"reason": str(exc)})


async def claim_or_replay(store: GatewayReplies, agent_id: str, key: str, digest: str,
                          wait: Callable[[Awaitable[None]], Awaitable[object]]) -> Claim | StoredReply:
    """Claim the key, or the stored answer to replay (waiting for a first call that still
    runs); KeyReused when the key is live for another body. `wait(awaitable)` runs the
    wait for the first call, so the caller can stop it when its client leaves."""
    while True:
        begun = await store.begin(agent_id, key, digest, time.time())
        if begun.state == CLAIMED:
            assert begun.owner is not None
            return Claim(store, agent_id, key, begun.owner)
        if begun.state == STORED:
            assert begun.reply is not None
            return begun.reply
        if begun.state != RUNNING:
            raise KeyReused(key)
        await wait(store.settled(agent_id, key, CLAIM_STALE_SECONDS))

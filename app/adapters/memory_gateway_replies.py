"""The in-memory adapter of the GatewayReplies port: one process's dict, for the
application's tests. The rules are the port's (app/ports.py); the PostgreSQL
adapter (app/adapters/pg_gateway_replies.py) is held to the same contract test."""
from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field

from app.ports import (
    CLAIM_STALE_SECONDS,
    CLAIMED,
    MAX_STORED_REPLY_BYTES,
    REUSED,
    RUNNING,
    STORED,
    Begun,
    StoredReply,
)


@dataclass
class _Entry:
    body_hash: str
    owner: str
    created_at: float
    touched_at: float
    reply: StoredReply | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)   # set when it stops running


class MemoryGatewayReplies:
    def __init__(self, window_s: float, *, stale_s: float = CLAIM_STALE_SECONDS,
                 max_body_bytes: int = MAX_STORED_REPLY_BYTES):
        self.window_s, self.stale_s, self.max_body_bytes = window_s, stale_s, max_body_bytes
        self._entries: dict[tuple[str, str], _Entry] = {}

    def _claimable(self, entry: _Entry, now: float) -> bool:
        if entry.reply is not None:
            return entry.created_at <= now - self.window_s
        return entry.touched_at <= now - self.stale_s

    def _drop(self, name: tuple[str, str]) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            entry.done.set()

    async def begin(self, agent_id: str, key: str, body_hash: str, now: float) -> Begun:
        name = (agent_id, key)
        entry = self._entries.get(name)
        if entry is None or self._claimable(entry, now):
            self._drop(name)   # a taken-over claim's waiters look again
            owner = uuid.uuid4().hex
            self._entries[name] = _Entry(body_hash, owner, now, now)
            return Begun(CLAIMED, owner=owner)
        if entry.body_hash != body_hash:
            return Begun(REUSED)
        if entry.reply is None:
            return Begun(RUNNING)
        return Begun(STORED, reply=entry.reply)

    def _held(self, agent_id: str, key: str, owner: str) -> _Entry | None:
        entry = self._entries.get((agent_id, key))
        return entry if entry is not None and entry.owner == owner and entry.reply is None else None

    async def touch(self, agent_id: str, key: str, owner: str, now: float) -> bool:
        entry = self._held(agent_id, key, owner)
        if entry is None:
            return False
        entry.touched_at = now
        return True

    async def finish(self, agent_id: str, key: str, owner: str, reply: StoredReply, now: float) -> bool:
        entry = self._held(agent_id, key, owner)
        if entry is None:
            return False
        if len(reply.body) > self.max_body_bytes:
            self._drop((agent_id, key))
            return False
        entry.reply = StoredReply(reply.status, dict(reply.headers), bytes(reply.body))
        entry.touched_at = now
        entry.done.set()
        return True

    async def abandon(self, agent_id: str, key: str, owner: str) -> None:
        if self._held(agent_id, key, owner) is not None:
            self._drop((agent_id, key))

    async def settled(self, agent_id: str, key: str, timeout: float) -> None:
        entry = self._entries.get((agent_id, key))
        if entry is None or entry.reply is not None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(entry.done.wait(), timeout)

    async def purge(self, now: float) -> int:
        gone = [name for name, entry in self._entries.items() if self._claimable(entry, now)]
        for name in gone:
            self._drop(name)
        return len(gone)

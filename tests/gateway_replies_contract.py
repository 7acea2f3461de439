"""The GatewayReplies contract: one abstract test class, run against every adapter (the
in-memory dict and the PostgreSQL table), as tests/eventlog_contract.py is for the log.

A subclass provides an async `replies` fixture: an empty adapter with a window of WINDOW
seconds, the default stale-claim age and a body cap of CAP bytes. Time is the `now` the
tests pass, so expiry and staleness are tested without waiting."""
from __future__ import annotations

import asyncio

from app.ports import CLAIM_STALE_SECONDS, CLAIMED, REUSED, RUNNING, STORED, GatewayReplies, StoredReply

WINDOW = 1000.0
CAP = 4096
T0 = 1_700_000_000.0
REPLY = StoredReply(200, {"content-type": "text/event-stream", "x-agentrm-turn-id": "t-1",
                          "x-upstream-request-id": "req_\u00e9"}, b"data: {\"a\": 1}\n\n\x00\xff")


class GatewayRepliesContract:
    async def test_is_the_port(self, replies):
        assert isinstance(replies, GatewayReplies)

    async def test_a_claim_runs_then_its_reply_is_stored_for_the_same_body(self, replies):
        first = await replies.begin("a1", "k", "h1", T0)
        assert first.state == CLAIMED and first.owner
        assert (await replies.begin("a1", "k", "h1", T0 + 1)).state == RUNNING
        assert (await replies.begin("a1", "k", "h2", T0 + 1)).state == REUSED
        assert await replies.finish("a1", "k", first.owner, REPLY, T0 + 2)
        again = await replies.begin("a1", "k", "h1", T0 + 3)
        assert again.state == STORED and again.reply == REPLY
        assert dict(again.reply.headers) == dict(REPLY.headers) and again.reply.body == REPLY.body
        assert (await replies.begin("a1", "k", "h2", T0 + 3)).state == REUSED
        # Finished: the owner can neither finish it again nor drop it.
        assert not await replies.finish("a1", "k", first.owner, StoredReply(500, {}, b""), T0 + 4)
        await replies.abandon("a1", "k", first.owner)
        assert (await replies.begin("a1", "k", "h1", T0 + 5)).reply == REPLY

    async def test_keys_are_scoped_per_agent(self, replies):
        mine = await replies.begin("a1", "k", "h1", T0)
        theirs = await replies.begin("a2", "k", "h2", T0)
        assert mine.state == theirs.state == CLAIMED and mine.owner != theirs.owner
        assert await replies.finish("a2", "k", theirs.owner, REPLY, T0)
        assert (await replies.begin("a1", "k", "h1", T0)).state == RUNNING

    async def test_an_abandoned_claim_lets_the_retry_run(self, replies):
        first = await replies.begin("a1", "k", "h1", T0)
        await replies.abandon("a1", "k", first.owner)
        retry = await replies.begin("a1", "k", "h1", T0 + 1)
        assert retry.state == CLAIMED and retry.owner != first.owner
        await replies.abandon("a1", "k", first.owner)      # a stale owner drops nothing
        assert (await replies.begin("a1", "k", "h1", T0 + 1)).state == RUNNING

    async def test_a_stored_reply_expires_after_the_window(self, replies):
        first = await replies.begin("a1", "k", "h1", T0)
        await replies.finish("a1", "k", first.owner, REPLY, T0 + 10)
        assert (await replies.begin("a1", "k", "h2", T0 + WINDOW - 1)).state == REUSED
        later = await replies.begin("a1", "k", "h2", T0 + WINDOW + 1)   # counted from the first call
        assert later.state == CLAIMED

    async def test_a_silent_claim_is_taken_over_and_its_owner_fenced_off(self, replies):
        first = await replies.begin("a1", "k", "h1", T0)
        assert await replies.touch("a1", "k", first.owner, T0 + CLAIM_STALE_SECONDS - 1)
        # Renewed: still running just past the first staleness bound.
        assert (await replies.begin("a1", "k", "h1", T0 + CLAIM_STALE_SECONDS + 1)).state == RUNNING
        taken = await replies.begin("a1", "k", "h1", T0 + 2 * CLAIM_STALE_SECONDS)
        assert taken.state == CLAIMED and taken.owner != first.owner
        assert not await replies.touch("a1", "k", first.owner, T0 + 2 * CLAIM_STALE_SECONDS)
        assert not await replies.finish("a1", "k", first.owner, REPLY, T0 + 2 * CLAIM_STALE_SECONDS)
        assert await replies.finish("a1", "k", taken.owner, StoredReply(200, {}, b"second"),
                                    T0 + 2 * CLAIM_STALE_SECONDS)
        assert (await replies.begin("a1", "k", "h1", T0 + 2 * CLAIM_STALE_SECONDS)).reply.body == b"second"

    async def test_a_reply_over_the_cap_is_not_stored(self, replies):
        first = await replies.begin("a1", "k", "h1", T0)
        assert not await replies.finish("a1", "k", first.owner, StoredReply(200, {}, b"x" * (CAP + 1)), T0)
        assert (await replies.begin("a1", "k", "h1", T0)).state == CLAIMED
        exact = await replies.begin("a1", "k2", "h1", T0)
        assert await replies.finish("a1", "k2", exact.owner, StoredReply(200, {}, b"x" * CAP), T0)

    async def test_one_of_many_concurrent_begins_claims(self, replies):
        found = await asyncio.gather(*(replies.begin("a1", "k", "h1", T0) for _ in range(8)))
        assert sorted(b.state for b in found) == [CLAIMED] + [RUNNING] * 7

    async def test_settled_returns_when_the_first_call_ends(self, replies):
        first = await replies.begin("a1", "k", "h1", T0)
        waiter = asyncio.create_task(replies.settled("a1", "k", 60))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await replies.finish("a1", "k", first.owner, REPLY, T0 + 1)
        await asyncio.wait_for(waiter, 30)
        assert (await replies.begin("a1", "k", "h1", T0 + 1)).state == STORED
        # Nothing running: at once; and an abandon ends a wait as a finish does.
        await asyncio.wait_for(replies.settled("a1", "k", 60), 30)
        await asyncio.wait_for(replies.settled("a1", "none", 60), 30)
        other = await replies.begin("a1", "k3", "h1", T0)
        waiter = asyncio.create_task(replies.settled("a1", "k3", 60))
        await replies.abandon("a1", "k3", other.owner)
        await asyncio.wait_for(waiter, 30)
        # A wait that nothing ends returns at its timeout.
        await replies.begin("a1", "k4", "h1", T0)
        await asyncio.wait_for(replies.settled("a1", "k4", 0.1), 30)

    async def test_purge_deletes_what_expired(self, replies):
        done = await replies.begin("a1", "old", "h1", T0)
        await replies.finish("a1", "old", done.owner, REPLY, T0)
        await replies.begin("a1", "silent", "h1", T0)
        fresh = await replies.begin("a1", "new", "h1", T0 + WINDOW)
        await replies.finish("a1", "new", fresh.owner, REPLY, T0 + WINDOW)
        assert await replies.purge(T0 + WINDOW + 1) == 2
        assert (await replies.begin("a1", "new", "h1", T0 + WINDOW + 1)).state == STORED
        assert await replies.purge(T0 + WINDOW + 1) == 0

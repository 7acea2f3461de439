"""The EventLog contract: one abstract test class, run against every adapter.

As pyeventsourcing reuses one recorder test case for every recorder: a subclass provides
the adapter through the `log` fixture and inherits every test, so the in-memory log and
the PostgreSQL store are held to the same behaviour."""
from __future__ import annotations

import asyncio

import pytest

from app.eventstore.model import NO_STREAM, ConcurrencyError, NewEvent
from app.ports import EventLog


def made(stream: str, n: int, type_: str = "Made", **data) -> NewEvent:
    return NewEvent(stream, type_, {"n": n, **data}, {"actor": "test"})


class EventLogContract:
    """Subclasses define an async `log` fixture yielding an empty EventLog."""

    async def test_is_an_event_log(self, log):
        assert isinstance(log, EventLog)

    async def test_append_then_read_in_position_order(self, log):
        first = await log.append([made("thing-1", 0), made("thing-2", 1)])
        second = await log.append([made("thing-1", 2)])
        events = await log.read(0)
        assert [(e.stream, e.version, e.type, e.data, e.metadata) for e in events] == [
            ("thing-1", 0, "Made", {"n": 0}, {"actor": "test"}),
            ("thing-2", 0, "Made", {"n": 1}, {"actor": "test"}),
            ("thing-1", 1, "Made", {"n": 2}, {"actor": "test"})]
        assert [e.position for e in events] == [e.position for e in first + second]
        assert [b.position - a.position for a, b in zip(events, events[1:])] == [1, 1]  # gapless
        assert await log.head() == events[-1].position
        assert [e.position for e in await log.read(events[0].position)] == [e.position for e in events[1:]]
        assert [e.position for e in await log.read(0, 2)] == [e.position for e in events[:2]]

    async def test_an_empty_log_and_an_empty_append(self, log):
        assert await log.head() == 0
        assert await log.read(0) == []
        assert await log.append([]) == []
        assert await log.stream_version("thing-1") == -1

    async def test_no_stream_creates_once(self, log):
        await log.append([made("thing-1", 0)], {"thing-1": NO_STREAM})
        with pytest.raises(ConcurrencyError) as err:
            await log.append([made("thing-1", 1)], {"thing-1": NO_STREAM})
        assert (err.value.stream, err.value.expected, err.value.actual) == ("thing-1", -1, 0)
        assert await log.stream_version("thing-1") == 0

    async def test_exact_expected_version(self, log):
        await log.append([made("thing-1", 0), made("thing-1", 1)])
        recorded = await log.append([made("thing-1", 2)], {"thing-1": 1})
        assert recorded[0].version == 2
        assert [e.version for e in await log.read_stream("thing-1")] == [0, 1, 2]

    async def test_a_conflict_appends_nothing(self, log):
        await log.append([made("thing-1", 0)])
        head = await log.head()
        for wrong in (NO_STREAM, 1, 5):
            with pytest.raises(ConcurrencyError) as err:
                await log.append([made("thing-1", 9), made("other-1", 9)], {"thing-1": wrong})
            assert err.value.actual == 0 and err.value.expected == wrong
        # A stream that is only checked, not written, is checked too.
        with pytest.raises(ConcurrencyError):
            await log.append([made("other-1", 9)], {"thing-1": NO_STREAM})
        assert await log.head() == head
        assert await log.stream_version("other-1") == -1

    async def test_a_batch_is_atomic(self, log):
        await log.append([made("a-1", 0)])
        with pytest.raises(ConcurrencyError):
            await log.append([made("b-1", 1), made("a-1", 2)], {"b-1": NO_STREAM, "a-1": NO_STREAM})
        assert [e.stream for e in await log.read(0)] == ["a-1"]
        # A batch whose data cannot be stored (jsonb has no NaN) writes none of its events;
        # the adapters' error types differ (ValueError, asyncpg's DataError).
        with pytest.raises(Exception, match="(?i)nan|json"):
            await log.append([made("b-1", 1), NewEvent("b-1", "Bad", {"x": float("nan")})])
        assert [e.stream for e in await log.read(0)] == ["a-1"]
        recorded = await log.append([made("b-1", 1), made("a-1", 2)], {"b-1": NO_STREAM, "a-1": 0})
        assert [(e.stream, e.version) for e in recorded] == [("b-1", 0), ("a-1", 1)]

    async def test_reads_by_type_stream_category_data_and_up_to(self, log):
        await log.append([made("pool-x", 0, "Created"), made("turn-1", 1, "Asked", pool="x"),
                          made("turn-2", 2, "Asked", pool="y"), made("agent-1", 3, "Joined", pool="x"),
                          made("turn-1", 4, "Done", pool="x")])
        def ns(events):
            return [e.data["n"] for e in events]
        assert ns(await log.read(0, types=["Asked"])) == [1, 2]
        assert ns(await log.read(0, types=["Asked", "Joined"])) == [1, 2, 3]
        assert ns(await log.read(0, streams=["turn-1"])) == [1, 4]
        assert ns(await log.read(0, categories=["turn"])) == [1, 2, 4]
        assert ns(await log.read(0, categories=["turn", "pool"])) == [0, 1, 2, 4]
        assert ns(await log.read(0, data={"pool": "x"})) == [1, 3, 4]
        assert ns(await log.read(0, types=["Asked", "Joined"], data={"pool": "x"})) == [1, 3]
        head = await log.head()
        assert ns(await log.read(0, up_to=head - 2)) == [0, 1, 2]
        assert ns(await log.read(head - 4, up_to=head - 2, categories=["turn"])) == [1, 2]
        assert ns(await log.read(0, 1, types=["Asked"])) == [1]
        assert [e.version for e in await log.read_stream("turn-1")] == [0, 1]

    async def test_read_to_head_gives_the_head_and_what_follows_up_to_it(self, log):
        assert await log.read_to_head(0, 10, types=["Asked"]) == (0, [])
        await log.append([made("turn-1", 0, "Asked"), made("turn-1", 1, "Done"),
                          made("turn-2", 2, "Asked"), made("turn-2", 3, "Done")])
        head = await log.head()
        found_head, events = await log.read_to_head(0, 10, types=["Asked"])
        assert found_head == head and [e.data["n"] for e in events] == [0, 2]
        assert [(e.stream, e.version, e.type, e.position) for e in events] == [
            (e.stream, e.version, e.type, e.position) for e in await log.read(0, types=["Asked"])]
        found_head, events = await log.read_to_head(0, 1, types=["Asked", "Done"])   # the limit
        assert found_head == head and [e.data["n"] for e in events] == [0]
        # Nothing of those types after the position: the head all the same, no events.
        assert await log.read_to_head(head - 1, 10, types=["Asked"]) == (head, [])
        assert await log.read_to_head(head, 10, types=["Done"]) == (head, [])

    async def test_read_your_writes(self, log):
        recorded = await log.append([made("thing-1", 0)])
        assert await log.head() >= recorded[-1].position
        [again] = await log.read(recorded[-1].position - 1, streams=["thing-1"])
        assert again == recorded[-1]

    async def test_stored_data_is_a_copy(self, log):
        data = {"nested": {"a": 1}}
        await log.append([NewEvent("thing-1", "Made", data)])
        data["nested"]["a"] = 2
        [event] = await log.read(0)
        assert event.data == {"nested": {"a": 1}}

    async def test_subscription_delivers_every_event_once_in_order(self, log):
        await log.append([made("turn-1", 0, pool="x"), made("turn-2", 1, pool="y")])
        before = await log.head()
        await log.append([made("turn-3", 2, pool="x")])
        total = 60
        seen: list[int] = []
        everything: list[int] = []
        done = asyncio.Event()

        async def follow_pool() -> None:
            async for event in log.subscribe(0, categories=["turn"], data={"pool": "x"}):
                seen.append(event.data["n"])
                if event.data["n"] == total - 1:
                    done.set()
                    return

        async def follow_all() -> None:
            async for event in log.subscribe(before):
                everything.append(event.position)
                if len(everything) == total - 2:
                    return

        tasks = [asyncio.create_task(follow_pool()), asyncio.create_task(follow_all())]
        # Appended while the subscriptions start and run: a mix of matches and others.
        for n in range(3, total):
            pool = "x" if n % 3 else "y"
            stream = "turn-9" if n % 2 else "agent-9"
            if n == total - 1:
                pool, stream = "x", "turn-9"
            await log.append([made(stream, n, pool=pool)])
            if n % 7 == 0:
                await asyncio.sleep(0)  # let the subscribers catch up now and then
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        expected = [e.data["n"] for e in await log.read(0, 1000, categories=["turn"], data={"pool": "x"})]
        assert seen == expected and len(set(seen)) == len(seen)
        assert everything == list(range(before + 1, before + total - 1))

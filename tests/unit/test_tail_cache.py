"""The tail cache answers a covered read exactly as the log would, whatever interleaving of
this process's commits, other writers' commits, rolled-back positions and shared reads
(one of them in flight while commits land) led to its state."""
from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.eventstore.model import RecordedEvent
from app.eventstore.tail_cache import AHEAD, TailCache

AT = datetime(2026, 1, 1, tzinfo=UTC)
TYPES = ("A", "B", "C")


def event(position: int, type_: str = "A", stream: str = "turn-1") -> RecordedEvent:
    return RecordedEvent(position=position, stream=stream, version=position, type=type_,
                         data={"p": position}, metadata={}, recorded_at=AT)


def log_answer(log, after, limit, up_to, types=None, streams=None, categories=None):
    """What the store's SQL returns: position > after AND position <= up_to, filtered."""
    out = [e for e in log if after < e.position <= up_to
           and (not types or e.type in types) and (not streams or e.stream in streams)
           and (not categories or e.stream.split("-", 1)[0] in categories)]
    return out[:limit]


# One step of the world: this process commits n events, another writer commits n, a
# transaction rolls back (its positions are gone), the oldest NOTIFY not delivered yet
# arrives (every commit's, ours too, in commit order; one with n == 0 names its position
# only, its events too large to carry), a shared read starts (reading at most
# `n` events), takes its snapshot (commits that landed since it started are in it, and
# ours were handed to the cache too) or returns, or a follower asks for a range.
step = st.one_of(
    st.tuples(st.just("ours"), st.integers(1, 4)),
    st.tuples(st.just("notified"), st.integers(0, 3)),
    st.tuples(st.just("theirs"), st.integers(1, 4)),
    st.tuples(st.just("rollback"), st.integers(1, 3)),
    st.tuples(st.just("read"), st.integers(1, 6)),
    st.tuples(st.just("snapshot"), st.just(0)),
    st.tuples(st.just("merge"), st.just(0)),
    st.tuples(st.just("ask"), st.integers(0, 10_000)),
)


@settings(max_examples=400, deadline=None)
@given(steps=st.lists(step, max_size=60), capacity=st.integers(2, 8), seed=st.integers(0, 2**16),
       byte_capacity=st.sampled_from([300, 1000, 3000, 10**9]))
# Our commit lands while a shared read is in flight, and the read's snapshot has it too.
@example(steps=[("theirs", 2), ("read", 6), ("merge", 0), ("read", 6), ("ours", 1), ("snapshot", 0),
                ("merge", 0), ("ask", 2)], capacity=8, seed=0, byte_capacity=10**9)
def test_a_covered_read_is_what_the_log_answers(steps, capacity, seed, byte_capacity):
    cache, log, drawn = TailCache(capacity=capacity, byte_capacity=byte_capacity), [], 0
    in_flight = None          # a shared read: (start, what it returned), not merged yet
    follower = 0              # a follower's position: it has seen everything up to it
    notifications = []        # commits whose NOTIFY has not arrived yet, in commit order
    asked = 0
    for kind, n in steps:
        if kind in ("ours", "theirs", "rollback"):
            commit = [event(drawn + i + 1, TYPES[(drawn + i + seed) % 3], f"{'turn' if i % 2 else 'pool'}-x")
                      for i in range(n)]
            drawn += n
            if kind != "rollback":
                log += commit
                notifications.append(commit)
            if kind == "ours":
                cache.commit(commit)
        elif kind == "notified" and notifications:
            carried = notifications.pop(0)
            if n:
                cache.commit(carried)
        elif kind == "read" and in_flight is None:
            start = cache.read_start(follower)
            if start is not None:
                in_flight = [start, n, None]
        elif kind in ("snapshot", "merge") and in_flight is not None:
            start, batch, seen = in_flight
            if seen is None:
                in_flight[2] = seen = [e for e in log if e.position > start][:batch]
            if kind == "merge":
                cache.read(start, seen)
                in_flight = None
        elif kind == "ask" and log and log[-1].position > follower:
            # A follower woken by a commit it has not seen asks up to that commit's position.
            newer = [e.position for e in log if e.position > follower]
            up_to = newer[n % len(newer)]
            after = follower
            if cache.covers(after, up_to):
                types = [TYPES[n % 3]] if n % 4 == 0 else None
                categories = ["pool"] if n % 5 == 0 else None
                limit = 1 + n % 7
                got = cache.serve(after, limit, up_to, types=types, categories=categories)
                assert got == log_answer(log, after, limit, up_to, types=types, categories=categories)
                asked += 1
                follower = up_to
    # The coverage never claims what the log does not hold.
    if cache.hi is not None:
        assert cache.hi <= (log[-1].position if log else 0)
        assert cache.serve(cache.lo, 10**6, cache.hi) == log_answer(log, cache.lo, 10**6, cache.hi)


def test_a_commit_after_a_gap_is_not_covered():
    cache = TailCache()
    cache.read(0, [event(1), event(2)])
    cache.commit([event(4)])          # position 3 is another writer's: not known here
    assert cache.hi == 2 and not cache.covers(2, 4)
    cache.read(2, [event(3), event(4)])  # the read that fetches them
    cache.commit([event(5)])
    assert cache.covers(0, 5)


def test_a_commit_that_arrives_before_the_one_below_it_joins_when_that_one_does():
    """Two workers: ours (5) is handed over at once, theirs (3-4) comes with its NOTIFY later."""
    cache = TailCache()
    cache.read(0, [event(1), event(2)])
    cache.commit([event(5)])
    assert cache.hi == 2
    cache.commit([event(3), event(4)])
    assert cache.covers(0, 5) and [e.position for e in cache.serve(0, 10, 5)] == [1, 2, 3, 4, 5]
    cache.commit([event(5)])          # our own commit's NOTIFY, later: covered already
    assert [e.position for e in cache.serve(0, 10, 5)] == [1, 2, 3, 4, 5]


def test_a_held_commit_past_rolled_back_positions_waits_for_a_read_and_is_then_dropped():
    cache = TailCache()
    cache.read(0, [event(1)])
    cache.commit([event(3)])          # position 2 was drawn and rolled back: no commit will fill it
    cache.commit([event(5), event(6)])
    assert cache.hi == 1
    cache.read(1, [event(3), event(4)])   # a read shows 2 is gone for good, and fetches 4
    assert cache.hi == 6 and [e.position for e in cache.serve(0, 10, 6)] == [1, 3, 4, 5, 6]
    assert not cache._ahead           # nothing held past the coverage: the bound is free again
    cache.read(1, [event(3)])         # a read that stopped short of a held commit (its limit)
    assert cache.hi == 6


def test_held_commits_are_bounded_in_number_and_in_size():
    cache = TailCache()
    cache.read(0, [event(1)])
    for p in range(3, 3 + 2 * AHEAD, 2):   # every other position, none adjacent to the coverage
        cache.commit([event(p)])
    assert len(cache._ahead) == AHEAD

    def long(position: int) -> RecordedEvent:   # about 1,256 bytes by the cache's estimate
        return RecordedEvent(position=position, stream="ctx-1", version=position, type="A",
                             data={"text": "x" * 1000}, metadata={}, recorded_at=AT)
    cache = TailCache(byte_capacity=3000)
    cache.read(0, [long(1)])
    for p in (3, 5, 7):
        cache.commit([long(p)])
    assert sorted(cache._ahead) == [3, 5] and cache._ahead_bytes == 2 * 1256
    cache.commit([long(2)])   # 3 joins; 5 waits for 4, and 7 was never held
    assert cache.hi == 3 and sorted(cache._ahead) == [5] and cache._ahead_bytes == 1256


def test_a_read_that_returns_nothing_covers_nothing():
    cache = TailCache()
    cache.read(5, [])
    assert cache.hi is None and not cache.covers(5, 5)
    assert cache.read_start(5) == 5


def test_a_follower_below_the_coverage_reads_the_log_itself():
    cache = TailCache(capacity=2)
    cache.read(0, [event(p) for p in range(1, 6)])    # 5 > 2 x 2: trimmed to the newest 2
    assert (cache.lo, cache.hi) == (3, 5)
    assert cache.read_start(1) is None
    assert cache.read_start(4) == 5
    assert cache.read_start(9) == 9                    # ahead of the coverage: a new start


def test_an_empty_filter_is_no_filter():
    cache = TailCache()
    cache.read(0, [event(1, "A"), event(2, "B")])
    assert [e.position for e in cache.serve(0, 10, 2, types=[])] == [1, 2]


def test_an_agents_events_are_those_whose_data_names_it_as_the_log_finds_them():
    # The log's filter is data->>'agent_id' = the id: a string field equal to it, nothing else.
    def named(p: int, data) -> RecordedEvent:
        return RecordedEvent(position=p, stream="turn-1", version=p, type="A", data=data, metadata={}, recorded_at=AT)
    cache = TailCache()
    cache.read(0, [named(1, {"agent_id": "a"}), named(2, {"agent_id": "b"}), named(3, {"other": "a"}),
                   named(4, {"agent_id": "a", "x": 1}), named(5, {"agent_id": None}), named(6, ["a"])])
    assert [e.position for e in cache.serve(0, 10, 6, agent_id="a")] == [1, 4]
    assert [e.position for e in cache.serve(1, 1, 6, agent_id="a")] == [4]
    assert [e.position for e in cache.serve(0, 10, 6, types=["B"], agent_id="a")] == []


def test_long_events_are_bounded_by_their_size_too():
    cache = TailCache(capacity=10_000, byte_capacity=10_000)
    for p in range(1, 101):   # a hundred messages of 1,000 characters
        text = RecordedEvent(position=p, stream="context-a", version=p, type="ContextAppended",
                             data={"content": "x" * 1000}, metadata={}, recorded_at=AT)
        if p == 1:
            cache.read(0, [text])
        else:
            cache.commit([text])
        assert cache.bytes <= 2 * 10_000 + 1256
    assert cache.serve(cache.lo, 10**6, cache.hi) == [e for e in cache._events]
    assert cache.hi == 100 and cache.lo >= 80 and len(cache._events) == cache.hi - cache.lo

"""The log's newest events, held once per process, so that its followers share one read.

Each follower of a worker reads the log on its own when a NOTIFY names new positions: the
projector, the leading scheduler's inbox, the supervisor's watch for new pools, the
resource manager's inbox, every live subscription. Left to themselves, on a pool's leader
they read the same few positions once each per wake-up, each read a round trip, a statement
for PostgreSQL and a decode of the same rows.

So the store keeps the tail it has seen, with its coverage: a range of positions (lo, hi]
of which it holds every event that is or ever will be visible. Coverage grows two ways:
- a whole commit whose first position is hi + 1: appends draw their positions under one
  lock held to commit (see the store), so nothing can appear between hi and it. This
  process's commits come from the store itself; another process's from its NOTIFY, which
  carries the events when they fit (migration 0006);
- a read of every event after hi: once position N is visible, every lower position is
  visible or rolled back for good, so a read that returns e1..ek covers (hi, ek].
A whole commit that arrives ahead of the commit below it is held aside (at most AHEAD
commits, within the byte bound) and joins the coverage as soon as hi reaches the position
before it. With two workers this happens: a worker is handed its own commit as soon as it
returns, while the NOTIFY of another worker's earlier commit may still be on its way, and
without the hold each such crossing would leave a gap that only a read of the log closes.
(The reads that remain under load mostly follow commits too large for a NOTIFY to carry:
docs/architecture/decisions/notify-carries-events.md.)
A read whose whole range (after, up_to] is covered is answered from here, and only a read
that names its `up_to` can be: without one, the caller asks for whatever is visible now,
which only the log knows. Followers name it from their wake-ups (app/eventstore/wakeups.py).

Pure: the store does the reading and tells this what it read."""
from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import cast

from .model import RecordedEvent

CAPACITY = 4096   # events kept; a follower further behind than this reads the log itself
# And their size: context messages can be long, and 8,192 of the longest would be hundreds
# of MB per worker. About 16 MB (between one and two times this, as with the count).
BYTE_CAPACITY = 16 * 1024 * 1024
AHEAD = 64        # whole commits held that arrived before the commits below them (and at
                  # most byte_capacity of them)


def _position(event: RecordedEvent) -> int:
    return event.position


def _size(event: RecordedEvent) -> int:
    """A cheap estimate of an event's memory: its strings' lengths at the top level of its
    data (a context message's text is one), plus a fixed share for the rest."""
    data = event.data
    if type(data) is not dict:
        return 256
    return 256 + sum(len(v) for v in data.values() if type(v) is str)


def _names(event: RecordedEvent, agent_id: str) -> bool:
    data = event.data
    return type(data) is dict and data.get("agent_id") == agent_id


class TailCache:
    def __init__(self, capacity: int = CAPACITY, byte_capacity: int = BYTE_CAPACITY):
        self.capacity, self.byte_capacity = capacity, byte_capacity
        self.lo: int | None = None   # coverage (lo, hi]; None: nothing covered yet
        self.hi: int | None = None
        self._events: list[RecordedEvent] = []
        self._sizes: list[int] = []
        self.bytes = 0
        self._ahead: dict[int, Sequence[RecordedEvent]] = {}   # first position -> a whole commit
        self._ahead_bytes = 0   # their size, bounded by byte_capacity as the tail is

    def covers(self, after: int, up_to: int) -> bool:
        # lo and hi are None together, or both set
        return self.hi is not None and cast(int, self.lo) <= after and up_to <= self.hi

    def read_start(self, after: int) -> int | None:
        """Where a read of the log should start to bring (after, ...] into coverage: hi, or
        `after` itself when nothing is covered or the follower is already past hi (the
        events in between are nobody's business). None: `after` is below the coverage,
        which a read from hi cannot mend; that follower reads the log itself."""
        if self.hi is None or after > self.hi:
            return after
        if after < cast(int, self.lo):   # set with hi
            return None
        return self.hi

    def commit(self, recorded: Sequence[RecordedEvent]) -> None:
        """A whole commit, its events in position order: this process's own, or another's
        as its NOTIFY carried it (notifications arrive in commit order)."""
        if self.hi is None or not recorded:
            return
        first = recorded[0].position
        if recorded[-1].position - first != len(recorded) - 1 or first <= self.hi:
            return   # not one commit's positions, or covered already
        if first != self.hi + 1:
            # Another writer's positions lie between: their commit (or a read) may still
            # come, and then this one follows it. Should they have been rolled back, a
            # read moves hi past this one, which is then dropped.
            size = sum(map(_size, recorded))
            if len(self._ahead) < AHEAD and self._ahead_bytes + size <= self.byte_capacity \
                    and first not in self._ahead:
                self._ahead[first] = tuple(recorded)   # its own: the caller keeps its list
                self._ahead_bytes += size
            return
        self._add(recorded)
        self.hi = recorded[-1].position
        self._join_ahead()
        self._trim()

    def _join_ahead(self) -> None:
        """The held commits that now follow hi, in turn; drop the ones coverage passed."""
        # (commit() holds commits only once there is coverage: hi is set)
        while self._ahead:
            held = self._ahead.pop(cast(int, self.hi) + 1, None)
            if held is None:
                break
            self._add(held)
            self.hi = held[-1].position
        if self._ahead:
            hi = cast(int, self.hi)
            self._ahead = {first: held for first, held in self._ahead.items() if first > hi}
        self._ahead_bytes = sum(_size(e) for held in self._ahead.values() for e in held) if self._ahead else 0

    def read(self, start: int, events: Sequence[RecordedEvent]) -> None:
        """What a read of every event with position > `start` returned (in position order)."""
        if not events:
            return   # nothing visible after start: no position is final beyond it yet
        last = events[-1].position
        if self.hi is None or start > self.hi:
            # A new coverage: (start, last]. (The old one, below, is not contiguous with it.)
            self._events, self._sizes, self.bytes = [], [], 0
            self._add(events)
            self.lo, self.hi = start, last
        elif start < cast(int, self.lo):   # set with hi
            return   # cannot happen with read_start's answers; refuse rather than guess
        else:
            # Our commits may have extended hi while the read was in flight: take only
            # what lies beyond it. Everything up to `last` is final.
            self._add([e for e in events if e.position > self.hi])
            self.hi = max(self.hi, last)
        self._join_ahead()
        self._trim()

    def serve(self, after: int, limit: int, up_to: int, *, types: Iterable[str] | None = None,
              streams: Iterable[str] | None = None, categories: Iterable[str] | None = None,
              agent_id: str | None = None) -> list[RecordedEvent]:
        """What the log would answer to read(after, limit, up_to=up_to, ...), for a covered
        range (covers(after, up_to) must hold). `agent_id`: the events whose data names the
        agent, as the log's `data->>'agent_id'` does (the service writes it as a string)."""
        # An empty filter is no filter, as in the store's SQL.
        types, streams, categories = (frozenset(x) if x else None for x in (types, streams, categories))
        out: list[RecordedEvent] = []
        start = bisect.bisect_right(self._events, after, key=_position)
        for event in self._events[start:]:
            if event.position > up_to or len(out) >= limit:
                break
            if types is not None and event.type not in types:
                continue
            if streams is not None and event.stream not in streams:
                continue
            if categories is not None and event.stream.split("-", 1)[0] not in categories:
                continue
            if agent_id is not None and not _names(event, agent_id):
                continue
            out.append(event)
        return out

    def _add(self, events: Sequence[RecordedEvent]) -> None:
        sizes = [_size(e) for e in events]
        self._events.extend(events)
        self._sizes.extend(sizes)
        self.bytes += sum(sizes)

    def _trim(self) -> None:
        # Amortised: cut back to capacity once twice as much is held, in events or in bytes.
        if len(self._events) <= 2 * self.capacity and self.bytes <= 2 * self.byte_capacity:
            return
        cut, kept = max(0, len(self._events) - self.capacity), self.bytes
        kept -= sum(self._sizes[:cut])
        while cut < len(self._events) - 1 and kept > self.byte_capacity:
            kept -= self._sizes[cut]
            cut += 1
        if cut:
            self.lo = self._events[cut - 1].position
            del self._events[:cut]
            del self._sizes[:cut]
            self.bytes = kept

"""A history checker in the style of Jepsen's: what clients were told, against the log.

A fault test records every response its clients received (`Op`) and every event each
subscription delivered (`Delivery`), then reads the whole log back. `check_history` is
pure over those three and reports every violation of:

- acknowledged: every command a client saw succeed is in the log (a requested turn has
  its TurnRequested, a completed one its CompletionReported, a cancelled one its
  CancelRequested);
- single grant: no turn is granted twice;
- capacity: at no position does a pool hold more granted turns than it has lanes, and no
  lane is held by two turns at once (counted here from grants and ends, independently of
  the scheduler's state and of `verify`);
- log order: every state a client observed is one the log gave that turn (the status and
  the lane), and observations of one turn that did not overlap in real time appear in
  log order: no client is shown a state older than one already shown to someone;
- exactly once, in order: each subscription delivered strictly increasing positions, and
  every matching event between its start and its last delivery, none skipped.

Operations whose outcome the client could not know (a timeout, a cut connection, an
UNAVAILABLE answer) are "info" in Jepsen's terms: they may or may not have happened, and
are checked for nothing. Definite failures claim nothing happened; the service's
validation tests cover those.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from app.domain import events as ev

from . import Record

OK, FAIL, INFO = "ok", "fail", "info"

# The event whose position a client-observed status corresponds to. A turn reads QUEUED
# from its request on, before the scheduler's TurnQueued answer.
_STATUS_EVENT = {"QUEUED": ev.TURN_REQUESTED, "GRANTED": ev.TURN_GRANTED, "COMPLETED": ev.TURN_COMPLETED,
                 "CANCELLED": ev.TURN_CANCELLED, "REAPED": ev.TURN_REAPED}
_ENDS = (ev.TURN_COMPLETED, ev.TURN_CANCELLED, ev.TURN_REAPED)


@dataclass(frozen=True)
class Op:
    """One command as a client saw it: when it was sent and answered (one monotonic clock
    for all clients of the test), what came back."""
    client: str
    kind: str                  # "request" | "complete" | "cancel"
    invoked: float
    completed: float
    outcome: str               # OK | FAIL | INFO
    turn_id: str | None = None
    status: str | None = None  # the turn's status in the answer
    lane: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Delivery:
    """What one subscription (across its reconnections, each resuming after the last
    position it had) delivered: positions in arrival order, of events matching `accepts`,
    subscribed after position `after`."""
    name: str
    after: int
    positions: Sequence[int]
    accepts: Callable[[Record], bool]


@dataclass
class HistoryReport:
    ops: int = 0
    acknowledged: int = 0
    deliveries: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def check_history(ops: Iterable[Op], records: Sequence[Record],
                  deliveries: Iterable[Delivery] = ()) -> HistoryReport:
    records = sorted(records, key=lambda r: r.position)
    ops = list(ops)
    report = HistoryReport(ops=len(ops))
    by_turn: dict[str, dict[str, list[Record]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        turn_id = r.data.get("turn_id") if isinstance(r.data, dict) else None
        if isinstance(turn_id, str):
            by_turn[turn_id][r.type].append(r)
    _check_acknowledged(ops, by_turn, report)
    _check_single_grant(by_turn, report)
    _check_capacity(records, report)
    _check_log_order(ops, by_turn, report)
    for delivery in deliveries:
        report.deliveries += len(delivery.positions)
        _check_delivery(delivery, records, report)
    return report


def _check_acknowledged(ops, by_turn, report) -> None:
    for op in ops:
        if op.outcome != OK:
            continue
        report.acknowledged += 1
        turn = by_turn.get(op.turn_id, {})
        # The input is what an answer acknowledges; the outcome it reports (COMPLETED, or
        # REAPED when the lease ran out first) is checked against the log as an observation.
        needed = {"request": [ev.TURN_REQUESTED], "complete": [ev.COMPLETION_REPORTED],
                  "cancel": [ev.CANCEL_REQUESTED]}[op.kind]
        for type_ in needed:
            if not turn.get(type_):
                report.violations.append(f"{op.client}: acknowledged {op.kind} of turn {op.turn_id} "
                                         f"has no {type_} in the log")


def _check_single_grant(by_turn, report) -> None:
    for turn_id, events in by_turn.items():
        grants = events.get(ev.TURN_GRANTED, [])
        if len(grants) > 1:
            report.violations.append(f"turn {turn_id} granted {len(grants)} times, at positions "
                                     f"{[g.position for g in grants]}")


def _check_capacity(records, report) -> None:
    lanes: dict[str, int] = {}
    held: dict[str, dict[int, str]] = defaultdict(dict)     # pool -> lane -> turn
    lane_of: dict[str, tuple[str, int]] = {}                 # turn -> (pool, lane)
    for r in records:
        if not r.stream.startswith("pool-"):
            continue
        pool = r.stream[len("pool-"):]
        if r.type == ev.POOL_CREATED:
            lanes[pool] = int(r.data["settings"]["lanes"])
        elif r.type == ev.TURN_GRANTED:
            lane, turn_id = r.data.get("lane"), r.data.get("turn_id")
            if lane in held[pool]:
                report.violations.append(f"position {r.position}: lane {lane} of pool {pool} granted to "
                                         f"{turn_id} while {held[pool][lane]} holds it")
            held[pool][lane] = turn_id
            lane_of[turn_id] = (pool, lane)
            if len(held[pool]) > lanes.get(pool, 0):
                report.violations.append(f"position {r.position}: pool {pool} holds {len(held[pool])} "
                                         f"turns on {lanes.get(pool, 0)} lanes")
        elif r.type in _ENDS and r.data.get("turn_id") in lane_of:
            pool_, lane = lane_of.pop(r.data["turn_id"])
            if held[pool_].get(lane) == r.data["turn_id"]:
                del held[pool_][lane]


def _check_log_order(ops, by_turn, report) -> None:
    observed: dict[str, list[tuple[Op, int]]] = defaultdict(list)
    for op in ops:
        if op.outcome != OK or op.status is None:
            continue
        events = by_turn.get(op.turn_id, {}).get(_STATUS_EVENT.get(op.status, ""), [])
        if not events:
            report.violations.append(f"{op.client}: saw turn {op.turn_id} {op.status}, "
                                     "a state the log never gave it")
            continue
        if op.status == "GRANTED" and op.lane is not None and events[0].data.get("lane") != op.lane:
            report.violations.append(f"{op.client}: saw turn {op.turn_id} on lane {op.lane}, "
                                     f"the log granted lane {events[0].data.get('lane')}")
        observed[op.turn_id].append((op, events[0].position))
    for turn_id, seen in observed.items():
        seen.sort(key=lambda s: s[0].invoked)
        for i, (earlier, pos_earlier) in enumerate(seen):
            for later, pos_later in seen[i + 1:]:
                if earlier.completed < later.invoked and pos_later < pos_earlier:
                    report.violations.append(
                        f"turn {turn_id}: {later.client} was shown {later.status} (position {pos_later}) "
                        f"after {earlier.client} had been shown {earlier.status} (position {pos_earlier})")


def _check_delivery(delivery: Delivery, records, report) -> None:
    positions = list(delivery.positions)
    for a, b in zip(positions, positions[1:]):
        if b <= a:
            report.violations.append(f"subscription {delivery.name}: position {b} delivered after {a} "
                                     "(a repeat or out of order)")
            return
    if not positions:
        return
    expected = [r.position for r in records
                if delivery.after < r.position <= positions[-1] and delivery.accepts(r)]
    missing = sorted(set(expected) - set(positions))
    extra = sorted(set(positions) - set(expected))
    if missing:
        report.violations.append(f"subscription {delivery.name}: skipped {len(missing)} events, "
                                 f"first at position {missing[0]}")
    if extra:
        report.violations.append(f"subscription {delivery.name}: delivered {len(extra)} events that do not "
                                 f"match it or are not in the log, first at position {extra[0]}")

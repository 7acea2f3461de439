"""Invariant checker: replays every pool stream through apply() and checks, before each
decision, that the decision was legal in the state the scheduler had then.

Pure: `verify(records)` takes records in position order and returns a report; the first
violation is the one that matters (after it the folded state is no longer trustworthy,
so checking stops there). The checks restate the core's rules independently of decide():
- a grant takes a lane that exists and is free, for a turn that is queued (so lanes held
  never exceed capacity and no turn is granted twice);
- a grant fits the rate budget: available(state, at) covers 1 request and the turn's
  reserved tokens (the same bucket math the scheduler used), and the pool is not paused;
- a turn completes at most once, and only while granted;
- a reap happens at or after the turn's lease expiry, after every LeaseExtended;
- a demotion follows an exhausted allotment at the agent's level.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from app.domain import events as ev
from app.domain.apply import apply, new_pool
from app.domain.decide import available
from app.domain.state import PoolState

from . import Record

# Bucket levels are floats folded step by step; a grant the live scheduler judged to fit
# may sit a rounding error below the reservation when recomputed.
EPSILON = 1e-6


@dataclass(frozen=True)
class Violation:
    position: int
    stream: str
    type: str
    message: str

    def __str__(self) -> str:
        return f"position {self.position} ({self.type} in {self.stream}): {self.message}"


@dataclass
class VerifyReport:
    events_checked: int = 0
    decisions_checked: int = 0
    pools: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def first(self) -> Violation | None:
        return self.violations[0] if self.violations else None


class _PoolCheck:
    def __init__(self, state: PoolState):
        self.state = state
        self.granted: set[str] = set()
        self.completed: set[str] = set()

    def check(self, r: Record) -> str | None:
        """The broken rule, as a sentence, or None when `r` was legal before it applied."""
        state, d = self.state, r.data
        turn_id = d.get("turn_id")
        turn = state.turns.get(turn_id) if turn_id else None
        if r.type == ev.TURN_GRANTED:
            return self._grant(turn_id, turn, d)
        if r.type == ev.TURN_COMPLETED:
            if turn_id in self.completed:
                return f"turn {turn_id} completed twice"
            if turn is None or turn.status != ev.GRANTED:
                return f"turn {turn_id} completed but it was not granted"
        if r.type == ev.TURN_REAPED:
            if turn is None or turn.status != ev.GRANTED:
                return f"turn {turn_id} reaped but it was not granted"
            if d["at"] < turn.lease_expires_at:
                return (f"turn {turn_id} reaped at {d['at']:.3f} before its lease expired at "
                        f"{turn.lease_expires_at:.3f}")
        if r.type == ev.AGENT_DEMOTED:
            agent = state.agents.get(d["agent_id"])
            if agent is None:
                return f"unknown agent {d['agent_id']} demoted"
            seconds, tokens = state.settings.allotment(agent.level)
            if agent.used_seconds < seconds and agent.used_tokens < tokens:
                return (f"agent {agent.agent_id} demoted from level {agent.level} with its allotment "
                        f"not used up ({agent.used_seconds:.3f}/{seconds} lane-seconds, "
                        f"{agent.used_tokens:.0f}/{tokens} tokens)")
        return None

    def _grant(self, turn_id: str, turn, d: dict) -> str | None:
        state, lane = self.state, d.get("lane")
        if turn_id in self.granted:
            return f"turn {turn_id} granted twice"
        if turn is None or turn.status != ev.QUEUED:
            return f"turn {turn_id} granted but it was not queued"
        if not isinstance(lane, int) or not 0 <= lane < state.settings.lanes:
            return f"turn {turn_id} granted lane {lane}, but the pool has {state.settings.lanes} lanes"
        if state.lanes[lane] is not None:
            busy = len([t for t in state.lanes if t is not None])
            return (f"turn {turn_id} granted lane {lane}, which turn {state.lanes[lane]} still holds "
                    f"({busy + 1} grants for {state.settings.lanes} lanes)")
        at = d["at"]
        if state.paused_until is not None and at < state.paused_until:
            return f"turn {turn_id} granted at {at:.3f} while the pool was paused until {state.paused_until:.3f}"
        requests, tokens = available(state, at)
        reserved = d.get("reserved_tokens", 0)
        if requests + EPSILON < 1 or tokens + EPSILON < reserved:
            return (f"turn {turn_id} granted beyond the rate budget: {requests:.3f} requests and "
                    f"{tokens:.1f} tokens available, needed 1 and {reserved}")
        return None

    def after(self, r: Record) -> None:
        if r.type == ev.TURN_GRANTED:
            self.granted.add(r.data["turn_id"])
        elif r.type == ev.TURN_COMPLETED:
            self.completed.add(r.data["turn_id"])


def verify(records: Iterable[Record], pool: str | None = None) -> VerifyReport:
    """Check every pool stream (or only `pool-<pool>`) in `records`, in position order."""
    report = VerifyReport()
    checks: dict[str, _PoolCheck] = {}
    for r in sorted(records, key=lambda r: r.position):
        report.events_checked += 1
        if not r.stream.startswith("pool-"):
            continue
        name = r.stream[len("pool-"):]
        if pool is not None and name != pool:
            continue
        if r.type == ev.POOL_CREATED:
            checks[name] = _PoolCheck(new_pool(r.data))
            report.pools.append(name)
            continue
        check = checks.get(name)
        if check is None:
            report.violations.append(Violation(r.position, r.stream, r.type, "decision before PoolCreated"))
            return report
        report.decisions_checked += 1
        problem = check.check(r)
        if problem is None:
            try:
                apply(check.state, r.type, r.data)
            except (KeyError, IndexError, TypeError) as exc:
                # A decision the fold cannot even apply (unknown turn or agent) is illegal too.
                problem = f"cannot be applied to the pool state: {type(exc).__name__} {exc}"
        if problem is not None:
            report.violations.append(Violation(r.position, r.stream, r.type, problem))
            return report
        check.after(r)
    return report

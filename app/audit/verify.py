"""Invariant checker: replays every pool stream through apply() and checks, before each
decision, that the decision was legal in the state the scheduler had then.

Pure: `verify(records)` takes records in position order and returns a report; the first
violation is the one that matters (after it the folded state is no longer trustworthy,
so checking stops there). The checks restate the core's rules independently of decide():
- a grant takes a lane that exists and is free, for a turn that is queued (so lanes held
  never exceed capacity and no turn is granted twice);
- the grants fit the rate budget in every window, refunds and the AIMD factor applied, and
  none is made while the pool is paused: rate_oracle's check, which rebuilds the budget
  from the decisions alone instead of reusing the scheduler's bucket math;
- a turn completes at most once, and only while granted;
- a reap happens at or after the turn's lease expiry, after every LeaseExtended;
- a demotion follows an exhausted allotment at the agent's level.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from app.domain import events as ev
from app.domain.apply import apply, new_pool
from app.domain.state import PoolState

from . import Record
from .rate_oracle import RateOracle


@dataclass(frozen=True)
class Violation:
    position: int
    stream: str
    type: str
    message: str

    def __str__(self) -> str:
        return f"position {self.position} ({self.type} in {self.stream}): {self.message}"


class ViolationsReport:
    """What every checker's report answers the same way: each checker stops at its first
    violation, so a report is ok when it has none, and `first` is the one that matters.
    A plain mixin, not a dataclass, so that each report keeps its own field order."""

    violations: list[Violation]

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def first(self) -> Violation | None:
        return self.violations[0] if self.violations else None


@dataclass
class VerifyReport(ViolationsReport):
    events_checked: int = 0
    decisions_checked: int = 0
    pools: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)


class _PoolCheck:
    def __init__(self, state: PoolState, rates: RateOracle):
        self.state, self.rates = state, rates
        self.granted: set[str] = set()
        self.completed: set[str] = set()

    def check(self, r: Record, d: ev.Event | None) -> str | None:
        """The broken rule, as a sentence, or None when `r` (read as `d`, a partial event:
        a forged decision may lack fields) was legal before it applied."""
        state = self.state
        turn_id = getattr(d, "turn_id", None)
        turn = state.turns.get(turn_id) if turn_id else None
        if isinstance(d, ev.TurnGranted):
            problem = self._grant(d.turn_id, turn, d)
            if problem:
                return problem
        return self.rates.check(r.type, r.data) or self._rule(d, turn_id, turn)

    def _rule(self, d: ev.Event | None, turn_id: str | None, turn) -> str | None:
        state = self.state
        if isinstance(d, ev.TurnCompleted):
            if turn_id in self.completed:
                return f"turn {turn_id} completed twice"
            if turn is None or turn.status != ev.GRANTED:
                return f"turn {turn_id} completed but it was not granted"
        if isinstance(d, ev.TurnReaped):
            if turn is None or turn.status != ev.GRANTED:
                return f"turn {turn_id} reaped but it was not granted"
            if d.at < turn.lease_expires_at:
                return (f"turn {turn_id} reaped at {d.at:.3f} before its lease expired at "
                        f"{turn.lease_expires_at:.3f}")
        if isinstance(d, ev.AgentDemoted):
            agent = state.agents.get(d.agent_id)
            if agent is None:
                return f"unknown agent {d.agent_id} demoted"
            seconds, tokens = state.settings.allotment(agent.level)
            if agent.used_seconds < seconds and agent.used_tokens < tokens:
                return (f"agent {agent.agent_id} demoted from level {agent.level} with its allotment "
                        f"not used up ({agent.used_seconds:.3f}/{seconds} lane-seconds, "
                        f"{agent.used_tokens:.0f}/{tokens} tokens)")
        return None

    def _grant(self, turn_id: str, turn, d: ev.TurnGranted) -> str | None:
        state, lane = self.state, d.lane
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
        return None

    def after(self, d: ev.Event | None) -> None:
        if isinstance(d, ev.TurnGranted):
            self.granted.add(d.turn_id)
        elif isinstance(d, ev.TurnCompleted):
            self.completed.add(d.turn_id)


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
            checks[name] = _PoolCheck(new_pool(ev.PoolCreated.from_dict(r.data)), RateOracle.for_pool(r.data))
            report.pools.append(name)
            continue
        check = checks.get(name)
        if check is None:
            report.violations.append(Violation(r.position, r.stream, r.type, "decision before PoolCreated"))
            return report
        report.decisions_checked += 1
        try:
            # A type the core does not know changes no pool state (as apply() has it).
            d = ev.parse(r.type, r.data, partial=True) if ev.is_event_type(r.type) else None
            problem = check.check(r, d)
            if problem is None:
                apply(check.state, r.type, r.data)       # the strict read: a missing field refuses
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            # A decision the fold cannot even apply (unknown turn or agent, a missing
            # field) is illegal too.
            problem = f"cannot be applied to the pool state: {type(exc).__name__} {exc}"
        if problem is not None:
            report.violations.append(Violation(r.position, r.stream, r.type, problem))
            return report
        check.after(d)
    return report

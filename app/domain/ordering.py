"""The order in which a pool's queued turns are granted.

Policies "mlfq" and "fifo" grant the head of the lowest non-empty level (levels first, then
arrival order), as they always have. Policy "deadline" gives every queued turn a virtual
deadline and grants the earliest (ties in arrival order):

    deadline = queued_at + class slack + run slack + size slack + backlog slack

- class slack (class isolation): a fixed slack per priority class, `class_slack_seconds`
  (interactive, batch, background). A batch turn yields to any interactive turn that arrived
  less than the difference before it, and to no other: interactive work goes first while
  batch is in the queue, yet no lane idles while anything is queued (work conserving).
- run slack (run-level attained service, after Autellix's PLAS): `run_slack_per_service`
  seconds per lane-second the turn's run (the `runId` of its request) has already held,
  at most `run_slack_cap_seconds`. Short runs overtake long ones, so mean run completion
  falls. PLAS lifts a waiting call to the top queue once waited >= beta x attained service;
  here the same beta bounds the extra wait directly, and the cap bounds it for long runs.
- size slack (size-aware, SRPT-like): `size_slack_per_ktoken` seconds per 1,000 reserved
  tokens (prompt estimate + max output), at most `size_slack_cap_seconds`.
- backlog slack (per-agent fairness): `agent_backlog_slack_seconds` per turn the turn's
  agent holds or has queued beyond one (n - 1, n counted from the queues and lanes at the
  decision), at most `agent_backlog_slack_cap_seconds`. An agent with one turn is
  unaffected; an agent that keeps many queued has every one of them behind any other
  agent's turn queued less than that slack later, its oldest included. Charging only the
  turns behind the agent's first (their index k) would leave that first one its whole
  age: an agent that refills its queue as it is served always has a head queued long ago,
  which beats every fresh turn of every other agent (docs/concepts/grant-order.md).

Why deadlines rather than more levels: every term is bounded, so aging is built in. A turn's
deadline never exceeds queued_at + the largest class slack + the three caps, and every turn queued
later than that instant has a later deadline; so a turn waits at most that sum plus the time
to serve the turns queued before that instant: nothing starves, without a separate aging
rule (tests/unit/test_ordering.py checks the bound). A call in flight is never preempted:
the order decides only which queued turn takes the next free lane.

While the provider's rate budget binds (`rate_bound`: either bucket below half its capacity,
so the pool spends its RPM or TPM as fast as it refills) the lanes are not what is short,
and the order changes (`output_credit_per_ktoken` > 0; 0 keeps the order above everywhere):

    deadline = queued_at - output credit + run slack + size slack + backlog slack

- no class slack: class slack hands the next free lane to interactive work; here lanes are
  idle and the budget is what is rationed, and interactive turns (long prompts, short
  answers) cost the most budget per second of answer;
- output credit (after EDF on completion rather than start: a call's latency is its wait
  plus its own service, and under a rate limit its service uses no scarce lane, so the call
  that will run longest should start first): `output_credit_per_ktoken` seconds per 1,000
  max-output tokens (the client's own bound on the answer, the pool's only hint of a call's
  service time before it runs), at most `output_credit_cap_seconds`;
- the same backlog slack: when the budget is what is short, one agent's backlog must not
  take it all either.
The credit moves a deadline earlier by at most its cap, so the starvation bound grows by
that cap (min_slack). Each grant records whether it was chosen under this order
(TurnGranted.rate_bound).

The run's attained service is folded from the log (apply: a run's finished turns add the
lane-seconds they held) and an agent's backlog is counted from the queues and lanes, so the
order is a pure function of the folded state and replay reproduces it exactly. Each grant
records the deadline it won by (TurnGranted.order_deadline).
"""
from __future__ import annotations

import heapq
from typing import Any

from . import events as ev
from . import limiter
from .state import PoolState, TurnState

DEADLINE = "deadline"
CLASS_INDEX = {"INTERACTIVE": 0, "BATCH": 1, "BACKGROUND": 2}


def by_deadline(state: PoolState) -> bool:
    return state.settings.policy == DEADLINE


def run_service(state: PoolState, turn: TurnState) -> float:
    run = state.runs.get(turn.run_id) if turn.run_id is not None else None
    return run.service_s if run is not None else 0.0


RATE_BOUND_LEVEL = 0.5   # a bucket below half its capacity: the pool spends it as fast as it refills


def rate_bound(state: PoolState) -> bool:
    """Whether the provider's rate budget, not the lanes, holds the queue back: either
    bucket below half its capacity at the state's clock. A function of the folded state, so
    replay and what-if reproduce it. Off (False) without the output credit."""
    s = state.settings
    if not s.output_credit_per_ktoken > 0:
        return False
    factor, at = state.rate_factor, state.clock
    if s.windowed:
        left, caps = limiter.available(state, at), limiter.capacity(s, factor)
        return any(have < RATE_BOUND_LEVEL * cap for have, cap in zip(left, caps))
    return any(bucket.available(at, factor) < RATE_BOUND_LEVEL * bucket.capacity(factor)
               for bucket in (state.requests, state.tokens))


def output_credit(state: PoolState, turn: TurnState) -> float:
    s = state.settings
    return min(s.output_credit_cap_seconds, s.output_credit_per_ktoken * turn.max_output_tokens / 1000.0)


def agent_backlogs(state: PoolState) -> dict[str, int]:
    """backlog_of every agent with a queued turn, counted once (a pass orders them all)."""
    counts: dict[str, int] = {}
    for queue in state.queues:
        for queued in queue:
            agent_id = state.turns[queued].agent_id
            counts[agent_id] = counts.get(agent_id, 0) + 1
    for held in state.lanes:
        if held is not None and (t := state.turns.get(held)) is not None and t.agent_id in counts:
            counts[t.agent_id] += 1
    return counts


def backlog_slack(state: PoolState, turn: TurnState, backlog: int | None = None) -> float:
    """Agent backlog slack: `agent_backlog_slack_seconds` per turn its agent holds or has
    queued beyond this one, at most `agent_backlog_slack_cap_seconds`."""
    s = state.settings
    if not s.agent_backlog_slack_seconds > 0:
        return 0.0
    n = state.backlog_of(turn.agent_id) if backlog is None else backlog
    return min(s.agent_backlog_slack_cap_seconds, s.agent_backlog_slack_seconds * max(0, n - 1))


def slack(state: PoolState, turn: TurnState, bound: bool | None = None, backlog: int | None = None) -> float:
    """The turn's slack; `backlog` is backlog_of its agent, when the caller counted it."""
    s = state.settings
    if bound is None:
        bound = rate_bound(state)
    if bound:
        total = -output_credit(state, turn)
    else:
        agent = state.agents.get(turn.agent_id)
        index = CLASS_INDEX.get(agent.priority_class, 2) if agent is not None else 2
        total = s.class_slack_seconds[index]
    if s.run_slack_per_service > 0 and turn.run_id is not None:
        total += min(s.run_slack_cap_seconds, s.run_slack_per_service * run_service(state, turn))
    if s.size_slack_per_ktoken > 0:
        total += min(s.size_slack_cap_seconds, s.size_slack_per_ktoken * turn.need_tokens / 1000.0)
    return total + backlog_slack(state, turn, backlog)


def deadline(state: PoolState, turn: TurnState, bound: bool | None = None, backlog: int | None = None) -> float:
    return turn.queued_at + slack(state, turn, bound, backlog)


def max_slack(state: PoolState) -> float:
    """The largest slack any turn can get: the starvation bound's constant."""
    s = state.settings
    return (max(s.class_slack_seconds) + (s.run_slack_cap_seconds if s.run_slack_per_service > 0 else 0.0)
            + (s.size_slack_cap_seconds if s.size_slack_per_ktoken > 0 else 0.0)
            + (s.agent_backlog_slack_cap_seconds if s.agent_backlog_slack_seconds > 0 else 0.0))


def min_slack(state: PoolState) -> float:
    """The smallest (most negative) slack: the output credit moves a deadline earlier by at
    most its cap, which the starvation bound adds."""
    s = state.settings
    return -s.output_credit_cap_seconds if s.output_credit_per_ktoken > 0 else 0.0


def next_turn(state: PoolState, passed: set[str] | frozenset[str] = frozenset()) -> TurnState | None:
    """The queued turn the next free lane goes to (if the rate budget takes it: the choice
    is never skipped for a smaller turn behind it, so big requests cannot starve either),
    `passed` left out (turns a scope of their own holds back: limiter.verdict's SKIP)."""
    if not by_deadline(state):
        if not passed:
            return state.head()
        return next((state.turns[t] for queue in state.queues for t in queue if t not in passed), None)
    best, best_key = None, None
    bound, backlogs = rate_bound(state), agent_backlogs(state)
    for queue in state.queues:
        for turn_id in queue:
            if turn_id in passed:
                continue
            turn = state.turns[turn_id]
            key = (deadline(state, turn, bound, backlogs[turn.agent_id]), turn.seq)
            if best_key is None or key < best_key:
                best, best_key = turn, key
    return best


class GrantOrder:
    """next_turn(), asked again and again by one granting pass (_dispatch in decide.py).

    Asked once per grant, next_turn's scan makes a pass that grants k turns from a queue of
    q cost k x q deadlines: after a stall, a batch of a few hundred requests would take the
    pool's leader 100 ms and more to decide, and the decision's delay would lengthen the
    stall (`python -m agentrm_bench.decide_cost` measures both). Within
    a pass only `rate_bound` can move a queued turn's deadline: a grant spends the buckets
    and RateRecovered moves the factor, but nothing in a pass queues a turn or changes an
    agent's class, a run's attained service (it grows only on a completion), an agent's
    backlog (a grant moves a turn from queued to held, and both count) or a turn's size.
    So the pass orders the queue once, in a heap keyed as next_turn keys it, and again
    only when rate_bound flips; a turn granted since is passed over. Each answer is
    next_turn's (tests/unit/test_grant_order.py checks it grant by grant)."""

    def __init__(self, state: PoolState):
        self.state = state
        self._heap: list[tuple[float, int, str]] | None = None
        self._bound: bool | None = None

    def next(self, passed: set[str] | frozenset[str] = frozenset()) -> TurnState | None:
        """The next turn to ask, `passed` left out (turns held back by a scope of their own
        for the rest of the pass, limiter.verdict's SKIP)."""
        state = self.state
        if not by_deadline(state):
            return next_turn(state, passed)
        bound = rate_bound(state)
        if self._heap is None or bound != self._bound:
            queued = (state.turns[turn_id] for queue in state.queues for turn_id in queue)
            backlogs = agent_backlogs(state)
            self._heap = [(deadline(state, turn, bound, backlogs[turn.agent_id]), turn.seq, turn.turn_id)
                          for turn in queued]
            heapq.heapify(self._heap)
            self._bound = bound
        heap = self._heap
        while heap:
            turn = state.turns.get(heap[0][2])
            if turn is not None and turn.status == ev.QUEUED and turn.turn_id not in passed:
                return turn
            heapq.heappop(heap)   # granted earlier in this pass, or passed over for the rest of it
        return None


def grant_fields(state: PoolState, turn: TurnState) -> dict[str, Any]:
    """What a grant records of the order that chose it (nothing under mlfq and fifo, whose
    grants keep their old shape)."""
    if not by_deadline(state):
        return {}
    bound = rate_bound(state)
    return {"order_deadline": deadline(state, turn, bound),
            "run_service_s": run_service(state, turn) if turn.run_id is not None else None,
            "rate_bound": True if bound else None}

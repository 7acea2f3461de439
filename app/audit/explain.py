"""A turn's story in plain words, told from the log alone.

Pure: `explain_turn(turn_id, turn_records, pool_records)` folds the pool's stream with the
core's apply() and narrates, at each step that concerned the turn, what the scheduler
knew then: the queue it joined and who was ahead of it, what freed its lane, the rate
budget it was granted against, and how it ended.
"""
from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from app.domain import events as ev
from app.domain.apply import apply_event, new_pool
from app.domain.decide import available
from app.domain.state import PoolState
from app.domain.turn_history import TurnHistory, histories

from . import Record

_FREES_LANE = (ev.TurnCompleted, ev.TurnReaped, ev.TurnCancelled)


def when(at: float | None) -> str:
    if at is None:
        return "never"
    return datetime.fromtimestamp(at, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _short(ident: str | None) -> str:
    return (ident or "?")[:8]


class _Narrator:
    def __init__(self, turn_id: str, history: TurnHistory):
        self.turn_id = turn_id
        self.t0 = cast(float, history.requested_at)   # a requested turn's history
        self.lines: list[str] = []
        self.queued: tuple[int, ev.TurnQueued] | None = None     # (position, decision)
        self.granted: ev.TurnGranted | None = None
        # lane -> the last decision that freed it: (position, decision)
        self.freed_by: dict[int, tuple[int, ev.TurnCompleted | ev.TurnReaped | ev.TurnCancelled]] = {}

    def rel(self, at: float) -> str:
        return f"{when(at)} (+{at - self.t0:.3f}s)"

    def who(self, state: PoolState | None, agent_id: str) -> str:
        agent = state.agents.get(agent_id) if state else None
        return f"agent {agent.name} ({_short(agent_id)})" if agent else f"agent {_short(agent_id)}"

    def say(self, line: str) -> None:
        self.lines.append(line)


def _ahead(state: PoolState, turn_id: str, level: int) -> tuple[list[str], int]:
    """Turns that would run before `turn_id`: all of the higher levels, then its own
    level's turns queued before it (MLFQ rules 1 and 2)."""
    higher = [t for queue in state.queues[:level] for t in queue]
    own = state.queues[level]
    same = own[:own.index(turn_id)] if turn_id in own else list(own)
    return higher + same, len(higher)


def _history(turn_id: str, turn_records: list[Record], decisions: dict[int, ev.Decided]) -> TurnHistory | None:
    """The turn's history: its own stream and the pool's decisions about it, in log order."""
    events = [(r.position, ev.parse(r.type, r.data)) for r in turn_records]
    events += [(p, d) for p, d in decisions.items() if getattr(d, "turn_id", None) == turn_id]
    return histories(sorted(events, key=lambda pe: pe[0])).get(turn_id)


def explain_turn(turn_id: str, turn_records: list[Record], pool_records: list[Record]) -> list[str]:
    requested = next((r for r in turn_records if r.type == ev.TURN_REQUESTED), None)
    pool_records = sorted(pool_records, key=lambda r: r.position)
    decisions = {r.position: cast(ev.Decided, ev.parse(r.type, r.data)) for r in pool_records if r.type in ev.DECISIONS}
    history = _history(turn_id, turn_records, decisions) if requested is not None else None
    if history is None:
        return [f"turn {turn_id}: no such turn in the log"]
    n = _Narrator(turn_id, history)
    heartbeats = sorted(cast(float, beat.at) for _, beat in history.heartbeats)   # as the fold took them
    requested = cast(Record, requested)   # a history starts at the request
    n.say(f"Turn {turn_id} was requested at {when(history.requested_at)} by agent {_short(history.agent_id)} in "
          f"pool {history.pool!r} (position {requested.position}), reserving {history.estimated_tokens} "
          f"estimated + {history.max_output_tokens or 0} output tokens.")
    state: PoolState | None = None
    finished_at: float | None = None
    for r in pool_records:
        if r.type == ev.POOL_CREATED:
            state = new_pool(ev.PoolCreated.from_dict(r.data))
            continue
        if state is None or r.type not in ev.DECISIONS:
            continue
        e = decisions[r.position]
        if finished_at is not None and e.at != finished_at:
            break  # the finishing step is over; what follows is other turns' story
        mine = getattr(e, "turn_id", None) == turn_id
        if mine and isinstance(e, ev.TurnGranted):
            _granted(n, state, e)              # judged on the state just before the grant
        elif mine and isinstance(e, ev.TurnReaped):
            _reaped(n, state, e, heartbeats)
        elif n.queued is not None and n.granted is None and finished_at is None and not mine:
            _while_waiting(n, state, e)
        apply_event(state, e)
        if isinstance(e, _FREES_LANE) and e.lane is not None:
            n.freed_by[e.lane] = (r.position, e)
        if not mine:
            continue
        if isinstance(e, ev.TurnQueued):
            _queued(n, state, r.position, e)
        elif isinstance(e, ev.TurnCompleted):
            _completed(n, e)
        elif isinstance(e, ev.TurnCancelled):
            n.say(f"It was cancelled at {n.rel(e.at)}: {e.reason}.")
        elif isinstance(e, ev.PoolPaused):
            n.say(f"Its 429 paused the whole pool until {when(e.until)} (retry-after {e.retry_after:.1f}s "
                  f"+ jitter {e.jitter:.2f}s) and cut the admitted rate factor to {e.rate_factor:.2f}.")
        elif isinstance(e, ev.ModelPaused):
            n.say(f"Its 429 paused model {e.model} (not the pool) until {when(e.until)} and cut that model's "
                  f"rate factor to {e.rate_factor:.2f}.")
        elif isinstance(e, ev.AgentPaused):
            n.say(f"Its agent's own report of a 429 is a claim nothing corroborated: only that agent paused, "
                  f"until {when(e.until)} (retry-after {e.retry_after:.1f}s"
                  + (f", capped from {e.claimed_retry_after:.1f}s)." if e.claimed_retry_after else ")."))
        if isinstance(e, _FREES_LANE):
            finished_at = e.at
    if n.queued is None:
        n.say("The pool's scheduler has not answered the request yet.")
    elif finished_at is None:
        n.say("It is still waiting in the queue." if n.granted is None else "It still holds its lane.")
    return n.lines


def _queued(n: _Narrator, state: PoolState, position: int, d: ev.TurnQueued) -> None:
    n.queued = (position, d)
    ahead, higher = _ahead(state, n.turn_id, d.level)
    busy = [i for i, t in enumerate(state.lanes) if t is not None]
    text = (f"The scheduler queued it at {n.rel(d.at)} at level {d.level} ({d.priority_class.lower()} "
            f"agent, position {position}); {len(busy)} of {state.settings.lanes} lanes were busy")
    if ahead:
        shown = ", ".join(_short(t) for t in ahead[:8]) + (" ..." if len(ahead) > 8 else "")
        text += (f" and {len(ahead)} turn(s) were ahead of it ({higher} at higher levels, "
                 f"{len(ahead) - higher} earlier at its own level: {shown}).")
    else:
        text += " and no turn was ahead of it."
    n.say(text)


def _while_waiting(n: _Narrator, state: PoolState, d: ev.Decided) -> None:
    me = state.turns.get(n.turn_id)
    if me is None:
        return
    if isinstance(d, ev.AgentDemoted) and d.agent_id == me.agent_id:
        n.say(f"While it waited, its agent used up its level-{d.from_level} allotment ({d.reason}) and was "
              f"demoted to level {d.to_level} at {n.rel(d.at)}; the queued turn moved with it.")
    elif isinstance(d, ev.LevelsBoosted):
        n.say(f"A periodic boost at {n.rel(d.at)} reset every agent to its entry level"
              + (" and lifted this turn, which had waited a whole period, to level 0."
                 if d.at - me.queued_at >= state.settings.boost_seconds else "."))
    elif isinstance(d, ev.PoolPaused):
        n.say(f"While it waited, turn {_short(d.turn_id)} hit a 429 and the pool paused until {when(d.until)}.")
    elif isinstance(d, ev.ModelPaused) and d.model == me.model:
        n.say(f"While it waited, turn {_short(d.turn_id)} hit a 429 on its model {d.model}, which paused "
              f"until {when(d.until)}.")
    elif isinstance(d, ev.AgentPaused) and d.agent_id == me.agent_id:
        n.say(f"While it waited, its agent reported a 429 and paused until {when(d.until)}.")


def _granted(n: _Narrator, state: PoolState, d: ev.TurnGranted) -> None:
    n.granted = d
    requests, tokens = available(state, d.at)
    queued_position, queued = n.queued if n.queued is not None else (None, None)
    waited = d.at - (queued.at if queued else d.at)
    freed = n.freed_by.get(d.lane)
    same_step = queued is not None and d.cause is not None and d.cause == queued.cause
    if same_step:
        why = f"at once, in the step that queued it: lane {d.lane} was free and the rate budget covered it"
    # (queued_position is set with queued)
    elif freed is not None and queued is not None and freed[0] > queued_position:  # type: ignore[operator]
        position, x = freed
        how = (f"completed {x.outcome}".strip() if isinstance(x, ev.TurnCompleted)
               else "was reaped" if isinstance(x, ev.TurnReaped) else "was cancelled")
        why = (f"when lane {d.lane} was freed: turn {_short(x.turn_id)} of {n.who(state, x.agent_id)} "
               f"{how} at {when(x.at)} (position {position})")
    elif queued is not None and d.at == queued.at:
        why = f"in the same scheduler pass that queued it (one batch of inputs): lane {d.lane} was free"
    elif state.paused_until is not None:
        why = f"when the pool's 429 pause (until {when(state.paused_until)}) was over"
    else:
        why = f"when the rate budget had refilled enough for its reservation (lane {d.lane} was already free)"
    n.say(f"It was granted lane {d.lane} at level {d.level} at {n.rel(d.at)} after waiting "
          f"{waited:.3f}s, {why}.")
    n.say(f"Rate-limit state at the grant: {requests:.1f} requests and {tokens:,.0f} tokens available "
          f"(it reserved 1 request and {d.reserved_tokens:,} tokens), rate factor {state.rate_factor:.2f}, "
          + (f"paused until {when(state.paused_until)}." if state.paused_until else "not paused.")
          + (f" Its client streams, so the grant lasted only to its start deadline, "
             f"{when(d.lease_expires_at)}, unless the first chunk's heartbeat came before."
             if d.start_deadline else f" Lease until {when(d.lease_expires_at)}."))


def _completed(n: _Narrator, d: ev.TurnCompleted) -> None:
    n.say(f"It completed with outcome {d.outcome} at {n.rel(d.at)} after {d.lane_seconds:.3f} lane-seconds "
          f"on lane {d.lane}, using {d.prompt_tokens} prompt + {d.completion_tokens} completion tokens "
          f"of the {d.reserved_tokens} reserved (the difference went back to the bucket).")


def _reaped(n: _Narrator, state: PoolState, d: ev.TurnReaped, heartbeats: list[float]) -> None:
    turn = state.turns.get(n.turn_id)
    granted_at = turn.granted_at if turn else d.granted_at
    beats = [h for h in heartbeats if granted_at is None or h >= granted_at]
    last = (f"its last heartbeat was at {when(beats[-1])}" if beats
            else f"it never sent a heartbeat after its grant at {when(granted_at)}")
    expired = ("no first chunk arrived by its start deadline" if d.no_first_chunk
               else "its lease expired")
    n.say(f"It was reaped at {n.rel(d.at)}: {expired} at {when(d.lease_expires_at)} and {last}; "
          f"lane {d.lane} was freed for the next turn and the hold counted against its agent.")

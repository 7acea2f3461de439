"""Admission by the pool's limiter, and what holds a turn back: one verdict per queued turn.

The limiter is the shape of the provider's own (settings.limiter):
- "token-bucket": the two buckets of admission.py, refilled continuously at limit/60 per
  second up to one minute's worth;
- "sliding-window" and "fixed-window": the grants of the last W + 1 seconds
  (rate_window.py) may hold at most rpm x W/60 requests and tpm x W/60 tokens. The same
  rule serves both, because it bounds every interval of length W, and so every fixed window
  of length W whatever its phase. The default, because it is safe against all three
  shapes: a bucket refilled at limit/60 per second admits at least as much in any W + 1
  seconds.
Either budget is scaled by the AIMD factor: the pool's, or for a turn of a model that drew
a 429 the smaller of the pool's and that model's (rate_scopes.py).

What may hold a queued turn back, in the order verdict() asks:
- its agent's own pause (its uncorroborated report of a 429), its model's pause, and its
  model's header hold: these hold only turns of their own scope, so the pass SKIPs the
  turn and grants the next one;
- the pool's header hold and the pool's budget: these hold every turn, so the pass WAITs
  (the head is never skipped for a smaller turn behind it, so big requests cannot starve);
- the light-agent reserve (settings.light_agent_reserve, r), of lanes and of budget. A
  turn of a heavy agent (one with another turn of its own queued or holding a lane) takes a
  lane only while ceil(r x lanes in use) others stay free (reserved_lanes), as PostgreSQL
  keeps connection slots for superusers: an agent that always has turns queued would
  otherwise take every lane the moment it frees, and every other agent's next turn would
  wait for the next completion. And it spends the pool's budget only down to r of its
  capacity, so that agent cannot spend the budget to its last request and make every other
  agent's next call wait for the window to slide (or the bucket to refill). A SKIP either
  way, so light turns behind it go through; asked after the pool's budget and hold, so it
  never lets a smaller turn past a head the budget holds. It binds only while the pool has
  another agent, never in a pool of one lane, never on a turn whose reservation alone
  exceeds 1 - r of the budget's capacity (it could never be let through), and a heavy turn
  that has waited agent_backlog_slack_cap_seconds spends the reserve too, so it adds at
  most that wait to any turn's starvation bound. The cost, while another agent is
  registered: a pool whose agents are all heavy runs ceil(r x lanes) lanes short (one lane
  up to 10 lanes at r = 0.1) and admits at most 1 - r of its limit;
- the model's lower factor: a SKIP again, or one model's 429 would slow every model.
"""
from __future__ import annotations

import math

from .rate_scopes import POOL
from .rate_window import MARGIN_S
from .settings import PoolSettings
from .state import PoolState, TurnState

GRANT, SKIP, WAIT = "GRANT", "SKIP", "WAIT"


def span(settings: PoolSettings) -> float:
    """The seconds a window limiter counts a grant for: W plus the arrival margin."""
    return settings.limiter_window_seconds + MARGIN_S


def capacity(settings: PoolSettings, factor: float) -> tuple[float, float]:
    """(requests, tokens) the budget holds at `factor`: one minute's worth for a bucket,
    one window's (limit x W/60) for a window limiter."""
    scale = factor * (settings.limiter_window_seconds / 60.0 if settings.windowed else 1.0)
    return settings.rpm * scale, settings.tpm * scale


def token_capacity(settings: PoolSettings) -> int:
    """The largest reservation the pool could ever admit: its tpm, or one window's tokens if
    the window is shorter than a minute."""
    if settings.windowed and settings.limiter_window_seconds < 60:
        return math.floor(settings.tpm * settings.limiter_window_seconds / 60.0)
    return settings.tpm


def budget_name(settings: PoolSettings) -> str:
    """What token_capacity is, in a refusal's words."""
    if settings.windowed and settings.limiter_window_seconds < 60:
        return f"tokens per {settings.limiter_window_seconds:g}-second window"
    return "tpm"


def available(state: PoolState, now: float, factor: float | None = None) -> tuple[float, float]:
    """(requests, tokens) admissible at `now`, at the pool's factor unless given."""
    f = state.rate_factor if factor is None else factor
    if not state.settings.windowed:
        return state.requests.available(now, f), state.tokens.available(now, f)
    cap_requests, cap_tokens = capacity(state.settings, f)
    used_requests, used_tokens = state.window.used(now, span(state.settings))
    return cap_requests - used_requests, cap_tokens - used_tokens


def fits(state: PoolState, turn: TurnState, now: float, factor: float) -> bool:
    """The pool's budget holds the turn's reservation (1 request, its tokens) at `factor`."""
    requests, tokens = available(state, now, factor)
    return not (requests < 1 or tokens < turn.need_tokens)


def seconds_until_fits(state: PoolState, turn: TurnState, now: float, factor: float) -> float:
    """How long until the budget holds the turn at `factor` (inf: beyond its capacity)."""
    s = state.settings
    if not s.windowed:
        return max(state.requests.seconds_until(1, now, factor),
                   state.tokens.seconds_until(turn.need_tokens, now, factor))
    cap_requests, cap_tokens = capacity(s, factor)
    return state.window.seconds_until(now, span(s), 1, turn.need_tokens, cap_requests, cap_tokens)


def within_capacity(settings: PoolSettings, turn: TurnState, factor: float) -> bool:
    cap_requests, cap_tokens = capacity(settings, factor)
    return turn.need_tokens <= cap_tokens and 1 <= cap_requests


def model_factor(state: PoolState, turn: TurnState, now: float) -> float:
    """The factor a turn is admitted at: the pool's, or its model's if that is lower."""
    pool = state.rate_factor
    limits = state.model_limits.get(turn.model) if turn.model is not None else None
    if limits is None:
        return pool
    return min(pool, limits.factor_at_time(now, state.settings.aimd_increase_per_minute))


def factor_needed(settings: PoolSettings, turn: TurnState) -> float:
    """The smallest factor whose capacity holds the turn's reservation."""
    cap_requests, cap_tokens = capacity(settings, 1.0)
    return max(1.0 / cap_requests, turn.need_tokens / cap_tokens)


def verdict(state: PoolState, turn: TurnState, now: float) -> tuple[str, float]:
    """(GRANT, now), (SKIP, when it may be let through) or (WAIT, when the pool's budget may
    hold it: inf if beyond the capacity at today's factor). The pool's own pause is the
    caller's to check."""
    agent_until = state.agent_pauses.get(turn.agent_id)
    if agent_until is not None and now < agent_until:
        return SKIP, agent_until
    if turn.model is not None:
        limits = state.model_limits.get(turn.model)
        if limits is not None and limits.paused(now):
            return SKIP, float(limits.paused_until)   # type: ignore[arg-type]  # paused(): not None
        hold = state.holds.get(turn.model)
        if hold is not None and hold.active(now) and not hold.allows(turn.need_tokens):
            return SKIP, hold.until
    hold = state.holds.get(POOL)
    if hold is not None and hold.active(now) and not hold.allows(turn.need_tokens):
        return WAIT, hold.until
    if not fits(state, turn, now, state.rate_factor):
        return WAIT, now + seconds_until_fits(state, turn, now, state.rate_factor)
    if takes_reserved_lane(state) and heavy_and_patient(state, turn, now):
        # Only its patience needs a timer: a lane frees, or the agent's backlog shrinks, by
        # a completion, reap or cancel, and each of those runs a granting pass anyway.
        return SKIP, turn.queued_at + state.settings.agent_backlog_slack_cap_seconds
    if (reserve := light_reserve(state, turn, now)) is not None and not fits_above(state, turn, now, reserve):
        return SKIP, min(turn.queued_at + state.settings.agent_backlog_slack_cap_seconds,
                         now + seconds_until_above(state, turn, now, reserve))
    factor = model_factor(state, turn, now)
    if factor < state.rate_factor and not fits(state, turn, now, factor):
        wait = seconds_until_fits(state, turn, now, factor)
        if math.isinf(wait):
            wait = seconds_until_model_factor(state, turn, now)
        return SKIP, now + wait
    return GRANT, now


def heavy_and_patient(state: PoolState, turn: TurnState, now: float) -> bool:
    """The light-agent reserve binds the turn: the rule is on, another agent is registered,
    the turn's agent has another turn of its own queued or holding a lane, and the turn has
    waited less than agent_backlog_slack_cap_seconds."""
    s = state.settings
    return (s.light_agent_reserve > 0 and len(state.agents) >= 2
            and now - turn.queued_at < s.agent_backlog_slack_cap_seconds
            and state.backlog_of(turn.agent_id) >= 2)


def reserved_lanes(state: PoolState) -> int:
    """The lanes a heavy agent's turn must leave free: ceil(reserve x lanes in use), none in
    a pool of one lane (it would be the whole pool)."""
    lanes = state.lanes_in_use()
    if lanes < 2 or not state.settings.light_agent_reserve > 0:
        return 0
    # 0.1 x 30 is 3.0000000000000004 in floating point: the ceiling must not make it 4.
    return math.ceil(state.settings.light_agent_reserve * lanes - 1e-9)


def takes_reserved_lane(state: PoolState) -> bool:
    """A grant now would leave fewer free lanes than the reserve (whoever's turn it is)."""
    reserved = reserved_lanes(state)
    return reserved > 0 and state.lanes_in_use() - state.busy_lanes() - 1 < reserved


def light_reserve(state: PoolState, turn: TurnState, now: float) -> tuple[float, float] | None:
    """(requests, tokens) of the pool's budget the turn must leave unspent, or None when the
    light-agent reserve does not bind it (verdict's docstring says when)."""
    s = state.settings
    if not heavy_and_patient(state, turn, now):
        return None
    cap_requests, cap_tokens = capacity(s, state.rate_factor)
    reserve = (s.light_agent_reserve * cap_requests, s.light_agent_reserve * cap_tokens)
    if 1 + reserve[0] > cap_requests or turn.need_tokens + reserve[1] > cap_tokens:
        return None
    return reserve


def fits_above(state: PoolState, turn: TurnState, now: float, reserve: tuple[float, float]) -> bool:
    """The pool's budget holds the turn's reservation with `reserve` left over."""
    requests, tokens = available(state, now)
    return requests - reserve[0] >= 1 and tokens - reserve[1] >= turn.need_tokens


def seconds_until_above(state: PoolState, turn: TurnState, now: float, reserve: tuple[float, float]) -> float:
    """How long until fits_above holds (light_reserve made sure it can)."""
    s, factor = state.settings, state.rate_factor
    need_requests, need_tokens = 1 + reserve[0], turn.need_tokens + reserve[1]
    if not s.windowed:
        return max(state.requests.seconds_until(need_requests, now, factor),
                   state.tokens.seconds_until(need_tokens, now, factor))
    cap_requests, cap_tokens = capacity(s, factor)
    return state.window.seconds_until(now, span(s), need_requests, need_tokens, cap_requests, cap_tokens)


def seconds_until_model_factor(state: PoolState, turn: TurnState, now: float) -> float:
    """When the turn's model's factor has grown to hold its reservation."""
    s = state.settings
    limits = state.model_limits[turn.model]   # type: ignore[index]  # verdict: a model with limits
    per_second = max(s.aimd_increase_per_minute, 1e-9) / 60.0
    return max(1e-3, limits.factor_at + (factor_needed(s, turn) - limits.factor) / per_second - now)

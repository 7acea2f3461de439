"""An independent check of a pool's rate limits, computed from its decisions alone.

The scheduler admits calls through two token buckets (admission.Bucket); this module does
not use them. It restates the promise the buckets are meant to keep, as network calculus
states a token bucket's: over every window, what was granted stays within what the
bucket held at the window's start plus what it refilled during the window,

    granted(p, j] - refunded(p, j]  <=  U(p) + integral over (t_p, t_j] of limit * F(t) / 60 dt

for every point p of the log before every grant j, where
- F(t) is the AIMD factor, rebuilt here from PoolCreated (1.0) and each PoolPaused
  (its recorded factor) growing by `aimd_increase_per_minute` per minute, up to 1.0;
- U(p) is an upper bound on the bucket's level at p: before any decision, one minute's
  worth at the current factor (the cap); right after a PoolPaused, 0 requests (a 429
  empties the request bucket) and the cap at the lowered factor for tokens; right after
  a RateObserved, no more than the provider reported (headers may only lower a bucket);
- a grant consumes 1 request and its reservation, which must be exactly the turn's
  estimated plus maximum output tokens (from its TurnQueued); a completion refunds the
  reservation minus the real usage, once, whatever the event says (the reservation is
  taken from the grant); a reap or a cancel refunds nothing.

Taking the minimum of U(p) + consumed(p) - refill(p) over all points seen so far checks
every window ending at a grant in O(1) per decision, online, so `audit verify` can run it
over a whole log in one pass. The bound is an upper bound only: a scheduler that grants
less than it could passes here (the worked examples in the unit tests pin the exact
levels). It also checks that a PoolPaused halves the factor the log implies (AIMD's
decrease, never below the floor) and that nothing is granted while the pool is paused.

A pool whose limiter is a window (settings `limiter` "sliding-window" or "fixed-window")
promises something else, checked instead of the envelope: at every grant, the grants of
the last W + 1 seconds (W = `limiter_window_seconds`, the 1 s the documented margin for
arrival delays), this one included, hold at most rpm x W/60 requests and tpm x W/60
tokens net of refunds, scaled by the factor the log implies. The grants are kept here at
their exact times; the scheduler counts them in tenth-of-a-second slices, which only
counts more.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from app.domain import events as ev

# Folded floats: the scheduler's bucket levels are sums of many small refills, so a grant
# that fit may sit a rounding error beyond the bound recomputed here.
REL_EPSILON = 1e-9
ABS_EPSILON = 1e-6
WINDOW_MARGIN_S = 1.0   # the margin the limiter documents (docs/concepts/rate-admission.md)


@dataclass
class _Aimd:
    """The admitted-rate factor as a function of time, rebuilt from the log."""
    factor: float            # the factor set at `since` (1.0 at creation, a pause's after)
    since: float
    per_minute: float        # additive increase per minute

    def at(self, t: float) -> float:
        return min(1.0, self.factor + self.per_minute * max(0.0, t - self.since) / 60.0)

    def integral(self, a: float, b: float) -> float:
        """Integral of the factor over [a, b] (a >= since): linear growth, then flat at 1."""
        if b <= a:
            return 0.0
        if self.per_minute <= 0 or self.factor >= 1.0:
            return (b - a) * min(1.0, self.factor)
        full_at = self.since + (1.0 - self.factor) * 60.0 / self.per_minute
        ramp_end = min(b, max(a, full_at))
        ramp = (ramp_end - a) * (self.at(a) + self.at(ramp_end)) / 2.0
        return ramp + max(0.0, b - ramp_end)


@dataclass
class _Envelope:
    """One resource (requests or tokens): cumulative consumption against cumulative refill,
    and the tightest window start seen so far."""
    name: str
    limit: float             # per minute
    consumed: float = 0.0
    refilled: float = 0.0    # integral of limit * F / 60 since the pool was created
    slack: float = float("inf")   # min over points p of U(p) + consumed(p) - refilled(p)
    # The point where that minimum was taken, for the message: where, U(p), consumed(p),
    # refilled(p).
    window: tuple[str, float, float, float] = ("", 0.0, 0.0, 0.0)

    def point(self, upper: float, where: str) -> None:
        value = upper + self.consumed - self.refilled
        if value < self.slack:
            self.slack, self.window = value, (where, upper, self.consumed, self.refilled)

    def explain(self) -> str:
        where, upper, consumed, refilled = self.window
        return (f"{self.consumed - consumed:.3f} {self.name} granted net of refunds since {where}, but "
                f"the bucket held at most {upper:.3f} then and refilled {self.refilled - refilled:.3f} since "
                f"(limit {self.limit:g}/min x AIMD factor)")

    def excess(self) -> float:
        """How far consumption since the tightest window start exceeds its budget (<= 0 is fine)."""
        over = self.consumed - self.refilled - self.slack
        tolerance = ABS_EPSILON + REL_EPSILON * (self.limit + abs(self.consumed) + abs(self.refilled))
        return over if over > tolerance else 0.0


@dataclass
class RateOracle:
    """Feed it a pool stream's decisions in order with `check`; it returns the first broken
    rate rule as a sentence, or None."""
    rpm: float
    tpm: float
    aimd_floor: float
    aimd_decrease: float
    clock: float
    aimd: _Aimd
    requests: _Envelope = field(init=False)
    tokens: _Envelope = field(init=False)
    needs: dict[str, int] = field(default_factory=dict)         # queued turns: estimated + max output
    reservations: dict[str, int] = field(default_factory=dict)  # granted, not yet settled
    paused_until: float | None = None
    grants: int = 0
    window_s: float | None = None   # a window limiter's W; None: the buckets' envelope
    recent: deque = field(default_factory=deque)   # window limiters: [at, turn id, tokens] of recent grants

    def __post_init__(self) -> None:
        self.requests = _Envelope("requests", self.rpm)
        self.tokens = _Envelope("tokens", self.tpm)

    @classmethod
    def for_pool(cls, created: dict) -> RateOracle:
        """From a PoolCreated event's data."""
        pool = ev.PoolCreated.from_dict(created)
        s, at = pool.settings, float(pool.at)
        windowed = s.get("limiter") in ("sliding-window", "fixed-window")
        return cls(rpm=float(s["rpm"]), tpm=float(s["tpm"]), aimd_floor=float(s.get("aimd_floor", 0.1)),
                   aimd_decrease=float(s.get("aimd_decrease", 0.5)), clock=at,
                   aimd=_Aimd(1.0, at, float(s.get("aimd_increase_per_minute", 0.1))),
                   window_s=float(s.get("limiter_window_seconds", 60.0)) if windowed else None)

    def factor(self) -> float:
        return self.aimd.at(self.clock)

    def check(self, type_: str, data: dict) -> str | None:
        # Read leniently (a partial event): the oracle judges forged and hand-written logs
        # too, and reads only the fields its rules need.
        event = ev.parse(type_, data, partial=True) if ev.is_event_type(type_) else None
        at = event.at if event is not None else data.get("at")  # type: ignore[attr-defined]  # each type has one
        if isinstance(at, (int, float)):
            if at < self.clock:
                return f"decided at {at:.3f}, before an earlier decision at {self.clock:.3f}"
            self._advance(float(at))
        where = f"{type_} at {self.clock:.3f}"
        for env in (self.requests, self.tokens):
            env.point(env.limit * self.factor(), f"before {where}")
        handler = getattr(self, "_" + type_, None)
        return handler(event, where) if handler and event is not None else None

    def _advance(self, t: float) -> None:
        share = self.aimd.integral(self.clock, t) / 60.0
        self.requests.refilled += self.rpm * share
        self.tokens.refilled += self.tpm * share
        self.clock = t

    # -- decisions that move a budget -------------------------------------------------
    def _TurnQueued(self, d: ev.TurnQueued, where: str) -> None:
        self.needs[d.turn_id] = int(d.estimated_tokens) + int(d.max_output_tokens or 0)

    def _TurnGranted(self, d: ev.TurnGranted, where: str) -> str | None:
        turn_id, reserved = d.turn_id, d.reserved_tokens if d.reserved_tokens is not None else 0
        if self.paused_until is not None and self.clock < self.paused_until:
            return (f"turn {turn_id} granted at {self.clock:.3f} while the pool was paused until "
                    f"{self.paused_until:.3f}")
        need = self.needs.pop(turn_id, None)
        if need is not None and reserved != need:
            return f"turn {turn_id} reserved {reserved} tokens, but it asked for {need} (estimated + max output)"
        self.reservations[turn_id] = reserved
        self.grants += 1
        if self.window_s is not None:
            return self._within_window(turn_id, reserved)
        self.requests.consumed += 1
        self.tokens.consumed += reserved
        for env in (self.requests, self.tokens):
            if env.excess():
                return f"turn {turn_id} granted beyond the rate budget: {env.explain()}"
        return None

    def _within_window(self, turn_id: str, reserved: int) -> str | None:
        span = float(self.window_s) + WINDOW_MARGIN_S   # type: ignore[arg-type]  # a window limiter's
        while self.recent and self.recent[0][0] <= self.clock - span:
            self.recent.popleft()
        self.recent.append([self.clock, turn_id, float(reserved)])
        share = self.factor() * float(self.window_s) / 60.0   # type: ignore[arg-type]
        requests, tokens = len(self.recent), sum(entry[2] for entry in self.recent)
        for name, used, limit in (("requests", requests, self.rpm), ("tokens", tokens, self.tpm)):
            budget = limit * share
            if used > budget + ABS_EPSILON + REL_EPSILON * limit:
                return (f"turn {turn_id} granted beyond the rate budget: {used:g} {name} granted net of "
                        f"refunds in the {span:g} s up to {self.clock:.3f}, over the window's "
                        f"{budget:.3f} (limit {limit:g}/min x {self.window_s:g}/60 x AIMD factor)")
        return None

    def _TurnCompleted(self, d: ev.TurnCompleted, where: str) -> None:
        reserved = self.reservations.pop(d.turn_id, None)
        if reserved is not None:  # refunded once, by the reservation the grant made
            used = int(d.prompt_tokens or 0) + int(d.completion_tokens or 0)
            self.tokens.consumed -= reserved - used
            for entry in self.recent:
                if entry[1] == d.turn_id:
                    entry[2] = max(0.0, entry[2] - (reserved - used))

    def _settled_without_refund(self, d: ev.TurnReaped | ev.TurnCancelled, where: str) -> None:
        self.reservations.pop(d.turn_id, None)
        self.needs.pop(d.turn_id, None)

    _TurnReaped = _TurnCancelled = _settled_without_refund

    def _PoolPaused(self, d: ev.PoolPaused, where: str) -> str | None:
        expected = max(self.aimd_floor, self.factor() * self.aimd_decrease)
        factor = float(d.rate_factor)
        if abs(factor - expected) > 1e-9:
            return (f"the pool was paused with rate factor {factor:.6f}, but AIMD gives "
                    f"max({self.aimd_floor:g}, {self.factor():.6f} x {self.aimd_decrease:g}) = {expected:.6f}")
        self.aimd = _Aimd(factor, self.clock, self.aimd.per_minute)
        self.paused_until = float(d.until)
        self.requests.point(0.0, f"the 429 at {self.clock:.3f}")
        self.tokens.point(self.tpm * factor, f"the 429 at {self.clock:.3f}")
        return None

    def _PoolResumed(self, d: ev.PoolResumed, where: str) -> None:
        self.paused_until = None

    def _RateObserved(self, d: ev.RateObserved, where: str) -> None:
        for env, remaining in ((self.requests, d.remaining_requests), (self.tokens, d.remaining_tokens)):
            if remaining is not None:
                env.point(min(env.limit * self.factor(), float(remaining)),
                          f"the provider's report at {self.clock:.3f}")


def first_violation(created: dict, decisions) -> str | None:
    """Check a whole pool stream: `created` is its PoolCreated data, `decisions` the
    (type, data) pairs after it in order."""
    oracle = RateOracle.for_pool(created)
    for type_, data in decisions:
        problem = oracle.check(type_, data)
        if problem:
            return problem
    return None

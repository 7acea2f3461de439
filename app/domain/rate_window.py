"""The grants of the last window, for admission against a sliding or fixed window.

A provider that enforces its limit over a sliding window of W seconds refuses a request
when the requests (or tokens) it admitted in the last W seconds, plus this one, exceed
limit x W/60. Admitting only what fits that rule at every grant satisfies the provider
whatever its clock's phase, and it satisfies fixed windows of W too: a fixed window is
one interval of length W among all those the sliding rule bounds. So one rule serves
both shapes.

The window is counted as W + MARGIN_S. The provider counts a call when it arrives, some
time after our grant (the gateway's wake-up, the connection, other workers' decisions
travelling through the log). A grant whose call arrives late is no problem; the two calls
that matter are an old one that arrives late and a new one that arrives early, and the
margin covers a spread of up to MARGIN_S between the grant-to-arrival delays of any two
calls. It costs W/(W + 1) of the limit: 98% at W = 60, 91% at W = 10.

Grants are kept in slices of 1/SLICES_PER_SECOND s, each keyed by the whole number k with
the slice ending at k / SLICES_PER_SECOND: a grant at t goes to k = ceil(t x 10), so it is
counted until its slice's end has left the window, never less. A refund on completion goes
to the slice of its grant (found from the turn's granted_at by the same formula). The
state holds at most one slice per tenth of a second of the window, and never more slices
than grants, so at most min(limit x W/60, 10 x (W + 1) + 1) entries, whatever the rate.

One pass of the scheduler asks for the window's use many times at the same moment: once
per queued turn it weighs (the grant order's rate_bound, each verdict's fits), and an agent
with a full queue puts dozens of turns there, all passed over in turn. At 600 slices a
count, that made the pool's leader spend more time summing the window than deciding, and
the cost grew with the most greedy agent's queue. So `used` remembers its answers for the
last few moments asked (a pass asks at its own moment and at the state's clock) until the
window changes (add, refund, prune): the same sums over the same slices, taken once.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

MARGIN_S = 1.0
SLICES_PER_SECOND = 10
REMEMBERED_MOMENTS = 4   # used()'s answers kept between changes of the window


def slice_of(at: float) -> int:
    return math.ceil(at * SLICES_PER_SECOND)


def slice_end(key: int) -> float:
    return key / SLICES_PER_SECOND


@dataclass
class RateWindow:
    """[key, requests, tokens] per slice, oldest first. Change it only through its methods:
    they forget `used`'s remembered answer."""
    slices: list[list[float]] = field(default_factory=list)
    # (now, span) -> (requests, tokens) of the last few `used`, until the slices change.
    _used: dict[tuple[float, float], tuple[float, float]] = field(default_factory=dict, init=False, repr=False,
                                                                  compare=False)

    def add(self, at: float, tokens: float) -> None:
        self._used.clear()
        key = slice_of(at)
        if self.slices and self.slices[-1][0] == key:
            self.slices[-1][1] += 1
            self.slices[-1][2] += tokens
        elif not self.slices or self.slices[-1][0] < key:
            self.slices.append([key, 1, tokens])
        else:   # time never runs backwards in a pool; kept ordered all the same
            keys = [int(s[0]) for s in self.slices]
            i = bisect.bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                self.slices[i][1] += 1
                self.slices[i][2] += tokens
            else:
                self.slices.insert(i, [key, 1, tokens])

    def refund(self, granted_at: float, tokens: float) -> None:
        """Give back `tokens` of the grant made at `granted_at` (negative: charge more), if
        its slice is still in the window."""
        self._used.clear()
        key = slice_of(granted_at)
        keys = [int(s[0]) for s in self.slices]
        i = bisect.bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            self.slices[i][2] = max(0.0, self.slices[i][2] - tokens)

    def prune(self, now: float, span: float) -> None:
        """Drop the slices no longer counted at `now`."""
        drop = 0
        while drop < len(self.slices) and not counted(self.slices[drop], now, span):
            drop += 1
        if drop:
            self._used.clear()
            del self.slices[:drop]

    def _first_counted(self, now: float, span: float) -> int:
        """The index of the oldest slice still counted at `now` (len(slices) if none is): the
        slices are ordered by key, and so by when they leave the window, so those no longer
        counted are a prefix."""
        low, high = 0, len(self.slices)
        while low < high:
            mid = (low + high) // 2
            if counted(self.slices[mid], now, span):
                high = mid
            else:
                low = mid + 1
        return low

    def used(self, now: float, span: float) -> tuple[float, float]:
        """(requests, tokens) granted in the window that ends at `now`."""
        remembered = self._used.get((now, span))
        if remembered is not None:
            return remembered
        requests = tokens = 0.0
        for entry in self.slices[self._first_counted(now, span):]:
            requests += entry[1]
            tokens += entry[2]
        if len(self._used) >= REMEMBERED_MOMENTS:
            self._used.clear()
        self._used[(now, span)] = (requests, tokens)
        return requests, tokens

    def seconds_until(self, now: float, span: float, requests: float, tokens: float,
                      cap_requests: float, cap_tokens: float) -> float:
        """How long until `requests` and `tokens` more fit the caps (0: now; inf: never,
        they exceed the caps themselves)."""
        if requests > cap_requests or tokens > cap_tokens:
            return math.inf
        used_requests, used_tokens = self.used(now, span)
        if used_requests + requests <= cap_requests and used_tokens + tokens <= cap_tokens:
            return 0.0
        for entry in self.slices[self._first_counted(now, span):]:   # oldest first: each leaves in turn
            used_requests -= entry[1]
            used_tokens -= entry[2]
            if used_requests + requests <= cap_requests and used_tokens + tokens <= cap_tokens:
                return max(0.0, leaves_at(entry, span) - now)
        return math.inf   # not reached: with every slice gone the caps hold

    def to_list(self) -> list[list[float]]:
        return [list(entry) for entry in self.slices]


def leaves_at(entry: list[float], span: float) -> float:
    """When a slice stops being counted: next_deadline wakes at exactly this, and counted()
    compares with the very same expression (float rounding)."""
    return slice_end(int(entry[0])) + span


def counted(entry: list[float], now: float, span: float) -> bool:
    return now < leaves_at(entry, span)

"""Adaptive lanes: how many of a pool's configured lanes to use, learned from how long the
provider takes to start answering.

A provider that batches requests (a self-hosted vLLM or SGLang server, a provisioned
deployment) gets faster in total as more requests run at once, up to a knee; past it the
requests it cannot run wait in its own queue, and all that more concurrency buys is
latency (and, with a start deadline, calls cut while they wait). Time to first chunk is
where that queue shows: a request that waits behind others starts late, by a whole
request's share of service per request ahead of it. So the pool runs at the concurrency
where the first chunk stops arriving in its usual time.

The rule is Netflix concurrency-limits' Gradient2 (`Gradient2Limit`), in log space:
- short = a moving mean of log(first-chunk time / prompt size) over about 8 samples, long =
  the same over about 128 samples (the prompt size as the start deadline takes it:
  StartEstimator.size);
- gradient = clamp(TOLERANCE x exp(long) / exp(short), GRADIENT_FLOOR, 1): 1 while the
  provider starts calls about as fast as it usually does, below 1 when they queue. The floor
  is 0.8, not Gradient2's 0.5: a first chunk reports a queue only after the call waited in it,
  so "queue" samples keep coming for a round trip after the limit was cut; at 10% a sample
  that late train halves the limit far below the knee, at 4% it stays near it;
- new = limit x gradient + QUEUE, smoothed: limit <- (1 - SMOOTHING) limit + SMOOTHING new.
  With gradient 1 the limit grows by SMOOTHING x QUEUE per sample; when calls queue it
  shrinks geometrically.
- it grows only while at least half of the limit is in use (Gradient2's app-limited check:
  a pool that is not using its lanes has learned nothing about more of them);
- when long is more than twice short, long is pulled down (Gradient2's drift correction:
  after a period of overload the baseline returns to normal without waiting for the mean);
- one sample may move short by at most log(OUTLIER) above long: a single call that is slow
  for its own reasons (a long reasoning prefill) says nothing of the pool's concurrency.
Gradient2 starts at a small initial limit and finds the knee from below: a limit that
starts past the knee never sees the provider's unqueued latency, so its long average would
be the queued one. This starts at min(lanes, initial) and grows while the first chunk
keeps its time; a hosted API that does not slow down under load reaches the configured
lanes in about a minute of traffic and stays there.

Samples are the first-chunk times the pool already records (LeaseExtended.first_chunk_s),
folded in apply; a change of the whole number of lanes in use is a decision of its own
(LaneLimitChanged), so replay reproduces the limit and explain can say why it moved.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

SHORT_GAIN = 1 / 8
LONG_GAIN = 1 / 128
TOLERANCE = 2.0        # first chunks may take up to twice their long-run time before the limit shrinks
QUEUE = 4.0            # Gradient2's queueSize: the headroom added each sample
SMOOTHING = 0.2        # Gradient2's smoothing
OUTLIER = 4.0          # one sample moves `short` by at most log(4) over `long`
DRIFT = 2.0            # long > 2 x short: long decays (Gradient2's drift correction)
DRIFT_DECAY = 0.95
GRADIENT_FLOOR = 0.8    # a sample cuts the limit by at most SMOOTHING x (1 - this) = 4%
INITIAL = 16           # Gradient2's initialLimit is 20; 16 is a fifth of a typical knee at most
MINIMUM = 2            # never fewer lanes than this (nor more than configured)
# INITIAL and MINIMUM are the defaults of the pool settings adaptive_lanes_initial and
# adaptive_lanes_minimum, which every call below passes on.


@dataclass
class LaneLimit:
    """The learned number of lanes (a real number; the pool uses its whole part)."""
    limit: float | None = None     # None until the first fold: min(lanes, initial)
    short: float | None = None     # moving mean of log(first chunk / size), fast
    long: float | None = None      # the same, slow
    samples: int = 0

    def current(self, lanes: int, initial: int = INITIAL) -> float:
        return float(min(lanes, initial)) if self.limit is None else self.limit

    def observe(self, log_sample: float, in_use: int, lanes: int,
                initial: int = INITIAL, minimum: int = MINIMUM) -> None:
        """Fold one first-chunk sample (already divided by its prompt size, in log units),
        seen while `in_use` lanes were granted."""
        n = self.samples + 1
        limit = self.current(lanes, initial)
        if self.long is None or self.short is None:
            self.short = self.long = log_sample
        else:
            sample = min(log_sample, self.long + math.log(OUTLIER))
            self.short += max(SHORT_GAIN, 1 / n) * (sample - self.short)
            self.long += max(LONG_GAIN, 1 / n) * (sample - self.long)
            if self.long - self.short > math.log(DRIFT):
                self.long = self.short + (self.long - self.short) * DRIFT_DECAY
        self.samples = n
        gradient = min(1.0, max(GRADIENT_FLOOR, TOLERANCE * math.exp(self.long - self.short)))
        if gradient >= 1.0 and in_use < limit / 2:
            return   # app-limited: no evidence about more lanes
        proposed = limit * gradient + QUEUE
        limit = (1 - SMOOTHING) * limit + SMOOTHING * proposed
        self.limit = min(float(lanes), max(float(min(minimum, lanes)), limit))

    def grow_unmeasured(self, in_use: int, lanes: int, initial: int = INITIAL) -> None:
        """A call completed that never reported a first chunk (its client does not stream):
        no sign of a queue, so the limit grows as with gradient 1. Without this a pool of
        non-streaming clients would stay at its initial limit for ever."""
        limit = self.current(lanes, initial)
        if in_use < limit / 2:
            return
        self.limit = min(float(lanes), limit + SMOOTHING * QUEUE)

    def lanes_in_use(self, lanes: int, initial: int = INITIAL) -> int:
        return max(1, min(lanes, int(self.current(lanes, initial))))

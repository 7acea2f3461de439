"""How many output tokens a gateway call that names no bound reserves: its model's typical
answer, learned from the completions the gateway relays.

A call without `max_tokens` (OpenAI's default is "up to the context") must still reserve
something from the pool's token bucket before it is granted. A fixed 1,024 holds back four
times what a typical chat answer takes, so a pool near its tokens-per-minute limit admits
fewer calls than it could. Instead each (pool, model) keeps its last completion counts, and
a call reserves their 90th percentile: nine answers in ten fit, and the completion refunds
what the reservation over-took, or charges what it under-took, so a miss costs no accuracy,
only a little admission slack for one call.

The estimate lives in the shell, per worker, not in the log: the amount a turn reserves is
recorded in its TurnRequested (`max_output_tokens`), so replay reads the decision's input
from the log and never recomputes it. What it keeps is bounded: a window of recent samples
per model, and the least recently used models dropped past a cap.
"""
from __future__ import annotations

import math
from collections import OrderedDict, deque

# Before any sample: a typical short chat answer, not the worst case.
PRIOR_TOKENS = 256
# Never more than the fixed bound the gateway reserved before it learned (and the bound a
# call that names none most often meets in practice).
CAP_TOKENS = 1024
QUANTILE = 0.9
WINDOW = 64          # recent completions per (pool, model)
MAX_MODELS = 256     # (pool, model) pairs remembered; the least recently used go first


class OutputEstimator:
    def __init__(self, *, prior: int = PRIOR_TOKENS, cap: int = CAP_TOKENS, quantile: float = QUANTILE,
                 window: int = WINDOW, max_models: int = MAX_MODELS):
        if not 0 < quantile <= 1 or window < 1 or max_models < 1 or not 0 <= prior <= cap:
            raise ValueError("quantile in (0, 1], window and max_models >= 1, 0 <= prior <= cap")
        self.prior, self.cap, self.quantile = prior, cap, quantile
        self.window, self.max_models = window, max_models
        self._samples: OrderedDict[tuple[str, str | None], deque[int]] = OrderedDict()

    def reserve(self, pool: str, model: str | None) -> int:
        """The output tokens a call of `model` in `pool` that names no bound reserves."""
        key = (pool, model)
        samples = self._samples.get(key)
        if not samples:
            return self.prior
        self._samples.move_to_end(key)
        ordered = sorted(samples)
        rank = max(1, math.ceil(self.quantile * len(ordered)))   # nearest rank
        return min(self.cap, ordered[rank - 1])

    def observe(self, pool: str, model: str | None, completion_tokens: int, bound: int | None = None) -> None:
        """Learn from one finished answer. An answer that reached its call's own bound was
        cut there, so it says only that the model would have gone on: not a sample."""
        if not isinstance(completion_tokens, int) or completion_tokens < 0:
            return
        if bound is not None and completion_tokens >= bound:
            return
        key = (pool, model)
        samples = self._samples.get(key)
        if samples is None:
            samples = self._samples[key] = deque(maxlen=self.window)
            while len(self._samples) > self.max_models:
                self._samples.popitem(last=False)
        else:
            self._samples.move_to_end(key)
        samples.append(completion_tokens)

    def __len__(self) -> int:
        return len(self._samples)

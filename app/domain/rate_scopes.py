"""What a 429 or a provider's headers hold back, and for whom: a model, an agent, the pool.

A provider limits each model of a key on its own (OpenAI's limits are per model), so a 429
on one model says nothing about the others: the pause and the AIMD cut go to that model
(ModelLimits), and the pool's other models keep being granted. Only a 429 whose model is
unknown pauses the pool (PoolPaused, as before the rule).

A provider's `remaining` headers with their reset (Hold) bound the grants of the scope the
observed call belongs to until that reset: remaining 0 blocks them, remaining N lets N more
through. A later observation replaces an earlier one only if its call was granted no
earlier (`as_of`): answers arrive out of order, and an older call's headers describe an
older state of the provider.

Both are keyed by model name, bounded as the per-model start estimators are
(deadlines.MAX_MODEL_ESTIMATORS): past the bound a model's 429 or headers apply to the
whole pool, which is the conservative reading.
"""
from __future__ import annotations

from dataclasses import dataclass

from .admission import aimd_factor

POOL = ""   # the Hold of the whole pool (a model name is never empty)


@dataclass
class ModelLimits:
    """One model's pause and AIMD factor. The factor is scaled like the pool's (halved by a
    429, +aimd_increase_per_minute of the limit per minute), and read lazily: a turn of the
    model is admitted against the pool's budget at the smaller of the two factors."""
    paused_until: float | None = None
    factor: float = 1.0
    factor_at: float = 0.0

    def factor_at_time(self, now: float, increase_per_minute: float) -> float:
        return aimd_factor(self.factor, self.factor_at, now, increase_per_minute)

    def paused(self, now: float) -> bool:
        return self.paused_until is not None and now < self.paused_until

    def idle(self, now: float, increase_per_minute: float) -> bool:
        """Nothing left to remember: no pause ahead and the factor back at 1."""
        return not self.paused(now) and self.factor_at_time(now, increase_per_minute) >= 1.0


@dataclass
class Hold:
    """Until `until`, at most `requests` more grants and `tokens` more reserved tokens (None:
    no bound of that kind)."""
    until: float
    requests: float | None
    tokens: float | None
    as_of: float          # when the call whose headers these are was granted

    def active(self, now: float) -> bool:
        return now < self.until

    def allows(self, need_tokens: float) -> bool:
        return ((self.requests is None or self.requests >= 1)
                and (self.tokens is None or self.tokens >= need_tokens))

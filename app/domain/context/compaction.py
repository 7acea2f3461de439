"""Compaction policy: when hot tokens pass the (growth-adaptive) high watermark, which
oldest unpinned hot messages to move to warm and cold. The plan only; app.context.compactor
turns it into a ContextCompacted event.
"""
from __future__ import annotations

from dataclasses import dataclass

from .state import AgentContext, ContextMessage

ADAPTIVE, FIXED, NEVER = "adaptive", "fixed", "never"


@dataclass(frozen=True)
class CompactionSettings:
    """When hot tokens pass ``high_watermark`` x budget, compact the oldest unpinned hot
    messages until hot tokens are at most ``low_watermark`` x budget.

    Why 0.55 / 0.30: the view gives key facts up to 30 % of the budget and keeps ~15 % for
    warm summaries and cold recall, so the hot tier must stay under ~55 % or its oldest
    messages would fall out of the view before being compacted (no facts, no chunks: lost).
    Going down to 30 % moves a quarter of the budget per compaction, so the summarizer
    runs once every few turns, not every turn, and the recent verbatim window stays useful.

    Adaptive: a fast grower (many tokens per minute) lowers both marks, by up to
    ``max_high_shift``/``max_low_shift`` at saturation, following g = r / (r + r_ref).
    It compacts earlier because the next few appends (which arrive before a compaction
    done off the request path lands) would otherwise overflow, and deeper so it does not
    immediately re-trigger. ``mode="never"`` disables compaction; ``"fixed"`` ignores growth.
    """

    mode: str = ADAPTIVE
    high_watermark: float = 0.55
    low_watermark: float = 0.30
    reference_tokens_per_minute: float = 2_000.0
    max_high_shift: float = 0.15
    max_low_shift: float = 0.10
    min_hot_messages: int = 2          # the latest exchange always stays verbatim
    summary_ratio: float = 0.15        # summary target = 15 % of the span's tokens ...
    summary_min_tokens: int = 48       # ... but at least this ...
    summary_max_budget_fraction: float = 0.08  # ... and at most 8 % of the budget

    def __post_init__(self) -> None:
        if self.mode not in (ADAPTIVE, FIXED, NEVER):
            raise ValueError(f"compaction mode must be adaptive, fixed or never, got {self.mode!r}")
        if not 0.0 < self.low_watermark < self.high_watermark <= 1.0:
            raise ValueError("watermarks need 0 < low < high <= 1")
        if self.low_watermark - self.max_low_shift <= 0 or \
                self.high_watermark - self.max_high_shift <= self.low_watermark - self.max_low_shift:
            raise ValueError("adaptive shifts must keep 0 < low < high")


def effective_watermarks(settings: CompactionSettings, tokens_per_minute: float) -> tuple[float, float]:
    """(high, low) fractions of the budget after adapting to the growth rate."""
    if settings.mode != ADAPTIVE or tokens_per_minute <= 0:
        return settings.high_watermark, settings.low_watermark
    g = tokens_per_minute / (tokens_per_minute + settings.reference_tokens_per_minute)
    return (settings.high_watermark - settings.max_high_shift * g,
            settings.low_watermark - settings.max_low_shift * g)


@dataclass(frozen=True)
class CompactionPlan:
    agent_id: str
    segment_id: str
    seqs: tuple[int, ...]            # hot, unpinned, oldest first, contiguous among those
    from_seq: int
    to_seq: int
    tokens_before: int               # hot tokens now
    span_tokens: int
    target_tokens: int               # the low watermark in tokens
    high_watermark: float
    low_watermark: float
    tokens_per_minute: float
    summary_target_tokens: int


def plan_compaction(state: AgentContext, budget_tokens: int, settings: CompactionSettings,
                    now: float) -> CompactionPlan | None:
    """Which hot messages to compact now, or None. Hot tokens include pinned messages,
    because they occupy the view too; pinned ones are just never chosen."""
    if settings.mode == NEVER or state.hibernated:
        return None
    rate = state.growth.tokens_per_minute(now)
    high, low = effective_watermarks(settings, rate)
    hot_tokens = state.hot_tokens
    if hot_tokens <= high * budget_tokens:
        return None
    target = int(low * budget_tokens)
    unpinned = [m for m in state.hot if not m.pinned]
    candidates = unpinned[:max(0, len(unpinned) - settings.min_hot_messages)]
    chosen: list[ContextMessage] = []
    remaining = hot_tokens
    for message in candidates:
        if remaining <= target:
            break
        chosen.append(message)
        remaining -= message.tokens
    if not chosen:
        return None
    span_tokens = sum(m.tokens for m in chosen)
    summary_target = int(min(max(settings.summary_min_tokens, settings.summary_ratio * span_tokens),
                             settings.summary_max_budget_fraction * budget_tokens))
    return CompactionPlan(
        agent_id=state.agent_id, segment_id=f"seg-{state.compactions + 1}",
        seqs=tuple(m.seq for m in chosen), from_seq=chosen[0].seq, to_seq=chosen[-1].seq,
        tokens_before=hot_tokens, span_tokens=span_tokens, target_tokens=target,
        high_watermark=high, low_watermark=low, tokens_per_minute=rate,
        summary_target_tokens=max(16, summary_target))

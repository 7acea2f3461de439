"""Rate-limit-aware admission: continuous token buckets, AIMD, provider headers.

Pure: every function takes `now` as a value.

Two buckets per pool, requests and tokens, each refilled continuously at limit/60 per
second up to one minute's worth (the provider's own window). A grant reserves 1 request
and estimated + max-output tokens; completion refunds the difference with real usage.
The admitted rate is scaled by an AIMD factor: a 429 halves it, each quiet minute adds
back a tenth of the limit, as TCP's congestion avoidance does with its window.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass
class Bucket:
    limit_per_minute: float
    level: float
    updated_at: float

    def capacity(self, factor: float) -> float:
        return self.limit_per_minute * factor

    def available(self, now: float, factor: float) -> float:
        """Level at `now`, refilled at the factor-scaled rate, capped at capacity."""
        elapsed = max(0.0, now - self.updated_at)
        refill = elapsed * self.limit_per_minute * factor / 60.0
        return min(self.capacity(factor), self.level + refill)

    def advance(self, now: float, factor: float) -> None:
        if now > self.updated_at:
            self.level = self.available(now, factor)
            self.updated_at = now

    def seconds_until(self, amount: float, now: float, factor: float) -> float:
        """How long until `amount` is available (inf if it never fits the capacity)."""
        have = self.available(now, factor)
        if have >= amount:
            return 0.0
        if amount > self.capacity(factor) or factor <= 0:
            return float("inf")
        return (amount - have) * 60.0 / (self.limit_per_minute * factor)

    def to_dict(self) -> dict[str, Any]:
        return {"limit_per_minute": self.limit_per_minute, "level": self.level,
                "updated_at": self.updated_at}


def aimd_factor(factor: float, changed_at: float, now: float, increase_per_minute: float) -> float:
    """The additive-increase half of AIMD, as a continuous function of time."""
    return min(1.0, factor + increase_per_minute * max(0.0, now - changed_at) / 60.0)


def jitter(seed: str, max_seconds: float) -> float:
    """Deterministic positive jitter in [0, max): derived from the turn id, so replay of
    the same log gives the same pause, yet pools and workers sharing a provider key
    spread their restarts instead of stampeding together."""
    digest = hashlib.sha256(seed.encode()).digest()
    return max_seconds * int.from_bytes(digest[:8], "big") / 2**64


# -- provider rate-limit headers ------------------------------------------------------

@dataclass(frozen=True)
class RateObservation:
    remaining_requests: float | None = None
    remaining_tokens: float | None = None
    limit_requests: float | None = None
    limit_tokens: float | None = None
    reset_requests_s: float | None = None
    reset_tokens_s: float | None = None
    retry_after_s: float | None = None

    def empty(self) -> bool:
        return all(v is None for v in self.__dict__.values())

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(value: str) -> float | None:
    """OpenAI's reset form: '1s', '6m0s', '120ms', '1h2m3.5s', or plain seconds."""
    value = value.strip()
    try:
        seconds = float(value)
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value.replace(" ", ""):
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def _seconds_until_timestamp(value: str, now: float) -> float | None:
    """Anthropic's reset form is an RFC 3339 instant. One without an offset is read as UTC:
    datetime.timestamp() would read it in the host's local zone, and a replay or what-if on
    a host in another zone would then decide differently."""
    try:
        instant = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return max(0.0, instant.timestamp() - now)


MAX_RETRY_AFTER_S = 3600.0  # a provider (or a client relaying one) may not pause a pool longer


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def parse_rate_headers(headers: dict[str, Any], now: float) -> RateObservation:
    """Read OpenAI `x-ratelimit-*`, Anthropic `anthropic-ratelimit-*` and `retry-after`.
    Unknown or malformed values are ignored rather than trusted."""
    h = {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    found: dict[str, float | None] = {}

    def put(key: str, value: float | None) -> None:
        if value is not None and found.get(key) is None:
            found[key] = value

    put("remaining_requests", _number(h.get("x-ratelimit-remaining-requests")))
    put("remaining_tokens", _number(h.get("x-ratelimit-remaining-tokens")))
    put("limit_requests", _number(h.get("x-ratelimit-limit-requests")))
    put("limit_tokens", _number(h.get("x-ratelimit-limit-tokens")))
    if "x-ratelimit-reset-requests" in h:
        put("reset_requests_s", parse_duration(h["x-ratelimit-reset-requests"]))
    if "x-ratelimit-reset-tokens" in h:
        put("reset_tokens_s", parse_duration(h["x-ratelimit-reset-tokens"]))

    put("remaining_requests", _number(h.get("anthropic-ratelimit-requests-remaining")))
    put("remaining_tokens", _number(h.get("anthropic-ratelimit-tokens-remaining")))
    if found.get("remaining_tokens") is None:
        # Newer Anthropic responses split input and output; the tighter one binds.
        parts = [_number(h.get(f"anthropic-ratelimit-{k}-tokens-remaining")) for k in ("input", "output")]
        known = [p for p in parts if p is not None]
        put("remaining_tokens", min(known) if known else None)
    put("limit_requests", _number(h.get("anthropic-ratelimit-requests-limit")))
    put("limit_tokens", _number(h.get("anthropic-ratelimit-tokens-limit")))
    if "anthropic-ratelimit-requests-reset" in h:
        put("reset_requests_s", _seconds_until_timestamp(h["anthropic-ratelimit-requests-reset"], now))
    if "anthropic-ratelimit-tokens-reset" in h:
        put("reset_tokens_s", _seconds_until_timestamp(h["anthropic-ratelimit-tokens-reset"], now))

    if "retry-after-ms" in h:
        ms = _number(h["retry-after-ms"])
        put("retry_after_s", None if ms is None else ms / 1000.0)
    if "retry-after" in h:
        put("retry_after_s", _number(h["retry-after"]))
    for key in ("retry_after_s", "reset_requests_s", "reset_tokens_s"):
        value = found.get(key)
        if value is not None:
            found[key] = min(value, MAX_RETRY_AFTER_S)
    return RateObservation(**found)

"""The context window of the models the gateway knows by name, for managed context.

A model is matched by the longest known prefix of its name (``gpt-4o-mini-2024-07-18`` is
a ``gpt-4o-mini``). A model it does not know takes the pool's ``contextWindowTokens``
(DEFAULT_WINDOW when unset): operators of self-hosted or smaller-window models set it. The
figures are the providers' published input windows (prompt plus output).
"""
from __future__ import annotations

DEFAULT_WINDOW = 128_000

KNOWN_WINDOWS: dict[str, int] = {
    "gpt-3.5-turbo": 16_385,
    "gpt-4": 8_192,
    "gpt-4-32k": 32_768,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude-": 200_000,
}


def context_window(model: str | None, pool_window: int | None) -> int:
    """The window of ``model``: the known one, else the pool's setting, else DEFAULT_WINDOW."""
    name = (model or "").lower()
    best = ""
    for prefix in KNOWN_WINDOWS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    if best:
        return KNOWN_WINDOWS[best]
    return pool_window or DEFAULT_WINDOW

"""createPool's input to PoolSettings: every optional field left out takes the setting's
default, so an old client's createPool makes the pool it always made.

The scheduling rules' settings (grant order, adaptive lanes, failure deadlines) are named
as in PoolSettings, in camelCase; PoolSettings.validate is the one place that judges them,
so a bad value is refused with its reason and nothing is written.
"""
from __future__ import annotations

import strawberry

from app.domain.settings import PoolSettings

# PoolInput field (snake_case, as strawberry holds it) -> the PoolSettings field of the same
# name. A field left out (None) keeps the default.
PLAIN_FIELDS = (
    "lease_seconds", "start_timeout_floor_seconds", "levels", "boost_seconds", "tokenizer",
    "upstream_base_url",
    "run_slack_per_service", "run_slack_cap_seconds", "size_slack_per_ktoken",
    "size_slack_cap_seconds", "run_forget_seconds", "output_credit_per_ktoken", "output_credit_cap_seconds",
    "agent_backlog_slack_seconds", "agent_backlog_slack_cap_seconds",
    "adaptive_lanes", "adaptive_lanes_initial", "adaptive_lanes_minimum",
    "outage_after_silent_reaps", "probe_backoff_cap", "request_timeout_seconds", "stream_idle_timeout_seconds",
    "limiter_window_seconds", "agent_retry_after_cap_seconds", "light_agent_reserve", "context_window_tokens",
)


def settings_of(data) -> PoolSettings:
    """The settings a PoolInput asks for (not yet validated: the service does that)."""
    given = {"name": data.name, "lanes": data.lanes, "rpm": data.rpm, "tpm": data.tpm}
    for key in PLAIN_FIELDS:
        value = getattr(data, key)
        if value is not None:
            given[key] = value
    if data.policy is not None:
        given["policy"] = data.policy.value
    if data.limiter is not None:
        given["limiter"] = data.limiter.value
    if data.context_mode is not None:
        given["context_mode"] = data.context_mode.value
    if data.class_slack_seconds is not None:
        given["class_slack_seconds"] = tuple(data.class_slack_seconds)
    # Null is a value here: no stall deadline (a streaming turn keeps the plain lease);
    # left out, the default.
    if data.stall_timeout_seconds is not strawberry.UNSET:
        given["stall_timeout_seconds"] = data.stall_timeout_seconds
    if data.model_timeouts is not None:
        given["model_timeouts"] = tuple((m.model, m.request_timeout_seconds, m.stream_idle_timeout_seconds)
                                        for m in data.model_timeouts)
    return PoolSettings(**given)

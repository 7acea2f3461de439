"""Metrics of one policy's run, defined the same way for every policy.

- Turn latency: for each call of the trace an agent asked for, from the moment it wanted the
  call (its think or tool time over) to a successful answer, through every queue, 429, retry,
  hang and reap in between. A call still unanswered at the end counts with its age then: a
  lower bound, so a policy cannot look faster by never finishing its slow calls.
- Slot: whatever bounds a policy's concurrency. lanes-fifo: a lane, held for a whole agent
  run (LLM calls, tool calls, 429 backoffs, hung calls). aios-fifo: the worker executing one
  drained call, through SDK retry sleeps and hangs. litellm-router: a max_parallel_requests
  permit, held per attempt. agentrm: a lane, held from grant to completion, reap or cancel.
- Lane waste: 1 - (seconds of successful provider calls inside holds) / (slot-seconds held),
  both clipped to the simulated period. Tool time, 429 round trips, backoff sleeps, hung calls
  and the client's reaction to a grant are all waste.
- Throughput: successful calls per simulated minute.
- Zombies: slots held at the end by a call that hung at least ZOMBIE_AFTER_S earlier (a lane
  no living work will ever free on its own in time to matter); `hung_holding_at_end` counts
  every slot held by a hung call, however recent.
- 429s: provider answers of 429 (a LiteLLM cooldown refusal never reaches the provider and
  is not one).
- Starvation: the longest time a call waited from its request to its first send to the
  provider (its age at the end if it was never sent).
- Fairness: Jain's index of successful calls per agent, within each class (agents of a class
  draw from the same distributions, so equal service gives near-equal counts); the top-level
  value is the mean over classes.
"""
from __future__ import annotations

import numpy as np

from .sim import Recorder
from .workload import CLASSES

ZOMBIE_AFTER_S = 60.0
SERIES_STEP_S = 5.0


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def jain(values: list[float]) -> float | None:
    if not values:
        return None
    x = np.asarray(values, dtype=float)
    denominator = len(x) * float(np.sum(x * x))
    return float(np.sum(x) ** 2 / denominator) if denominator > 0 else 1.0


def _latencies(recorder: Recorder, end: float, priority_class: str | None = None) -> list[float]:
    return [(r.completed_at if r.completed_at is not None else end) - r.requested_at
            for r in recorder.calls if priority_class is None or r.priority_class == priority_class]


def _max_wait(recorder: Recorder, end: float, priority_class: str | None = None) -> float:
    waits = [(r.first_sent_at if r.first_sent_at is not None else end) - r.requested_at
             for r in recorder.calls if priority_class is None or r.priority_class == priority_class]
    return max(waits, default=0.0)


def _class_summary(recorder: Recorder, end: float, priority_class: str, agents: list[str]) -> dict:
    lat = _latencies(recorder, end, priority_class)
    done_by_agent = {a: 0 for a in agents}
    for r in recorder.calls:
        if r.priority_class == priority_class and r.completed_at is not None:
            done_by_agent[r.agent_id] = done_by_agent.get(r.agent_id, 0) + 1
    completed = sum(done_by_agent.values())
    return {
        "p50_latency_s": percentile(lat, 50), "p95_latency_s": percentile(lat, 95),
        "p99_latency_s": percentile(lat, 99), "throughput_per_min": completed / (end / 60.0),
        "max_wait_s": _max_wait(recorder, end, priority_class),
        "jain_fairness": jain(list(done_by_agent.values())), "calls_requested": len(lat),
        "calls_completed": completed,
    }


def summarize(recorder: Recorder, agents_by_class: dict[str, list[str]]) -> dict:
    end = recorder.duration_s
    lat = _latencies(recorder, end)
    completed = sum(1 for r in recorder.calls if r.completed_at is not None)
    held = productive = 0.0
    zombies = hung_at_end = 0
    for hold in recorder.holds:
        stop = min(hold.ended_at if hold.ended_at is not None else end, end)
        held += max(0.0, stop - hold.started_at)
        productive += hold.productive_s
        if hold.ended_at is None and hold.hung_since is not None:
            hung_at_end += 1
            zombies += end - hold.hung_since >= ZOMBIE_AFTER_S
    per_class = {c: _class_summary(recorder, end, c, agents_by_class.get(c, [])) for c in CLASSES
                 if agents_by_class.get(c)}
    fairness = [v["jain_fairness"] for v in per_class.values() if v["jain_fairness"] is not None]
    attempts = recorder.provider_attempts
    return {
        "p50_latency_s": percentile(lat, 50), "p95_latency_s": percentile(lat, 95),
        "p99_latency_s": percentile(lat, 99),
        "lane_waste": 1.0 - productive / held if held > 0 else 0.0,
        "throughput_per_min": completed / (end / 60.0),
        "zombies": zombies, "hung_holding_at_end": hung_at_end,
        "rate_limited": len(recorder.rate_limited_at),
        "rate_limited_share": len(recorder.rate_limited_at) / attempts if attempts else 0.0,
        "provider_attempts": attempts,
        "max_wait_s": _max_wait(recorder, end),
        "jain_fairness": float(np.mean(fairness)) if fairness else None,
        "calls_requested": len(lat), "calls_completed": completed,
        "calls_pending_at_end": len(lat) - completed,
        "slot_seconds_held": held, "slot_seconds_productive": productive,
        "per_class": per_class, **recorder.notes,
    }


def series(recorder: Recorder) -> dict:
    """Time series for the plots: slot occupancy (all holds, and holds whose call hung), 429s
    per step, and the sorted latencies."""
    end = recorder.duration_s
    times = np.arange(0.0, end + 1e-9, SERIES_STEP_S)
    starts = np.array([h.started_at for h in recorder.holds]) if recorder.holds else np.zeros(0)
    ends = np.array([h.ended_at if h.ended_at is not None else np.inf for h in recorder.holds]) \
        if recorder.holds else np.zeros(0)
    hung = np.array([h.hung_since if h.hung_since is not None else np.inf for h in recorder.holds]) \
        if recorder.holds else np.zeros(0)
    occupancy = [int(np.sum((starts <= t) & (ends > t))) for t in times]
    hung_occupancy = [int(np.sum((hung <= t) & (ends > t))) for t in times]
    bins = np.arange(0.0, end + SERIES_STEP_S, SERIES_STEP_S)
    rate_limited, _ = np.histogram(recorder.rate_limited_at, bins=bins)
    return {"t": times.tolist(), "occupancy": occupancy, "hung_occupancy": hung_occupancy,
            "rate_limited_t": bins[:-1].tolist(), "rate_limited": rate_limited.tolist(),
            "latencies": sorted(_latencies(recorder, end))}

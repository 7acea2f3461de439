"""Metrics of one policy's run, computed once, the same way for every policy, from what the
simulator recorded (sim.Recorder). The report prints these definitions.

Per call (one logical call of the trace, across all its attempts):
- queue wait: from the moment the agent wanted the call (think or tool time over) to the
  send of the attempt that was answered: every queue, 429 and backoff, hung or cut attempt
  before it counts, wherever the policy keeps the call waiting (a gateway's queue or the
  client's retry loop); a call never answered counts with its age at the end.
- latency (end to end): from that moment to a successful answer, through every queue, 429,
  retry, hang and reap; a call still unanswered at the end counts with its age then (a lower
  bound, so a policy cannot look faster by never finishing its slow calls).
Per run (a chat answer, a batch job, a cron firing): run completion time, from its first
call's request to its last call's answer (unfinished runs: their age at the end).
- goodput: successful calls per minute, and their tokens (prompt + completion) per minute;
  `fraction_of_limit` = successful calls per minute / the scenario's physical limit: the
  minimum of lanes x 60 / mean service time, the RPM, and TPM / mean tokens per call (for a
  saturating provider, its plateau throughput / mean output tokens). It is computed on the
  trace's mean call, so a policy that serves a shorter-than-average mix can exceed 1;
  `lane_utilization` (slot-seconds in successful calls / (lanes x duration)) cannot.
- rate_limited: the provider's 429 answers per successful call (a refusal a gateway makes by
  itself never reaches the provider and is not one).
- failed_calls: times a call's error reached the agent after the policy's own retries.
- hung_lane_seconds: slot-seconds held while an attempt that will never answer was in
  flight (from its send, or from the moment a stream stalled, to its cut or the end).
- live_calls_cut: attempts the policy gave up on (timeout, reap) that would have answered.
- lane_waste: slot-seconds held while no provider attempt was in flight, over slot-seconds
  held. A slot is whatever bounds a policy's concurrency (a lane held for a whole run, a
  semaphore permit held per attempt, a worker); tool time inside a held slot, backoff sleeps
  and the client's reaction time are waste, for everyone alike.
- zombies: slots held at the end by an attempt hung for at least ZOMBIE_AFTER_S (60 s).
- stuck_agents: agents the policy stopped serving for good (AgentRM quarantines an agent
  after 3 consecutive reaps until an operator releases it; the work it had left is lost).
  Each such stop also counts as a failed call.
- quarantined_agents: agents AgentRM's core quarantined (AgentQuarantined: 3 consecutive
  reaps of turns the agent itself held); 0 for every baseline, which has no quarantine.
- jain: Jain's index of successful calls per agent, within each class.
- max_service_gap: VTC's measure of unfairness (Sheng et al., OSDI 2024): in each minute,
  among the agents of one class that had a call asked for and not yet answered at the
  minute's start (backlogged, wherever the call was waiting),
  the difference between the most and the least service received in that minute, in VTC's
  cost units (prompt + 2 x completion tokens); the largest over minutes and classes.
- over_admission: how far the requests sent to the provider exceed the token-bucket envelope
  of its RPM (at most L + L x (b - a) / 60 in any interval [a, b]), as a share of one
  minute's limit. 0 means the gateways never sent more requests than the provider could
  take. (Tokens are refunded to real usage as calls settle, so a gross token envelope would
  flag correct gateways; token over-admission shows as 429s instead.)
"""
from __future__ import annotations

import numpy as np

from app.stats import percentile

from .sim import Recorder
from .workload import CLASSES

SERIES_STEP_S = 5.0
SERVICE_GAP_WINDOW_S = 60.0


def jain(values: list[float]) -> float | None:
    if not values:
        return None
    x = np.asarray(values, dtype=float)
    denominator = len(x) * float(np.sum(x * x))
    return float(np.sum(x) ** 2 / denominator) if denominator > 0 else 1.0


def _latencies(recorder: Recorder, end: float, priority_class: str | None = None) -> list[float]:
    return [(r.completed_at if r.completed_at is not None else end) - r.requested_at
            for r in recorder.calls if priority_class is None or r.priority_class == priority_class]


def _waits(recorder: Recorder, end: float, priority_class: str | None = None) -> list[float]:
    return [(r.answered_sent_at if r.answered_sent_at is not None else end) - r.requested_at
            for r in recorder.calls if priority_class is None or r.priority_class == priority_class]


def _run_times(recorder: Recorder, end: float, priority_class: str | None = None) -> list[float]:
    return [(r.completed_at if r.completed_at is not None else end) - r.started_at
            for r in recorder.runs if priority_class is None or r.priority_class == priority_class]


def _cost(call) -> int:
    return call.prompt_tokens + 2 * call.output_tokens


def service_table(recorder: Recorder, end: float, priority_class: str,
                  agents: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per minute (rows) and agent of the class (columns, in ``agents``' order): the service
    finished in the minute, and whether the agent was backlogged at its start (asked for a
    call before it, not yet answered then)."""
    windows = max(1, int(end // SERVICE_GAP_WINDOW_S))
    index = {a: i for i, a in enumerate(agents)}
    served = np.zeros((windows, len(agents)))
    backlogged = np.zeros((windows, len(agents)), dtype=bool)
    for r in recorder.calls:
        if r.priority_class != priority_class or r.agent_id not in index:
            continue
        i = index[r.agent_id]
        if r.completed_at is not None and r.completed_at < windows * SERVICE_GAP_WINDOW_S:
            served[int(r.completed_at // SERVICE_GAP_WINDOW_S), i] += _cost(r.call)
        answered = r.completed_at if r.completed_at is not None else end
        first = int(np.ceil(r.requested_at / SERVICE_GAP_WINDOW_S))
        last = int(np.ceil(answered / SERVICE_GAP_WINDOW_S)) - 1
        backlogged[first:min(last, windows - 1) + 1, i] = True
    return served, backlogged


def service_gap(recorder: Recorder, end: float, priority_class: str, agents: list[str]) -> float:
    """The largest spread of per-minute service among the class's backlogged agents."""
    if not agents:
        return 0.0
    served, backlogged = service_table(recorder, end, priority_class, agents)
    windows = served.shape[0]
    gap = 0.0
    for w in range(windows):
        row = served[w][backlogged[w]]
        if len(row) >= 2:
            gap = max(gap, float(row.max() - row.min()))
    return gap


def envelope_excess(log: list[tuple[float, float]], limit_per_minute: float) -> float:
    """max over intervals [a, b] of (amount sent in [a, b]) - (L + L (b - a) / 60), in one pass:
    with S the running sum and f(t) = S(t) - L t / 60, the excess ends at b with
    f(b) - min over a <= b of (f(a) - amount at a) - L."""
    if not log:
        return 0.0
    rate = limit_per_minute / 60.0
    total = 0.0
    lowest = float("inf")
    worst = -float("inf")
    for t, amount in sorted(log):
        lowest = min(lowest, total - rate * t)      # the interval may start at this send
        total += amount
        worst = max(worst, total - rate * t - lowest - limit_per_minute)
    return max(0.0, worst)


def physical_limit(trace, lanes: int, rpm: int, tpm: int, saturation=None) -> dict:
    """The most successful calls per minute any policy could serve, and what binds it."""
    calls = [c for a in trace.agents for r in a.runs for c in r.calls]
    if not calls:
        return {"calls_per_min": 0.0, "binding": None}
    service = float(np.mean([c.provider_latency_s for c in calls]))
    tokens = float(np.mean([c.prompt_tokens + c.output_tokens for c in calls]))
    bounds = {"lanes": lanes * 60.0 / service, "rpm": float(rpm), "tpm": tpm / tokens}
    if saturation is not None:
        output = float(np.mean([c.output_tokens for c in calls]))
        bounds["provider_throughput"] = saturation.plateau_tokens_per_s() * 60.0 / output
    binding = min(bounds, key=bounds.__getitem__)
    return {"calls_per_min": bounds[binding], "binding": binding, "bounds": bounds,
            "mean_service_s": service, "mean_tokens_per_call": tokens,
            "demand_calls_per_min": len(calls) / (trace.duration_s / 60.0)}


def _class_summary(recorder: Recorder, end: float, priority_class: str, agents: list[str]) -> dict:
    lat = _latencies(recorder, end, priority_class)
    waits = _waits(recorder, end, priority_class)
    runs = _run_times(recorder, end, priority_class)
    done_by_agent = {a: 0 for a in agents}
    for r in recorder.calls:
        if r.priority_class == priority_class and r.completed_at is not None:
            done_by_agent[r.agent_id] = done_by_agent.get(r.agent_id, 0) + 1
    completed = sum(done_by_agent.values())
    return {
        "p50_latency_s": percentile(lat, 50), "p95_latency_s": percentile(lat, 95),
        "p99_latency_s": percentile(lat, 99),
        "p50_wait_s": percentile(waits, 50), "p95_wait_s": percentile(waits, 95),
        "p99_wait_s": percentile(waits, 99), "max_wait_s": max(waits, default=0.0),
        "run_completion_mean_s": float(np.mean(runs)) if runs else None,
        "run_completion_p95_s": percentile(runs, 95), "run_completion_p99_s": percentile(runs, 99),
        "throughput_per_min": completed / (end / 60.0),
        "jain_fairness": jain(list(done_by_agent.values())),
        "max_service_gap": service_gap(recorder, end, priority_class, agents),
        "calls_requested": len(lat), "calls_completed": completed,
    }


def summarize(recorder: Recorder, agents_by_class: dict[str, list[str]], limit: dict | None = None,
              rpm: int | None = None, tpm: int | None = None, lanes: int | None = None) -> dict:
    end = recorder.duration_s
    lat = _latencies(recorder, end)
    runs = _run_times(recorder, end)
    done = [r for r in recorder.calls if r.completed_at is not None]
    completed = len(done)
    minutes = end / 60.0
    held = productive = inflight = hung_s = 0.0
    hung_at_end = 0
    for hold in recorder.holds:
        stop = min(hold.ended_at if hold.ended_at is not None else end, end)
        held += max(0.0, stop - hold.started_at)
        productive += hold.productive_s
        inflight += hold.inflight_s
        hung_s += hold.hung_s
        if hold.ended_at is None and hold.hung_since is not None:
            hung_at_end += 1
    per_class = {c: _class_summary(recorder, end, c, agents_by_class.get(c, [])) for c in CLASSES
                 if agents_by_class.get(c)}
    fairness = [v["jain_fairness"] for v in per_class.values() if v["jain_fairness"] is not None]
    attempts = recorder.provider_attempts
    throughput = completed / minutes
    over = envelope_excess([(t, 1.0) for t, _ in recorder.sent_log], rpm) / rpm if rpm else 0.0
    return {
        # the keys of benchmark v2 (issue 10), the same for every policy
        "throughput_per_min": throughput,
        "goodput_tokens_per_min": sum(r.call.prompt_tokens + r.call.output_tokens for r in done) / minutes,
        "fraction_of_limit": throughput / limit["calls_per_min"] if limit and limit["calls_per_min"] else None,
        "p50_latency_s": percentile(lat, 50), "p95_latency_s": percentile(lat, 95),
        "p99_latency_s": percentile(lat, 99),
        "p95_wait_s": {c: v["p95_wait_s"] for c, v in per_class.items()},
        "p99_wait_s": {c: v["p99_wait_s"] for c, v in per_class.items()},
        "run_completion_mean_s": float(np.mean(runs)) if runs else None,
        "run_completion_p95_s": percentile(runs, 95), "run_completion_p99_s": percentile(runs, 99),
        "rate_limited": (len(recorder.rate_limited_at) / completed if completed
                         else float(len(recorder.rate_limited_at))),
        "failed_calls": sum(r.failed for r in recorder.calls),
        "hung_lane_seconds": hung_s,
        "live_calls_cut": recorder.live_calls_cut,
        "jain": {c: v["jain_fairness"] for c, v in per_class.items()},
        "max_service_gap": max((v["max_service_gap"] for v in per_class.values()), default=0.0),
        "lane_waste": 1.0 - inflight / held if held > 0 else 0.0,
        "zombies": recorder.zombies,
        "stuck_agents": recorder.stuck_agents,
        "quarantined_agents": recorder.quarantined_agents,
        "over_admission": over,
        # more detail
        "rate_limited_count": len(recorder.rate_limited_at),
        "rate_limited_share": len(recorder.rate_limited_at) / attempts if attempts else 0.0,
        "unproductive_share": 1.0 - productive / held if held > 0 else 0.0,
        "lane_utilization": productive / (lanes * end) if lanes else None,
        "hung_attempts_cut": recorder.hung_attempts_cut,
        "hung_holding_at_end": hung_at_end, "provider_attempts": attempts,
        "max_wait_s": max(_waits(recorder, end), default=0.0),
        "jain_fairness": float(np.mean(fairness)) if fairness else None,
        "calls_requested": len(lat), "calls_completed": completed,
        "calls_pending_at_end": len(lat) - completed,
        "runs_started": len(runs), "runs_completed": sum(1 for r in recorder.runs if r.completed_at is not None),
        "slot_seconds_held": held, "slot_seconds_inflight": inflight, "slot_seconds_productive": productive,
        "per_class": per_class, **recorder.notes,
    }


def series(recorder: Recorder) -> dict:
    """Time series and samples for the plots: slot occupancy (all holds, and holds whose call
    hung), 429s per step, successful calls per step, and latencies per class and run times."""
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
    completions, _ = np.histogram([r.completed_at for r in recorder.calls if r.completed_at is not None], bins=bins)
    return {"t": times.tolist(), "occupancy": occupancy, "hung_occupancy": hung_occupancy,
            "rate_limited_t": bins[:-1].tolist(), "rate_limited": rate_limited.tolist(),
            "completions": completions.tolist(),
            "latencies": sorted(_latencies(recorder, end)),
            "latencies_by_class": {c: sorted(_latencies(recorder, end, c)) for c in CLASSES},
            "run_times": sorted(_run_times(recorder, end))}

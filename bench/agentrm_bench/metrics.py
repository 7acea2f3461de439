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
  `fraction_of_limit` = successful calls per minute / the physical limit of THAT run: the
  tightest of what the provider enforces, each computed on the calls the run completed
  (`realised_limit`): its concurrency cap C (where it has one) x 60 / the mean service of the
  answered attempts (send to last byte), the RPM and TPM with the bucket's first full minute
  ((T + 60) / T x RPM; the same x TPM / mean prompt + completion tokens of the completed
  calls), and a saturating provider's plateau decode rate / their mean output tokens. No
  policy can exceed 1 (the proof is in `realised_limit`). Lanes a gateway chooses are not a
  physical limit: where the provider caps nothing, lanes do not enter it (`lane_utilization`,
  slot-seconds in successful calls / (lanes x duration), reads the lanes).
  `nominal_limit` (the scenario's header) is the same on the trace's mean call.
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
- jain: Jain's index of successful calls per agent, within each class (raw: an agent that
  asks for more gets more and lowers it). `jain_demand`: Jain's index of each agent's
  service (prompt + 2 x completion tokens of its answered calls) over its zero-wait demand
  (`workload.zero_wait_demand`: the same for the calls it would finish if nothing waited),
  within each class: 1 when every agent gets the same share of what it asks for.
- max_service_gap: VTC's measure of unfairness (Sheng et al., OSDI 2024): in each minute,
  among the agents of one class that had a call asked for and not yet answered at the
  minute's start (backlogged, wherever the call was waiting),
  the difference between the most and the least service received in that minute, in VTC's
  cost units (prompt + 2 x completion tokens); the largest over minutes and classes.
  `max_service_gap_5min`: the same over 5-minute windows. `service_gap_over_2u`: the largest
  gap over VTC's own bound 2U (Sheng et al., Theorem 4.4: two clients backlogged over an
  interval receive service within 2U of each other, U = the largest cost one request can
  have; here U = the largest prompt + 2 x max_tokens of the trace's calls). VTC's theorem
  holds for clients backlogged through the whole interval; an agent here has one call at a
  time and is backlogged only while it waits, so vtc itself can pass 1.
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
from .workload import CLASSES, Trace, zero_wait_demand

SERIES_STEP_S = 5.0
SERVICE_GAP_WINDOW_S = 60.0
SERVICE_GAP_LONG_WINDOW_S = 300.0


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
                  agents: list[str], window_s: float = SERVICE_GAP_WINDOW_S) -> tuple[np.ndarray, np.ndarray]:
    """Per window (rows, a minute unless `window_s` says otherwise) and agent of the class
    (columns, in ``agents``' order): the service finished in the window, and whether the
    agent was backlogged at its start (asked for a call before it, not yet answered then)."""
    windows = max(1, int(end // window_s))
    index = {a: i for i, a in enumerate(agents)}
    served = np.zeros((windows, len(agents)))
    backlogged = np.zeros((windows, len(agents)), dtype=bool)
    for r in recorder.calls:
        if r.priority_class != priority_class or r.agent_id not in index:
            continue
        i = index[r.agent_id]
        if r.completed_at is not None and r.completed_at < windows * window_s:
            served[int(r.completed_at // window_s), i] += _cost(r.call)
        answered = r.completed_at if r.completed_at is not None else end
        first = int(np.ceil(r.requested_at / window_s))
        last = int(np.ceil(answered / window_s)) - 1
        backlogged[first:min(last, windows - 1) + 1, i] = True
    return served, backlogged


def service_gap(recorder: Recorder, end: float, priority_class: str, agents: list[str],
                window_s: float = SERVICE_GAP_WINDOW_S) -> float:
    """The largest spread of per-window service among the class's backlogged agents."""
    if not agents:
        return 0.0
    served, backlogged = service_table(recorder, end, priority_class, agents, window_s)
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


def physical_limit(trace, lanes: int, rpm: int, tpm: int, saturation=None,
                   concurrency: int | None = None) -> dict:
    """The scenario's nominal limit: `realised_limit`'s terms on the trace's mean call (every
    call the trace holds, answered or not), for the report's header. `concurrency` is the
    provider's own cap on calls at once (None: it has none, and lanes do not bind it).
    Policies are judged against their own run's `realised_limit`, which none can exceed."""
    calls = [c for a in trace.agents for r in a.runs for c in r.calls]
    if not calls:
        return {"calls_per_min": 0.0, "binding": None}
    minutes = trace.duration_s / 60.0
    service = float(np.mean([c.provider_latency_s for c in calls]))
    tokens = float(np.mean([c.prompt_tokens + c.output_tokens for c in calls]))
    output = float(np.mean([c.output_tokens for c in calls]))
    bounds = _limit_terms(minutes, concurrency, rpm, tpm, saturation, service, tokens, output)
    binding = min(bounds, key=bounds.__getitem__)
    return {"calls_per_min": bounds[binding], "binding": binding, "bounds": bounds,
            "mean_service_s": service, "mean_tokens_per_call": tokens, "lanes": lanes,
            "physical": {"concurrency": concurrency, "rpm": rpm, "tpm": tpm,
                         "saturation": None if saturation is None else vars(saturation)},
            "demand_calls_per_min": len(calls) / minutes,
            "zero_wait_lane_load": sum(d.busy_s for d in zero_wait_demand(trace).values())
            / (lanes * trace.duration_s)}


def _limit_terms(minutes: float, concurrency: int | None, rpm: float, tpm: float, saturation,
                 service_s: float, tokens: float, output: float) -> dict[str, float]:
    burst = (minutes + 1.0) / minutes   # a bucket starts full: one more minute's worth
    terms = {"rpm": rpm * burst, "tpm": tpm * burst / tokens if tokens > 0 else float("inf")}
    if concurrency is not None and service_s > 0:
        terms["concurrency"] = concurrency * 60.0 / service_s
    if saturation is not None and output > 0:
        terms["provider_throughput"] = saturation.plateau_tokens_per_s() * 60.0 / output
    return terms


def realised_limit(recorder: Recorder, physical: dict) -> dict | None:
    """The most successful calls per minute a run could have served, given the calls it did
    complete (None: it completed none). With n calls completed in T seconds:
    - concurrency C: each completed call's answered attempt is admitted and open at the
      provider from its send to its last byte (`answered_at`; a policy may hand the answer to
      the agent later), and at most C attempts are open at once, so the sum of those service
      times s_i is at most C T; hence n / T <= C / mean(s_i).
    - RPM: the request bucket holds one minute's worth at the start and refills at RPM/60 per
      second, so at most RPM (T + 60) / 60 attempts are admitted; each completed call needs one.
    - TPM: the token bucket also starts full; an admission takes prompt + max_tokens and a
      settled call gives back max_tokens - completion (never more), so the tokens of the
      completed calls' prompts and completions sum to at most TPM (T + 60) / 60.
    - a saturating provider decodes at most X(max_running) tokens per second in all (X rises
      with the running count and stops at max_running), so the completed calls' output tokens
      sum to at most that times T.
    Each term divides such a total by the run's own mean per completed call, so the run's
    n / T is below every term and `fraction_of_limit` <= 1 for any policy and trace."""
    done = [r for r in recorder.calls if r.completed_at is not None]
    if not done:
        return None
    minutes = recorder.duration_s / 60.0
    service = float(np.mean([r.answered_at - r.answered_sent_at for r in done
                             if r.answered_at is not None and r.answered_sent_at is not None] or [0.0]))
    tokens = float(np.mean([r.call.prompt_tokens + r.call.output_tokens for r in done]))
    output = float(np.mean([r.call.output_tokens for r in done]))
    saturation = physical.get("saturation")
    if isinstance(saturation, dict):
        from .sim import Saturation
        saturation = Saturation(**saturation)
    terms = _limit_terms(minutes, physical.get("concurrency"), physical["rpm"], physical["tpm"], saturation,
                         service, tokens, output)
    binding = min(terms, key=terms.__getitem__)
    return {"calls_per_min": terms[binding], "binding": binding, "bounds": terms}


def vtc_unit(trace: Trace) -> float:
    """VTC's U for a trace: the largest cost one request can have (prompt + 2 x max_tokens)."""
    return max((c.prompt_tokens + 2 * c.max_output_tokens for a in trace.agents for r in a.runs for c in r.calls),
               default=0)


def _class_summary(recorder: Recorder, end: float, priority_class: str, agents: list[str],
                   demand: dict | None = None) -> dict:
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
        "jain_demand": _jain_demand(recorder, priority_class, agents, demand),
        "max_service_gap": service_gap(recorder, end, priority_class, agents),
        "max_service_gap_5min": service_gap(recorder, end, priority_class, agents, SERVICE_GAP_LONG_WINDOW_S),
        "calls_requested": len(lat), "calls_completed": completed,
    }


def _jain_demand(recorder: Recorder, priority_class: str, agents: list[str], demand: dict | None) -> float | None:
    """Jain's index of service / zero-wait demand over the class's agents that ask for any."""
    if demand is None:
        return None
    served = {a: 0.0 for a in agents}
    for r in recorder.calls:
        if r.priority_class == priority_class and r.completed_at is not None and r.agent_id in served:
            served[r.agent_id] += _cost(r.call)
    shares = [served[a] / demand[a].cost for a in agents if a in demand and demand[a].cost > 0]
    return jain(shares)


def summarize(recorder: Recorder, agents_by_class: dict[str, list[str]], limit: dict | None = None,
              rpm: int | None = None, tpm: int | None = None, lanes: int | None = None,
              trace: Trace | None = None) -> dict:
    end = recorder.duration_s
    demand = zero_wait_demand(trace) if trace is not None else None
    unit = vtc_unit(trace) if trace is not None else 0.0
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
    per_class = {c: _class_summary(recorder, end, c, agents_by_class.get(c, []), demand) for c in CLASSES
                 if agents_by_class.get(c)}
    realised = realised_limit(recorder, limit["physical"]) if limit and "physical" in limit else None
    gap = max((v["max_service_gap"] for v in per_class.values()), default=0.0)
    fairness = [v["jain_fairness"] for v in per_class.values() if v["jain_fairness"] is not None]
    attempts = recorder.provider_attempts
    throughput = completed / minutes
    over = envelope_excess([(t, 1.0) for t, _ in recorder.sent_log], rpm) / rpm if rpm else 0.0
    return {
        # the keys of benchmark v2 (issue 10), the same for every policy
        "throughput_per_min": throughput,
        "goodput_tokens_per_min": sum(r.call.prompt_tokens + r.call.output_tokens for r in done) / minutes,
        "fraction_of_limit": (throughput / realised["calls_per_min"] if realised
                              else 0.0 if limit and "physical" in limit else None),
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
        "max_service_gap": gap,
        "jain_demand": {c: v["jain_demand"] for c, v in per_class.items()},
        "max_service_gap_5min": max((v["max_service_gap_5min"] for v in per_class.values()), default=0.0),
        "service_gap_over_2u": gap / (2.0 * unit) if unit > 0 else None,
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
        "realised_limit": realised, "nominal_fraction_of_limit": (
            throughput / limit["calls_per_min"] if limit and limit.get("calls_per_min") else None),
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

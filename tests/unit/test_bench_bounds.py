"""The P95 bounds of agentrm_bench.bounds: the clairvoyant orders admit in the order their rule
says, over gateway-fifo's admission, and the zero-wait and service figures are what the calls'
service times make them. Tiny traces on one lane, exact send times."""
from __future__ import annotations

import pytest

from agentrm_bench import bounds
from agentrm_bench.harness import run_policy
from agentrm_bench.policies import POLICY_NAMES, known
from agentrm_bench.workload import (
    BATCH,
    INTERACTIVE,
    AgentScript,
    CallSpec,
    RunSpec,
    Trace,
    WorkloadParams,
)

BIG_RPM, BIG_TPM = 10_000, 10_000_000


def call(cid: str, latency: float, first: float = 0.5, tool: float = 0.0) -> CallSpec:
    return CallSpec(call_id=cid, prompt_tokens=100, max_output_tokens=1000, output_tokens=100,
                    provider_latency_s=latency, first_chunk_s=first, tool_after_s=tool)


def agent(aid: str, *calls: CallSpec, at: float = 0.0, cls: str = INTERACTIVE) -> AgentScript:
    return AgentScript(aid, cls, (RunSpec(idle_before_s=at, not_before_s=0.0, calls=calls),))


def trace(*agents: AgentScript) -> Trace:
    return Trace(WorkloadParams(agents=len(agents), minutes=10.0, seed=1), agents)


def sent(run) -> list[tuple[str, float]]:
    return sorted(((r.call.call_id, r.first_sent_at) for r in run.recorder.calls), key=lambda x: x[1])


# One lane, busy with h (0 to 10). While it runs, s (service 2, asked at 1), m (service 5, at 2)
# and l (service 9, at 3) wait.
WAITING = trace(agent("h", call("h1", 10.0)), agent("s", call("s1", 2.0), at=1.0),
                agent("m", call("m1", 5.0), at=2.0), agent("l", call("l1", 9.0), at=3.0))


def test_sjf_sends_the_shortest_true_service_first():
    run = run_policy("bound-clairvoyant@sjf", WAITING, 1, BIG_RPM, BIG_TPM)
    assert sent(run) == [("h1", 0.0), ("s1", 10.0), ("m1", 12.0), ("l1", 17.0)]


def test_edf1_sends_the_earliest_request_time_minus_true_service_first():
    # keys: s 1 - 2 = -1, m 2 - 5 = -3, l 3 - 9 = -6: the longest call first here.
    run = run_policy("bound-clairvoyant@edf1", WAITING, 1, BIG_RPM, BIG_TPM)
    assert sent(run) == [("h1", 0.0), ("l1", 10.0), ("m1", 19.0), ("s1", 24.0)]
    # with K = 0.25 the request time wins: s -0.5, m 0.75, l 0.75 (m asked first, at the same key: seq)
    run = run_policy("bound-clairvoyant@edf0.25", WAITING, 1, BIG_RPM, BIG_TPM)
    assert sent(run) == [("h1", 0.0), ("s1", 10.0), ("m1", 12.0), ("l1", 17.0)]


def test_mean_edf_knows_only_the_class_mean_of_calls_answered_so_far():
    # b1 (batch, 8 s) and i1 (interactive, 2 s) answer first, on two lanes; then h holds one
    # lane 9.5 to 29.5 and g the other 9.5 to 19.5; b2 (batch, true service 1 s, asked at 11)
    # and i2 (interactive, true 7 s, asked at 10) wait. mean-edf1 keys them by their class's
    # mean: b2 11 - 8 = 3 before i2 10 - 2 = 8, though b2 is the shorter call; edf1 (true
    # service) keys b2 11 - 1 = 10 after i2 10 - 7 = 3.
    t = trace(agent("b", call("b1", 8.0, tool=3.0), call("b2", 1.0), cls=BATCH),
              agent("i", call("i1", 2.0, tool=8.0), call("i2", 7.0)),
              agent("h", call("h1", 20.0), at=9.5), agent("g", call("g1", 10.0), at=9.5))
    mean = sent(run_policy("bound-clairvoyant@mean-edf1", t, 2, BIG_RPM, BIG_TPM))
    true = sent(run_policy("bound-clairvoyant@edf1", t, 2, BIG_RPM, BIG_TPM))
    assert mean[-2:] == [("b2", 19.5), ("i2", 20.5)]
    assert true[-2:] == [("i2", 19.5), ("b2", 26.5)]


def test_the_bound_shares_gateway_fifos_admission():
    # Without waiting the clairvoyant gateway and gateway-fifo send at the same instants.
    t = trace(agent("a", call("a1", 3.0), call("a2", 1.0, tool=1.0)), agent("b", call("b1", 2.0), at=0.5))
    assert sent(run_policy("bound-clairvoyant@edf1", t, 4, BIG_RPM, BIG_TPM)) == \
        sent(run_policy("gateway-fifo@30s", t, 4, BIG_RPM, BIG_TPM))


def test_service_p95_and_zero_wait_are_the_calls_own_service():
    run = run_policy("bound-clairvoyant@edf1", WAITING, 1, BIG_RPM, BIG_TPM)
    # services 10, 9, 5, 2: numpy's linear P95 of them
    assert bounds.service_p95(run.recorder) == pytest.approx(9.85)
    zero = run_policy("gateway-fifo@600s", WAITING, bounds.UNLIMITED_LANES, bounds.UNLIMITED_RPM,
                      bounds.UNLIMITED_TPM)
    assert [when for _, when in sent(zero)] == [0.0, 1.0, 2.0, 3.0]


def test_the_bound_is_runnable_by_name_and_never_a_baseline():
    assert known("bound-clairvoyant@edf1") and known("bound-clairvoyant@sjf")
    assert known("bound-clairvoyant@mean-edf1") and known("bound-clairvoyant@prompt-edf1")
    assert not known("bound-clairvoyant") and not known("bound-clairvoyant@edf0") \
        and not known("bound-clairvoyant@lifo")
    assert not any(name.startswith("bound-") for name in POLICY_NAMES)
    with pytest.raises(ValueError, match="sjf"):
        bounds.parse_order("edf-1")


def test_main_refuses_an_unknown_order_and_writes_nothing(tmp_path, capsys):
    assert bounds.main(["--seed", "1", "--orders", "lifo", "--out", str(tmp_path)]) == 2
    assert "lifo" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_report_labels_each_column_by_what_its_order_knows():
    row = {"seed": 3, "p95_s": {"no-gateway": 80.0, "agentrm": 40.0, "zero-wait": 16.0, "agentrm-service": 18.0,
                                "bound-clairvoyant@edf1": 36.0, "bound-clairvoyant@mean-edf1": 40.0,
                                "bound-clairvoyant@prompt-edf1": 39.0}}
    row["vs_no_gateway"] = {k: v / 80.0 for k, v in row["p95_s"].items()}
    text = bounds.to_markdown({"scenario": "provider-bound", "seeds": [row]})
    # EDF is no bound on a P95 under token buckets with release times: a yardstick.
    assert "yardstick: edf1 (clairvoyant)" in text and "yardstick: mean-edf1 (history only)" in text
    assert "yardstick: prompt-edf1 (true first token)" in text and "floor: zero wait" in text
    assert "bound: edf1" not in text
    assert "| 3 | 80.0 | 40.0 (0.50x) | 16.0 (0.20x) | 18.0 (0.23x) | 36.0 (0.45x) |" in text


def test_late_edf_serves_last_the_calls_that_miss_t_anyway():
    # T = 12: at 10, l (asked at 3, service 9) cannot answer by 15 (its latest start was 6),
    # nor m (asked at 2, service 5: latest start 9); s (asked at 1, service 2: latest start 11)
    # still can, so it goes first, then the late ones in the order they became late (l, m).
    run = run_policy("bound-clairvoyant@late-edf12", WAITING, 1, BIG_RPM, BIG_TPM)
    assert sent(run) == [("h1", 0.0), ("s1", 10.0), ("l1", 12.0), ("m1", 21.0)]


def test_the_report_shows_what_each_order_costs():
    costs = {"p99_latency_s": 30.5, "max_wait_s": 1619.3, "jain_min": 0.719, "max_service_gap": 1.0,
             "throughput_per_min": 1.0}
    row = {"seed": 15, "p95_s": {"no-gateway": 72.5, "bound-clairvoyant@late-edf36": 24.6},
           "costs": {"bound-clairvoyant@late-edf36": costs}}
    row["vs_no_gateway"] = {k: v / 72.5 for k, v in row["p95_s"].items()}
    text = bounds.to_markdown({"scenario": "provider-bound", "seeds": [row]})
    assert "| 15 | 30.5 / 1619 / 0.719 |" in text


def test_srpt_over_runs_sends_the_run_with_the_least_true_work_left_first():
    # h holds the lane to 10; then x (one call of 5 s left) goes before y (two calls of 2 s and
    # 4 s: 6 s left), though y asked first.
    t = trace(agent("h", call("h1", 10.0)), agent("y", call("y1", 2.0), call("y2", 4.0), at=1.0),
              agent("x", call("x1", 5.0), at=2.0))
    run = run_policy("bound-clairvoyant@srpt-run", t, 1, BIG_RPM, BIG_TPM)
    assert [c for c, _ in sent(run)][:3] == ["h1", "x1", "y1"]
    # weighted: interactive runs' work counts a quarter, so y's interactive run beats x's batch one
    t = trace(agent("h", call("h1", 10.0)), agent("y", call("y1", 2.0), call("y2", 4.0), at=1.0),
              agent("x", call("x1", 5.0), at=2.0, cls=BATCH))
    run = run_policy("bound-clairvoyant@wsrpt-run4", t, 1, BIG_RPM, BIG_TPM)
    assert [c for c, _ in sent(run)][:3] == ["h1", "y1", "x1"]


def test_agent_edf_knows_only_the_agents_own_answered_calls():
    order = bounds.parse_order("agent-edf1")
    assert order == ("agent-edf", 1.0) and known("bound-clairvoyant@agent-edf1")


def test_littles_law_bounds_the_mean_wait_of_a_saturated_closed_loop():
    # 4 agents, 1 lane, 10 s calls back to back, no time away: the lane serves one call per 10 s,
    # so each agent waits 30 s a call in the long run; the bound says exactly that.
    assert bounds.little_wait_bound(4, 10.0, 0.0, 1, 0.0) == pytest.approx(30.0)
    assert bounds.little_wait_bound(4, 10.0, 0.0, 2, 0.5) == pytest.approx(30.0)   # half of 2 lanes
    assert bounds.little_wait_bound(1, 10.0, 5.0, 1, 0.0) == 0.0                    # never waits
    t = Trace(WorkloadParams(agents=4, minutes=60.0, seed=1),
              tuple(AgentScript(f"a{i}", INTERACTIVE, (RunSpec(0.0, 0.0, tuple(call(f"a{i}-{k}", 10.0)
                                                                                for k in range(400))),))
                    for i in range(4)))
    run = run_policy("gateway-fifo@600s", t, 1, BIG_RPM, BIG_TPM)
    waits = [r.answered_sent_at - r.requested_at for r in run.recorder.calls if r.answered_sent_at is not None]
    assert sum(waits) / len(waits) == pytest.approx(30.0, rel=0.02)
    # the P95 form: mean <= 0.95 P95 + 0.05 max
    assert bounds.p95_from_mean(30.0, 100.0) == pytest.approx(25.0 / 0.95)


def test_the_run_floor_is_below_every_policys_run_completion():
    from dataclasses import replace as _replace

    from agentrm_bench.scenarios import SCENARIOS
    sc = SCENARIOS["runs"]
    sc = _replace(sc, lanes=8, params={**sc.params, "agents": 50, "minutes": 4.0})
    result = bounds.run_bounds(sc, 2, ("srpt-run",), ("gateway-fifo@30s", "las"))
    for name, mean in result["run_mean_s"].items():
        assert result["floor_run_mean_s"][name] <= mean + 1e-9, name


def test_the_timeout_frontier_runs_gateway_fifo_at_each_timeout():
    from dataclasses import replace as _replace

    from agentrm_bench.scenarios import SCENARIOS
    sc = SCENARIOS["hangs"]
    sc = _replace(sc, params={**sc.params, "agents": 30, "minutes": 4.0}, outages=())
    result = bounds.timeout_frontier(sc, 1, (5.0, 120.0), ("agentrm",))
    short, long_ = result["frontier"]["5"], result["frontier"]["120"]
    assert short["live_calls_cut"] >= long_["live_calls_cut"]
    assert short["hung_lane_seconds"] < long_["hung_lane_seconds"]
    assert "agentrm" in result["policies"]
    assert "5s" in bounds.frontier_markdown({"scenario": "hangs", "seeds": [result]})

"""las: least attained service over runs, over the central gateway. Tiny traces on one lane,
exact send times: the waiting call of the run with the fewest lane-seconds so far goes next."""
from __future__ import annotations

from agentrm_bench.harness import run_policy
from agentrm_bench.policies import POLICY_NAMES
from agentrm_bench.workload import INTERACTIVE, AgentScript, CallSpec, RunSpec, Trace, WorkloadParams

BIG_RPM, BIG_TPM = 10_000, 10_000_000


def call(cid: str, latency=1.0, tool=0.0, **fault) -> CallSpec:
    return CallSpec(call_id=cid, prompt_tokens=100, max_output_tokens=1000, output_tokens=100,
                    provider_latency_s=latency, first_chunk_s=0.5, tool_after_s=tool, **fault)


def agent(aid: str, *calls: CallSpec, at: float = 0.0) -> AgentScript:
    return AgentScript(aid, INTERACTIVE, (RunSpec(idle_before_s=at, not_before_s=0.0, calls=calls),))


def sent(run) -> list[tuple[str, float]]:
    return sorted(((r.call.call_id, r.first_sent_at) for r in run.recorder.calls), key=lambda x: x[1])


def test_the_run_with_the_least_attained_service_goes_first_whatever_its_arrival():
    # a has had 3 s of service when its second call comes (at 3.5 s, after a 0.5 s tool);
    # b (1 s so far) and c (nothing yet) wait behind the lane's current call; c goes first.
    t = Trace(WorkloadParams(agents=3, minutes=5.0), (
        agent("a", call("a1", 3.0, tool=0.5), call("a2", 1.0)),
        agent("b", call("b1", 1.0, tool=0.1), call("b2", 1.0), at=0.1),
        agent("c", call("c1", 1.0), at=4.0)))
    run = run_policy("las", t, 1, BIG_RPM, BIG_TPM)
    assert sent(run) == [("a1", 0.0), ("b1", 3.0), ("c1", 4.0), ("b2", 5.0), ("a2", 6.0)]


def test_a_cut_attempt_counts_as_service_received():
    # a's first call hangs and is cut at 30 s: 30 lane-seconds attained; b's fresh run goes first.
    t = Trace(WorkloadParams(agents=2, minutes=5.0), (
        agent("a", call("a1", 1.0, fault="hang"), call("a2", 1.0)),
        agent("b", call("b1", 1.0, tool=0.0), at=29.0)))
    run = run_policy("las", t, 1, BIG_RPM, BIG_TPM)
    order = [cid for cid, _ in sent(run)]
    assert order.index("b1") < order.index("a2")


def test_las_is_a_baseline_of_every_comparison():
    assert "las" in POLICY_NAMES and "plas" in POLICY_NAMES

"""plas: Autellix's program-level least-attained-service order, non-preemptive, over the
central gateway. Each test plays a tiny trace and checks the exact admission times that follow
from its rules (plas.py): a call waits in the queue of its run's attained service (seconds of
completed calls; boundaries 2, 4, 8, ..., 64 s), higher queues first and FIFO within one, and a
call whose run has waited BETA = 8 times its service is promoted to the top queue."""
from __future__ import annotations

import random

import pytest

from agentrm_bench.harness import run_policy
from agentrm_bench.policies.plas import BETA, BOUNDARIES_S, PlasOrder
from agentrm_bench.workload import INTERACTIVE, AgentScript, CallSpec, RunSpec, Trace, WorkloadParams

BIG_RPM, BIG_TPM = 10_000, 10_000_000


def call(cid: str, latency=1.0, first=0.5, tool=0.0, **fault) -> CallSpec:
    return CallSpec(call_id=cid, prompt_tokens=100, max_output_tokens=1000, output_tokens=100,
                    provider_latency_s=latency, first_chunk_s=first, tool_after_s=tool, **fault)


def agent(aid: str, *calls: CallSpec, at: float = 0.0) -> AgentScript:
    return AgentScript(aid, INTERACTIVE, (RunSpec(idle_before_s=at, not_before_s=0.0, calls=calls),))


def trace(*agents: AgentScript) -> Trace:
    return Trace(WorkloadParams(agents=len(agents), minutes=10.0, seed=1), agents)


def sent(run) -> list[tuple[str, float]]:
    """(call, first send time) of every call, in sending order."""
    return sorted(((r.call.call_id, r.first_sent_at) for r in run.recorder.calls), key=lambda x: x[1])


def test_queues_are_the_doubling_boundaries_in_seconds():
    assert BOUNDARIES_S == (2.0, 4.0, 8.0, 16.0, 32.0, 64.0) and BETA == 8.0
    assert [PlasOrder.level(s) for s in (0.0, 1.99, 2.0, 5.0, 10.0, 63.9, 64.0, 1e6)] == [0, 0, 1, 2, 3, 5, 6, 6]


# One lane. b's run has attained 5 s when its second call starts waiting at 5 (queue 2); x, a
# new run, took the lane at 5 until 15; i, a new run (queue 0), starts waiting at 6.
LAS = trace(agent("b", call("b1", latency=5.0), call("b2", latency=5.0), call("b3", latency=5.0)),
            agent("x", call("x1", latency=10.0), at=1.0),
            agent("i", call("i1"), at=6.0))


def test_the_run_with_the_least_attained_service_goes_first():
    run = run_policy("plas", LAS, 1, BIG_RPM, BIG_TPM)
    assert sent(run) == [("b1", 0.0), ("x1", 5.0), ("i1", 15.0), ("b2", 16.0), ("b3", 21.0)]
    fifo = run_policy("gateway-fifo", LAS, 1, BIG_RPM, BIG_TPM)
    assert sent(fifo)[2:4] == [("b2", 15.0), ("i1", 20.0)]
    assert run.policy.order.service == {} and run.recorder.notes["plas_promotions"] == 0  # runs over: state dropped


def test_a_call_that_waited_beta_times_its_runs_service_is_promoted_to_the_top_queue():
    # b's run attains 3 s by 3 (queue 1), and its second call waits from 3 behind x (3 to 103).
    # At 3 + 8 x 3 = 27 it is promoted to the tail of the top queue: after i (waiting since 10),
    # before j (since 30). Without the promotion j would go before it.
    run = run_policy("plas", trace(agent("b", call("b1", latency=3.0), call("b2", latency=3.0)),
                                   agent("x", call("x1", latency=100.0), at=1.0),
                                   agent("i", call("i1"), at=10.0),
                                   agent("j", call("j1"), at=30.0)), 1, BIG_RPM, BIG_TPM)
    assert sent(run) == [("b1", 0.0), ("x1", 3.0), ("i1", 103.0), ("b2", 104.0), ("j1", 107.0)]
    assert run.recorder.notes["plas_promotions"] == 1


def test_attained_service_counts_completed_calls_only():
    # a's first attempt hangs: it is cut at 30 s (the gateway's timeout) and adds nothing; the
    # retry, sent 30 + b later, takes 1 s: the run has attained exactly 1 s, in queue 0.
    b = 0.5 * (1 - 0.25 * random.Random("1/jitter").random())
    run = run_policy("plas", trace(agent("a", call("a1", fault="hang", tool=100.0), call("a2"))),
                     4, BIG_RPM, BIG_TPM, until=60.0)
    holds = [(h.started_at, h.ended_at) for h in run.recorder.holds]
    assert holds == [(0.0, 30.0), (pytest.approx(30 + b), pytest.approx(31 + b))]
    assert run.policy.order.service == {"a-r0": pytest.approx(1.0)}
    assert run.policy.order.waited == {"a-r0": 0.0}


def test_plas_has_no_variants():
    with pytest.raises(ValueError, match="no variants"):
        run_policy("plas@30s", LAS, 1, BIG_RPM, BIG_TPM)

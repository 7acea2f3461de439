"""vtc: Virtual Token Counter fair queuing per agent over the central gateway. Each test plays
a tiny trace and checks exact admission times and counters that follow from VTC's rules
(Ying1123/VTC-artifact VTCReqQueue): the waiting agent with the smallest counter goes next,
input costs 1 and output 2 per token, and an agent that starts waiting is lifted to the
smallest counter among the others waiting."""
from __future__ import annotations

import pytest

from agentrm_bench.harness import run_policy
from agentrm_bench.workload import INTERACTIVE, AgentScript, CallSpec, RunSpec, Trace, WorkloadParams

BIG_RPM, BIG_TPM = 10_000, 10_000_000


def call(cid: str, prompt=100, max_out=1000, out=100, latency=1.0, first=0.5, tool=0.0, **fault) -> CallSpec:
    return CallSpec(call_id=cid, prompt_tokens=prompt, max_output_tokens=max_out, output_tokens=out,
                    provider_latency_s=latency, first_chunk_s=first, tool_after_s=tool, **fault)


def agent(aid: str, *calls: CallSpec, at: float = 0.0) -> AgentScript:
    return AgentScript(aid, INTERACTIVE, (RunSpec(idle_before_s=at, not_before_s=0.0, calls=calls),))


def trace(*agents: AgentScript) -> Trace:
    return Trace(WorkloadParams(agents=len(agents), minutes=10.0, seed=1), agents)


def sent(run) -> list[tuple[str, float]]:
    """(agent, first send time) of every call, in sending order."""
    out = []
    for record in run.recorder.calls:
        out.append((record.agent_id, record.first_sent_at))
    return sorted(out, key=lambda x: x[1])


# One lane. h is served a 5,000-token prompt at 0 (counter 5,000 + 2 x 100 = 5,200), l a
# 100-token one at 2 (counter 300), each while nobody waits. x holds the lane from 10 to 20;
# y (new, counter 0) starts waiting at 10.5, h at 11, l at 12.
FAIRNESS = trace(agent("h", call("h1", prompt=5000, tool=10.0), call("h2")),
                 agent("l", call("l1", tool=9.0), call("l2"), at=2.0),
                 agent("x", call("x1", out=10, latency=10.0), at=10.0),
                 agent("y", call("y1"), at=10.5))


def test_the_waiting_agent_with_the_smallest_counter_goes_first_not_the_one_that_came_first():
    run = run_policy("vtc", FAIRNESS, 1, BIG_RPM, BIG_TPM)
    # At 20: y (0), then l (300), then h (5,200), although h started waiting before l.
    assert sent(run) == [("h", 0.0), ("l", 2.0), ("x", 10.0), ("y", 20.0), ("l", 21.0), ("h", 22.0)]
    fifo = run_policy("gateway-fifo", FAIRNESS, 1, BIG_RPM, BIG_TPM)
    assert sent(fifo)[3:] == [("y", 20.0), ("h", 21.0), ("l", 22.0)]


def test_counters_charge_one_per_input_token_and_two_per_output_token():
    run = run_policy("vtc", FAIRNESS, 1, BIG_RPM, BIG_TPM)
    assert run.policy.order.counter == {
        "h": 5000 + 2 * 100 + 100 + 2 * 100,
        "l": 100 + 2 * 100 + 100 + 2 * 100,
        "x": 100 + 2 * 10,
        "y": 100 + 2 * 100,
    }
    assert run.recorder.notes["vtc_lifts"] == 0   # everyone started waiting at or above the minimum


def test_an_agent_that_starts_waiting_is_lifted_to_the_smallest_waiting_counter():
    # h (counter 5,200 after its first call) waits from 3 while x holds the only lane; n, new
    # with counter 0, starts waiting at 4 and is lifted to 5,200: it banks no credit for having
    # been idle, and the tie goes to the agent seen first, h.
    run = run_policy("vtc", trace(agent("h", call("h1", prompt=5000, tool=2.0), call("h2")),
                                  agent("x", call("x1", out=10, latency=10.0), at=2.0),
                                  agent("n", call("n1"), at=4.0)), 1, BIG_RPM, BIG_TPM)
    assert sent(run) == [("h", 0.0), ("x", 2.0), ("h", 12.0), ("n", 13.0)]
    assert run.policy.order.counter["n"] == 5200 + 100 + 2 * 100
    assert run.recorder.notes["vtc_lifts"] == 1


def test_a_cut_stream_is_charged_the_output_it_streamed_and_a_hang_none():
    # a streams 150 tokens over 1.5 s (100 tokens/s) and stalls 0.6 s in: 60 tokens seen, cut
    # at 0.5 + 0.6 + 30 s. b hangs and is cut at 30 s with no output. Both retries are answered.
    run = run_policy("vtc", trace(agent("a", call("a1", prompt=1000, out=150, latency=2.0, fault="stall",
                                                  stall_after_s=0.6)),
                                  agent("b", call("b1", prompt=500, fault="hang"))), 4, BIG_RPM, BIG_TPM)
    holds = sorted((h.started_at, h.ended_at) for h in run.recorder.holds)
    assert holds[0] == (0.0, pytest.approx(30.0)) and holds[1] == (0.0, pytest.approx(31.1))
    assert run.policy.order.counter == {"a": 1000 + 2 * 60 + 1000 + 2 * 150, "b": 500 + 500 + 2 * 100}
    assert all(r.completed_at is not None and r.attempts == 2 for r in run.recorder.calls)


def test_a_429_is_not_service_its_input_charge_is_taken_back():
    # Two replicas believe they each have the RPM of 1: a1's first attempt draws a 429 (retry-
    # after 60) and its counter ends as if it had been served once.
    run = run_policy("vtc", trace(agent("a0", call("c0", prompt=1000)), agent("a1", call("c1", prompt=1000))),
                     4, 1, BIG_TPM, replicas=2)
    second = run.policy.replicas[1]
    assert run.recorder.calls[1].rate_limited == 1
    assert run.recorder.calls[1].first_sent_at == 0.0 and run.recorder.calls[1].completed_at == pytest.approx(61.2)
    assert second.order.counter == {"a1": 1000 + 2 * 100}


def test_vtc_has_no_variants():
    with pytest.raises(ValueError, match="no variants"):
        run_policy("vtc@30s", FAIRNESS, 1, BIG_RPM, BIG_TPM)

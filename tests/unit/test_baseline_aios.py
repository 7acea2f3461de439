"""aios: each behaviour on a tiny hand-made trace, with the times that follow from AIOS's
constants (policies/aios.py cites them): the loop sleeps 1 s, collects for 0.1 s after the
queue empties, runs the batch to its end and only then answers its calls."""
from __future__ import annotations

import pytest

from agentrm_bench.harness import run_policy
from agentrm_bench.workload import INTERACTIVE, AgentScript, CallSpec, RunSpec, Trace, WorkloadParams

RPM, TPM = 10_000, 10_000_000


def call(cid: str, latency: float = 2.0, tool: float = 0.0, **fault) -> CallSpec:
    return CallSpec(call_id=cid, prompt_tokens=100, max_output_tokens=200, output_tokens=100,
                    provider_latency_s=latency, first_chunk_s=min(0.5, latency), tool_after_s=tool, **fault)


def agent(aid: str, *calls: CallSpec, at: float = 0.0) -> AgentScript:
    return AgentScript(aid, INTERACTIVE, (RunSpec(idle_before_s=0.0, not_before_s=at, calls=tuple(calls)),))


def run(*agents: AgentScript, lanes: int = 16, until: float = 1800.0, **kw):
    trace = Trace(WorkloadParams(minutes=until / 60.0), tuple(agents))
    return run_policy("aios", trace, lanes, kw.pop("rpm", RPM), TPM, **kw).recorder


def by_agent(rec):
    return {r.agent_id: r for r in rec.calls}


def test_a_batch_answers_all_its_calls_when_its_slowest_is_done():
    rec = run(agent("fast", call("f", latency=0.5)), agent("slow", call("s", latency=2.0)))
    calls = by_agent(rec)
    # first drain at 1 s, collection ends 0.1 s later, the batch runs from 1.1 s
    assert calls["fast"].first_sent_at == calls["slow"].first_sent_at == pytest.approx(1.1)
    assert calls["fast"].completed_at == calls["slow"].completed_at == pytest.approx(3.1)
    assert [h.ended_at for h in rec.holds] == [pytest.approx(1.6), pytest.approx(3.1)]  # threads end on their own


def test_one_hung_call_stalls_every_later_llm_call_for_the_sdk_timeout():
    rec = run(agent("hung", call("h", latency=1.0, fault="hang")), agent("later", call("l", latency=1.0), at=5.0))
    calls = by_agent(rec)
    # sent at 1.1, cut at 601.1 by the 600 s timeout, retried after 0.5 s x (0.75..1), answered 1 s later
    assert calls["hung"].attempts == 2 and rec.hung_attempts_cut == 1
    assert 601.1 + 0.375 + 1.0 <= calls["hung"].completed_at <= 601.1 + 0.5 + 1.0
    # the call asked for at 5 s waits for that batch, then 1 s of sleep and 0.1 s of collection
    assert calls["later"].first_sent_at == pytest.approx(calls["hung"].completed_at + 1.1)


def test_in_an_outage_each_attempt_waits_600_s_and_the_third_failure_reaches_the_agent():
    rec = run(agent("a", call("c", latency=1.0)), outages=((0.0, 5000.0),), until=1900.0)
    (record,) = rec.calls
    assert record.failed == 1 and rec.hung_attempts_cut == 3
    first = rec.holds[0]
    # three 600 s attempts with two SDK backoffs (0.5 and 1 s, minus up to 25 %)
    assert 1801.1 + 0.375 + 0.75 <= first.ended_at <= 1801.1 + 0.5 + 1.0
    # the agent asks again 1 s later, just in time for the next drain; collected 0.1 s later
    assert record.attempts == 4 and rec.sent_log[3][0] == pytest.approx(first.ended_at + 1.1)


def test_a_batch_runs_at_most_lanes_calls_at_once_and_ends_with_the_last():
    rec = run(*(agent(f"a{k}", call(f"c{k}", latency=10.0)) for k in range(3)), lanes=2)
    sent = sorted(r.first_sent_at for r in rec.calls)
    assert sent == [pytest.approx(1.1), pytest.approx(1.1), pytest.approx(11.1)]
    assert [r.completed_at for r in rec.calls] == [pytest.approx(21.1)] * 3


def test_tool_calls_run_one_at_a_time_for_the_whole_kernel():
    rec = run(agent("a", call("a1", latency=0.5, tool=10.0), call("a2", latency=0.5)),
              agent("b", call("b1", latency=1.0, tool=10.0), call("b2", latency=1.0)))
    second = {r.agent_id: r for r in rec.calls if r.call.call_id in ("a2", "b2")}
    # both answered at 2.1; a's tool runs 2.1-12.1, b's waits for it: 12.1-22.1
    assert second["a"].requested_at == pytest.approx(12.1)
    assert second["b"].requested_at == pytest.approx(22.1)
    # the idle loop drains every 1.1 s after the batch (1 s sleep + 0.1 s empty get): 13.0 is the first after 12.1
    assert second["a"].first_sent_at == pytest.approx(13.1)


def test_a_429_sleeps_its_retry_after_inside_the_batch_and_delays_every_answer():
    # rpm 1: the first call takes the only request; the second is told to retry after 60 s
    rec = run(agent("a", call("a1", latency=1.0)), agent("b", call("b1", latency=1.0)), rpm=1)
    calls = by_agent(rec)
    assert calls["b"].rate_limited == 1 and calls["b"].attempts == 2
    # 429 at 1.1 + 0.2 s, SDK sleeps retry-after (60 s <= 60 is honoured), answered 1 s later
    assert calls["a"].completed_at == calls["b"].completed_at == pytest.approx(1.3 + 60.0 + 1.0)


def test_an_answer_of_a_batch_still_running_at_the_end_is_not_delivered_so_not_completed():
    short = agent("a", call("a1", latency=1.0))
    long = agent("b", call("b1", latency=1000.0))
    rec = run(short, long, until=300.0)
    calls = {r.agent_id: r for r in rec.calls}
    assert calls["a"].completed_at is None and calls["b"].completed_at is None

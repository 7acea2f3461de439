"""openclaw-lanes: each behaviour on a tiny hand-made trace, with the times that follow from
OpenClaw's constants (policies/openclaw.py cites them)."""
from __future__ import annotations

import pytest

from agentrm_bench.harness import run_policy
from agentrm_bench.policies.openclaw import lane_sizes
from agentrm_bench.workload import BACKGROUND, BATCH, INTERACTIVE, AgentScript, CallSpec, RunSpec, Trace, WorkloadParams

RPM, TPM = 10_000, 10_000_000


def call(cid: str, latency: float = 2.0, tool: float = 0.0, first_chunk: float = 0.5, **fault) -> CallSpec:
    return CallSpec(call_id=cid, prompt_tokens=100, max_output_tokens=200, output_tokens=100,
                    provider_latency_s=latency, first_chunk_s=first_chunk, tool_after_s=tool, **fault)


def agent(aid: str, cls: str, *calls: CallSpec, at: float = 0.0) -> AgentScript:
    return AgentScript(aid, cls, (RunSpec(idle_before_s=0.0, not_before_s=at, calls=tuple(calls)),))


def run(*agents: AgentScript, lanes: int = 13, until: float = 1800.0, **kw):
    trace = Trace(WorkloadParams(minutes=until / 60.0), tuple(agents))
    return run_policy("openclaw-lanes", trace, lanes, kw.pop("rpm", RPM), TPM, **kw).recorder


def test_default_lane_sizes_scale_to_the_pool_keeping_their_ratio_and_sum():
    assert lane_sizes(13) == {"main": 4, "subagent": 8, "cron": 1}   # the defaults themselves
    assert lane_sizes(64) == {"main": 20, "subagent": 39, "cron": 5}
    for lanes in range(3, 200):
        sizes = lane_sizes(lanes)
        assert sum(sizes.values()) == lanes and min(sizes.values()) >= 1
        assert sizes["subagent"] >= sizes["main"] >= sizes["cron"]
    with pytest.raises(ValueError, match="at least 3 lanes"):
        lane_sizes(2)


def test_a_run_holds_its_lane_through_its_tool_calls():
    rec = run(agent("a", INTERACTIVE, call("c1", latency=2.0, tool=10.0), call("c2", latency=2.0)))
    (hold,) = rec.holds
    assert (hold.policy_slot, hold.started_at, hold.ended_at) == ("main", 0.0, 14.0)
    assert hold.inflight_s == pytest.approx(4.0)          # 10 s of tool time held idle


def test_each_class_queues_for_its_own_lane_at_its_default_size():
    # 13 lanes = the defaults: main 4, subagent 8, cron 1
    chats = [agent(f"i{k}", INTERACTIVE, call(f"i{k}c", latency=10.0)) for k in range(5)]
    jobs = [agent(f"b{k}", BATCH, call(f"b{k}c", latency=10.0)) for k in range(8)]
    crons = [agent(f"g{k}", BACKGROUND, call(f"g{k}c", latency=10.0)) for k in range(2)]
    rec = run(*chats, *jobs, *crons)
    sent = {r.agent_id: r.first_sent_at for r in rec.calls}
    assert [sent[f"i{k}"] for k in range(5)] == [0.0, 0.0, 0.0, 0.0, 10.0]   # the fifth chat waits
    assert all(sent[f"b{k}"] == 0.0 for k in range(8))                       # batch runs on subagent
    assert (sent["g0"], sent["g1"]) == (0.0, 10.0)                           # one cron lane
    assert {h.policy_slot for h in rec.holds} == {"main", "subagent", "cron"}


def test_a_hung_call_is_cut_at_120_s_and_retried_once_in_its_lane():
    rec = run(agent("a", INTERACTIVE, call("c1", latency=2.0, fault="hang")))
    (record,) = rec.calls
    assert record.attempts == 2 and rec.hung_attempts_cut == 1 and record.failed == 0
    # retry after the jittered 1 s * U(0.5, 1.5) backoff, then the 2 s answer
    assert 120.0 + 0.5 + 2.0 <= record.completed_at <= 120.0 + 1.5 + 2.0
    assert len(rec.holds) == 1 and rec.holds[0].ended_at == record.completed_at


def test_a_second_hang_is_past_the_90_s_retry_window_so_the_run_fails():
    rec = run(agent("a", INTERACTIVE, call("c1", latency=2.0)), outages=((0.0, 1000.0),), until=300.0)
    (record,) = rec.calls
    first = rec.holds[0]
    # cut at 120, retried after d in [0.5, 1.5], cut again 120 s later: the run ends there
    assert 240.5 <= first.ended_at <= 241.5
    assert record.failed == 1
    # the user sends it again 1 s later: a new run, a new lane, a fresh retry budget
    assert rec.holds[1].started_at == pytest.approx(first.ended_at + 1.0)
    assert record.attempts == 3


def test_cron_runs_use_a_60_s_watchdog_which_the_window_allows_twice_then_a_cooldown():
    rec = run(agent("g", BACKGROUND, call("c1", latency=2.0)), outages=((0.0, 1000.0),), until=250.0)
    (record,) = rec.calls
    first = rec.holds[0]
    assert first.policy_slot == "cron"
    # cuts at 60, 120 + d1, 180 + d1 + d2 with d1 in [0.5, 1.5], d2 in [1, 3]
    assert 181.5 <= first.ended_at <= 184.5
    assert record.failed == 1 and rec.hung_attempts_cut == 3
    # the resent run gets a lane 1 s later, but the agent's profile cools down 30 s from the
    # last idle timeout (the earlier windows had expired, so the count restarted at one)
    assert rec.holds[1].started_at == pytest.approx(first.ended_at + 1.0)
    assert record.attempts == 4 and rec.sent_log[3][0] == pytest.approx(first.ended_at + 30.0)


def test_a_mid_stream_stall_is_cut_120_s_after_the_last_chunk():
    rec = run(agent("a", INTERACTIVE, call("c1", latency=3.0, first_chunk=1.0, fault="stall", stall_after_s=5.0)))
    (record,) = rec.calls
    # the stream stops at 6 s; nothing for 120 s more: cut at 126, retried, answered in 3 s
    assert 126.0 + 0.5 + 3.0 <= record.completed_at <= 126.0 + 1.5 + 3.0
    assert rec.hung_attempts_cut == 1 and rec.live_calls_cut == 0


def test_slow_but_alive_survives_the_120_s_watchdog_but_not_cron_60_s():
    slow = dict(fault="slow", slow_extra_s=70.0)
    rec = run(agent("a", INTERACTIVE, call("c1", latency=2.0, **slow)),
              agent("g", BACKGROUND, call("c2", latency=2.0, **slow)))
    by_agent = {r.agent_id: r for r in rec.calls}
    assert by_agent["a"].attempts == 1 and by_agent["a"].completed_at == pytest.approx(72.0)
    assert by_agent["g"].attempts == 2 and rec.live_calls_cut == 1       # cut at 60 s, alive
    assert 60.0 + 0.5 + 2.0 <= by_agent["g"].completed_at <= 60.0 + 1.5 + 2.0


def test_the_630_s_lane_task_timeout_frees_the_lane_mid_run():
    rec = run(agent("b", BATCH, call("c1", latency=1.0, tool=700.0), call("c2", latency=1.0)))
    first, second = rec.holds
    assert (first.started_at, first.ended_at) == (0.0, 630.0)
    # the timeout fell in tool time: the next call queues for a fresh lane when the tool ends
    assert second.started_at == pytest.approx(701.0) and second.ended_at == pytest.approx(702.0)
    assert all(r.failed == 0 for r in rec.calls)


def test_a_429_is_retried_in_the_lane_after_its_retry_after():
    # rpm 1: the second call finds the request bucket empty; retry-after = ceil(59) s
    rec = run(agent("a", INTERACTIVE, call("c1", latency=1.0), call("c2", latency=1.0)), rpm=1)
    second = rec.calls[1]
    assert second.rate_limited == 1 and second.attempts == 2 and second.failed == 0
    assert second.first_sent_at == 1.0
    assert second.completed_at == pytest.approx(1.0 + 0.2 + 59.0 + 1.0)   # the 429 comes 0.2 s later
    assert len(rec.holds) == 1                                            # the lane is kept meanwhile


def test_without_cron_jobs_every_lane_serves_main_and_subagent_runs():
    assert lane_sizes(12, cron=False) == {"main": 4, "subagent": 8}
    chats = [agent(f"i{k}", INTERACTIVE, call(f"i{k}c", latency=10.0)) for k in range(5)]
    rec = run(*chats, lanes=12)
    assert sorted(r.first_sent_at for r in rec.calls) == [0.0, 0.0, 0.0, 0.0, 10.0]   # main has 4 of 12
    assert {h.policy_slot for h in rec.holds} == {"main"}


def test_a_success_resets_the_retry_window_so_a_later_hang_in_the_run_is_retried_too():
    # two hung calls 200 s apart in one run: each is cut at 120 s and retried once
    rec = run(agent("a", BATCH, call("c1", latency=2.0, tool=200.0, fault="hang"),
                    call("c2", latency=2.0, fault="hang")))
    first, second = rec.calls
    assert first.attempts == 2 and second.attempts == 2
    assert first.failed == 0 and second.failed == 0 and second.completed_at is not None


def test_a_self_hosted_provider_gets_the_300_s_idle_timeout():
    from agentrm_bench.sim import Saturation
    rec = run(agent("a", INTERACTIVE, call("c1", latency=2.0, fault="hang")), saturation=Saturation())
    (record,) = rec.calls
    assert record.attempts == 2 and 300.0 < record.completed_at < 305.0

"""gateway-fifo, the central per-call FIFO gateway: each test plays a tiny hand-made trace and
checks the exact times that follow from its rules (central.py): a lane per attempt, shared
RPM/TPM buckets with head-of-line admission and refunds, an httpx-style read timeout of the
variant's length, one retry (retry-after, else openai-python's first backoff step) that goes
ahead of new calls, then the error reaches the agent."""
from __future__ import annotations

import random

import pytest

from agentrm_bench.harness import run_policy
from agentrm_bench.policies.central import DEFAULT_TIMEOUT_S, parse_timeout
from agentrm_bench.workload import INTERACTIVE, AgentScript, CallSpec, RunSpec, Trace, WorkloadParams, generate

BIG_RPM, BIG_TPM = 10_000, 10_000_000


def call(cid: str, prompt=1000, max_out=1000, out=100, latency=2.0, first=0.5, tool=0.0, **fault) -> CallSpec:
    return CallSpec(call_id=cid, prompt_tokens=prompt, max_output_tokens=max_out, output_tokens=out,
                    provider_latency_s=latency, first_chunk_s=first, tool_after_s=tool, **fault)


def agent(aid: str, *calls: CallSpec, at: float = 0.0) -> AgentScript:
    return AgentScript(aid, INTERACTIVE, (RunSpec(idle_before_s=at, not_before_s=0.0, calls=calls),))


def trace(*agents: AgentScript, minutes: float = 10.0) -> Trace:
    return Trace(WorkloadParams(agents=len(agents), minutes=minutes, seed=1), agents)


def backoffs(n: int) -> list[float]:
    """openai-python's first backoff step, 0.5 s minus up to 25% jitter, as the policy draws it."""
    rng = random.Random("1/jitter")
    return [0.5 * (1 - 0.25 * rng.random()) for _ in range(n)]


def spans(run) -> list[tuple[float, float]]:
    return [(h.started_at, h.ended_at) for h in run.recorder.holds]


@pytest.mark.parametrize("timeout", [10.0, 30.0, 120.0])
def test_a_hung_call_is_cut_at_the_variants_timeout_and_retried_once(timeout):
    run = run_policy(f"gateway-fifo@{timeout:g}s", trace(agent("a", call("c1", fault="hang"))), 4, BIG_RPM, BIG_TPM)
    (b,) = backoffs(1)
    assert spans(run) == [(0.0, timeout), (pytest.approx(timeout + b), pytest.approx(timeout + b + 2.0))]
    record = run.recorder.calls[0]
    assert record.attempts == 2 and record.failed == 0
    assert record.completed_at == pytest.approx(timeout + b + 2.0)
    assert run.recorder.hung_attempts_cut == 1 and run.recorder.live_calls_cut == 0
    assert run.recorder.holds[0].hung_s == pytest.approx(timeout)


def test_no_variant_means_a_30_second_timeout_and_any_number_of_seconds_works():
    assert parse_timeout(None) == DEFAULT_TIMEOUT_S == 30.0
    assert parse_timeout("45s") == 45.0 and parse_timeout("2.5s") == 2.5
    run = run_policy("gateway-fifo@45s", trace(agent("a", call("c1", fault="hang"))), 4, BIG_RPM, BIG_TPM)
    assert spans(run)[0] == (0.0, 45.0)
    assert spans(run_policy("gateway-fifo", trace(agent("a", call("c1", fault="hang"))), 4, BIG_RPM, BIG_TPM))[0] \
        == (0.0, 30.0)


@pytest.mark.parametrize("bad", ["30", "abc", "s", "0s", "-5s", "infs"])
def test_a_bad_variant_is_refused_with_a_clear_error(bad):
    with pytest.raises(ValueError, match="first-chunk timeout"):
        run_policy(f"gateway-fifo@{bad}", trace(agent("a", call("c1"))), 4, BIG_RPM, BIG_TPM)


def test_in_an_outage_the_retry_hangs_too_and_the_error_reaches_the_agent():
    # Every attempt sent before t=100 hangs. Chain 1: sent 0, cut 30, retry 30+b1, cut 60+b1,
    # the agent gets the error and asks 1 s later; chain 2 likewise; chain 3 is answered.
    run = run_policy("gateway-fifo@30s", trace(agent("a", call("c1"))), 4, BIG_RPM, BIG_TPM, outages=((0.0, 100.0),))
    b1, b2 = backoffs(2)
    t3 = 60 + b1 + 1.0
    t5 = t3 + 30 + b2 + 30 + 1.0
    assert spans(run) == [
        (0.0, 30.0), (pytest.approx(30 + b1), pytest.approx(60 + b1)),
        (pytest.approx(t3), pytest.approx(t3 + 30)), (pytest.approx(t3 + 30 + b2), pytest.approx(t3 + 60 + b2)),
        (pytest.approx(t5), pytest.approx(t5 + 2.0)),
    ]
    record = run.recorder.calls[0]
    assert record.failed == 2 and record.attempts == 5
    assert record.completed_at == pytest.approx(t5 + 2.0)
    assert run.recorder.hung_attempts_cut == 4
    assert run.recorder.notes["gateway_gave_up"] == 2


def test_a_mid_stream_stall_is_cut_by_the_read_timeout_after_its_last_chunk():
    # First chunk at 0.5 s, the stream stops at 2.5 s: silent for 10 s at 12.5 s.
    run = run_policy("gateway-fifo@10s", trace(agent("a", call("c1", fault="stall", stall_after_s=2.0))),
                     4, BIG_RPM, BIG_TPM)
    (b,) = backoffs(1)
    assert spans(run) == [(0.0, pytest.approx(12.5)), (pytest.approx(12.5 + b), pytest.approx(14.5 + b))]
    assert run.recorder.hung_attempts_cut == 1 and run.recorder.live_calls_cut == 0
    assert run.recorder.holds[0].hung_s == pytest.approx(10.0)


def test_a_slow_but_alive_call_is_cut_only_by_a_shorter_timeout():
    slow = trace(agent("a", call("c1", fault="slow", slow_extra_s=40.0)))   # first chunk at 40.5 s
    cut = run_policy("gateway-fifo@30s", slow, 4, BIG_RPM, BIG_TPM)
    (b,) = backoffs(1)
    assert spans(cut) == [(0.0, 30.0), (pytest.approx(30 + b), pytest.approx(32 + b))]
    assert cut.recorder.live_calls_cut == 1
    waited = run_policy("gateway-fifo@120s", slow, 4, BIG_RPM, BIG_TPM)
    assert spans(waited) == [(0.0, pytest.approx(42.0))]
    assert waited.recorder.live_calls_cut == 0 and waited.recorder.calls[0].attempts == 1


def test_a_lane_is_held_only_while_an_attempt_is_in_flight_never_through_tool_time():
    # One lane. a: 2 s call, 10 s tool, 2 s call. b asks at 1 s and gets the lane during a's tool.
    run = run_policy("gateway-fifo",
                     trace(agent("a", call("a1", tool=10.0), call("a2")), agent("b", call("b1"), at=1.0)),
                     1, BIG_RPM, BIG_TPM)
    assert spans(run) == [(0.0, 2.0), (2.0, 4.0), (12.0, 14.0)]
    assert all(h.inflight_s == pytest.approx(h.ended_at - h.started_at) for h in run.recorder.holds)


def test_the_rpm_bucket_makes_the_third_call_wait_for_its_refill():
    # RPM 2: two calls at t=0 empty the bucket; one request refills in 60/2 = 30 s.
    run = run_policy("gateway-fifo", trace(*(agent(f"a{i}", call(f"c{i}")) for i in range(3))), 8, 2, BIG_TPM)
    assert [s for s, _ in spans(run)] == [0.0, 0.0, pytest.approx(30.0)]
    assert run.recorder.rate_limited_at == []


def test_tpm_admission_is_head_of_line_fifo():
    # TPM 10,000 (166.7 tokens/s). a reserves 8,000 at 0 (it uses them all: no refund). b needs
    # 9,000 from t=1: it waits until the bucket holds 9,000, at 42 s. c needs only 1,000 from
    # t=2 and would fit at once, but waits behind b: 42 s + 1,000 / 166.7 = 48 s.
    full = dict(out=4000, max_out=4000)
    run = run_policy("gateway-fifo", trace(agent("a", call("a1", prompt=4000, **full)),
                                           agent("b", call("b1", prompt=5000, **full), at=1.0),
                                           agent("c", call("c1", prompt=500, max_out=500, out=500), at=2.0)),
                     8, BIG_RPM, 10_000)
    assert [s for s, _ in spans(run)] == [0.0, pytest.approx(42.0), pytest.approx(48.0)]
    assert run.recorder.rate_limited_at == []


def test_an_answer_refunds_its_unused_reservation():
    # As above, but a uses only 100 of its 4,000 reserved output tokens: at 2 s the 3,900 come
    # back, so b is sent when 2,000 + 2 s of refill + 3,900 + more refill reach 9,000.
    rate = 10_000 / 60
    run = run_policy("gateway-fifo", trace(agent("a", call("a1", prompt=4000, max_out=4000, out=100)),
                                           agent("b", call("b1", prompt=5000, max_out=4000, out=4000), at=1.0)),
                     8, BIG_RPM, 10_000)
    level_at_2 = 2000 + 2 * rate + 3900
    assert spans(run)[1][0] == pytest.approx(2.0 + (9000 - level_at_2) / rate)


def test_a_retry_goes_ahead_of_calls_that_have_not_been_tried():
    # One lane. a hangs at 0 and is cut at 30; b (asked at 1) takes the lane at 30 for 5 s;
    # a's retry becomes due at 30 + b1 and goes before c (asked at 2) when the lane frees at 35.
    run = run_policy("gateway-fifo@30s",
                     trace(agent("a", call("a1", fault="hang")), agent("b", call("b1", latency=5.0), at=1.0),
                           agent("c", call("c1"), at=2.0)), 1, BIG_RPM, BIG_TPM)
    assert spans(run) == [(0.0, 30.0), (30.0, 35.0), (35.0, 37.0), (37.0, 39.0)]
    done = sorted(run.recorder.calls, key=lambda r: r.completed_at)
    assert [(r.agent_id, r.completed_at) for r in done] == [("b", 35.0), ("a", 37.0), ("c", 39.0)]


def test_a_429_waits_its_retry_after_and_lowers_the_replicas_bucket_to_the_headers():
    # Two replicas each believe they have the whole RPM of 1. a0 (replica 0) takes the only
    # request at 0; a1 (replica 1) gets 429 with retry-after 60 at 0.2 s, whose headers say 0
    # requests remain: replica 1's bucket drops to 0. a1's retry goes at 0.2 + 60 when both
    # the bucket and the provider hold one request again. a3 (replica 1, asks at 30) would
    # have been sent at once by a bucket that still believed its own count (and drawn a 429);
    # it waits for the refill after a1's retry instead: 120.2 s. a2 is replica 0's late call.
    run = run_policy("gateway-fifo", trace(agent("a0", call("c0")), agent("a1", call("c1")),
                                           agent("a2", call("c2"), at=500.0), agent("a3", call("c3"), at=30.0)),
                     4, 1, BIG_TPM, replicas=2)
    sent = {r.agent_id: r for r in run.recorder.calls}
    holds = spans(run)
    assert holds[:2] == [(0.0, 2.0), (0.0, pytest.approx(0.2))]
    assert (pytest.approx(60.2), pytest.approx(62.2)) in holds
    assert sent["a1"].rate_limited == 1 and sent["a1"].attempts == 2 and sent["a1"].failed == 0
    assert sent["a1"].completed_at == pytest.approx(62.2)
    assert sent["a3"].first_sent_at == pytest.approx(120.2) and sent["a3"].rate_limited == 0
    assert len(run.recorder.rate_limited_at) == 1
    assert run.recorder.notes["gateway_header_clamps"] == 1


@pytest.mark.parametrize("seed", [1, 3])
def test_one_gateway_with_the_providers_limits_never_draws_a_429(seed):
    # Its buckets mirror the provider's (same limits, refills, refunds and kept charges), so
    # every refusal would be the gateway admitting what the provider does not hold.
    tight = generate(WorkloadParams(agents=60, minutes=5.0, seed=seed, stall_rate=0.03, slow_rate=0.03))
    run = run_policy("gateway-fifo", tight, 16, 300, 400_000)
    assert run.recorder.rate_limited_at == []
    assert len(run.provider.admitted_log) == run.recorder.provider_attempts

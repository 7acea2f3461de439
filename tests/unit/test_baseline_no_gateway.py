"""no-gateway: each behaviour on a tiny hand-made trace, with the times that follow from the
openai SDK's constants (policies/no_gateway.py cites them): a 600 s read timeout, two retries
with 0.5 s * 2^n backoff times 1 - 0.25 * random(), retry-after slept exactly up to 120 s, no
retry once a stream has begun, and nothing shared between agents."""
from __future__ import annotations

import random

import pytest

from agentrm_bench.harness import run_policy
from agentrm_bench.policies.base import AGENT_RETRY_S, sdk_backoff
from agentrm_bench.policies.no_gateway import should_retry_429
from agentrm_bench.workload import (
    INTERACTIVE,
    AgentScript,
    CallSpec,
    RunSpec,
    Trace,
    WorkloadParams,
)

RPM, TPM = 10_000, 10_000_000
NAME = "no-gateway"


def call(cid: str, latency: float = 2.0, first: float = 0.5, prompt: int = 100, max_out: int = 200,
         **fault) -> CallSpec:
    return CallSpec(call_id=cid, prompt_tokens=prompt, max_output_tokens=max_out, output_tokens=100,
                    provider_latency_s=latency, first_chunk_s=first, tool_after_s=0.0, **fault)


def agent(aid: str, *calls: CallSpec, at: float = 0.0) -> AgentScript:
    return AgentScript(aid, INTERACTIVE, (RunSpec(idle_before_s=0.0, not_before_s=at, calls=tuple(calls)),))


def run(*agents: AgentScript, lanes: int = 4, until: float = 3600.0, rpm: int = RPM, tpm: int = TPM, **kw):
    trace = Trace(WorkloadParams(minutes=until / 60.0), tuple(agents))
    return run_policy(NAME, trace, lanes, rpm, tpm, **kw)


def factors(n: int) -> list[float]:
    """The jitter factors of the policy's first n draws (rng seeded "<seed>/<name>")."""
    rng = random.Random("1/jitter")
    return [1 - 0.25 * rng.random() for _ in range(n)]


def sends(rec) -> list[float]:
    return [round(t, 6) for t, _ in rec.sent_log]


def test_the_sdk_backoff_is_calculate_retry_timeout():
    class Zero:
        @staticmethod
        def random():
            return 0.0
    assert [sdk_backoff(Zero, None, n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert sdk_backoff(Zero, 7.0, 0) == 7.0 and sdk_backoff(Zero, 120.0, 0) == 120.0
    assert sdk_backoff(Zero, 0.0, 1) == 1.0        # a zero retry-after falls back to backoff
    assert should_retry_429(None) and should_retry_429(120.0) and not should_retry_429(121.0)


def test_a_hang_is_cut_at_600s_and_retried_by_the_sdk():
    f = factors(1)
    r = run(agent("a", call("c", fault="hang")))
    assert sends(r.recorder) == [0.0, round(600.0 + 0.5 * f[0], 6)]
    rec = r.recorder.calls[0]
    assert rec.failed == 0 and rec.completed_at == pytest.approx(600.0 + 0.5 * f[0] + 2.0)


def test_in_an_outage_two_sdk_retries_then_api_timeout_error_reaches_the_agent():
    f = factors(2)
    r = run(agent("a", call("c")), outages=((0.0, 1500.0),))
    t1 = 600.0 + 0.5 * f[0]
    t2 = t1 + 600.0 + 1.0 * f[1]
    t3 = t2 + 600.0 + AGENT_RETRY_S           # no sleep after the last try: raised at once
    assert sends(r.recorder) == [0.0, round(t1, 6), round(t2, 6), round(t3, 6)]
    rec = r.recorder.calls[0]
    assert rec.failed == 1 and rec.completed_at == pytest.approx(t3 + 2.0)


def test_a_mid_stream_stall_reaches_the_agent_after_600s_of_silence():
    r = run(agent("a", call("c", fault="stall", stall_after_s=3.0)))
    cut = 0.5 + 3.0 + 600.0
    assert sends(r.recorder) == [0.0, round(cut + AGENT_RETRY_S, 6)]
    assert r.recorder.calls[0].failed == 1 and r.recorder.live_calls_cut == 0


def test_slow_but_alive_is_waited_for():
    r = run(agent("a", call("c", fault="slow", slow_extra_s=500.0)))
    assert sends(r.recorder) == [0.0] and r.recorder.calls[0].completed_at == pytest.approx(502.0)


def test_a_429_sleeps_exactly_its_retry_after():
    # tpm 3000, each call charges 1000 + 1000: the second is refused with retry-after 20 s (1000
    # tokens missing at 50 tokens/s); the answer comes 0.2 s later and the SDK sleeps exactly
    # 20 s, no jitter; by then the bucket holds 2010 tokens and the retry is admitted.
    big = dict(prompt=1000, max_out=1000)
    r = run(agent("a", call("a1", **big)), agent("b", call("b1", **big)), tpm=3000)
    assert sends(r.recorder) == [0.0, 0.0, 20.2]
    assert r.recorder.rate_limited_at == [0.0]
    assert [c.failed for c in r.recorder.calls] == [0, 0]


def test_nothing_is_shared_lanes_do_not_bind():
    r = run(*(agent(f"a{i}", call(f"c{i}", latency=10.0)) for i in range(20)), lanes=2)
    assert sends(r.recorder) == [0.0] * 20
    assert all(c.completed_at == pytest.approx(10.0) for c in r.recorder.calls)

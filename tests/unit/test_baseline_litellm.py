"""litellm-proxy and litellm-proxy-priority: each behaviour on a tiny hand-made trace, with the
times that follow from LiteLLM 1.106.12 (policies/litellm.py cites each): a 600 s read
timeout, num_retries = 2 with `calculate_retry_after` (0.5 s * 2^n or retry-after, plus up to
0.75 s of jitter, computed from the exception just raised, and slept once more after the last
retry), usage-based-routing-v2's per-minute counters (rpm - 1 requests a minute), a full
max_parallel_requests refusing at once and a slot freed at the first chunk, and cooldowns that
a single deployment only gets when all of >= 1000 requests in a minute fail."""
from __future__ import annotations

import random

import pytest

from agentrm_bench.harness import run_policy
from agentrm_bench.policies.base import AGENT_RETRY_S
from agentrm_bench.policies.litellm import _Failure, router_backoff
from agentrm_bench.workload import BACKGROUND, INTERACTIVE, AgentScript, CallSpec, RunSpec, Trace, WorkloadParams

RPM, TPM = 10_000, 10_000_000
NAMES = ("litellm-proxy", "litellm-proxy-priority")


def call(cid: str, latency: float = 2.0, first: float = 0.5, prompt: int = 100, max_out: int = 200,
         **fault) -> CallSpec:
    return CallSpec(call_id=cid, prompt_tokens=prompt, max_output_tokens=max_out, output_tokens=100,
                    provider_latency_s=latency, first_chunk_s=first, tool_after_s=0.0, **fault)


def agent(aid: str, *calls: CallSpec, at: float = 0.0, cls: str = INTERACTIVE) -> AgentScript:
    return AgentScript(aid, cls, (RunSpec(idle_before_s=0.0, not_before_s=at, calls=tuple(calls)),))


def run(name: str, *agents: AgentScript, lanes: int = 16, until: float = 3600.0, rpm: int = RPM, tpm: int = TPM,
        **kw):
    trace = Trace(WorkloadParams(minutes=until / 60.0), tuple(agents))
    return run_policy(name, trace, lanes, rpm, tpm, **kw)


def jitters(name: str, n: int) -> list[float]:
    """The policy's first n draws: its rng is seeded "<seed>/<name>" (policies/base.py)."""
    rng = random.Random("1/jitter")
    return [0.75 * rng.random() for _ in range(n)]


def sends(rec) -> list[float]:
    return [round(t, 6) for t, _ in rec.sent_log]


def test_backoff_follows_calculate_retry_after():
    class Zero:
        @staticmethod
        def random():
            return 0.0
    timeout = _Failure("timeout", None)
    assert [router_backoff(Zero, timeout, r) for r in (2, 1, 0)] == [0.5, 1.0, 2.0]
    assert router_backoff(Zero, _Failure("provider_429", 7.0), 2) == 7.0
    assert router_backoff(Zero, _Failure("provider_429", 61.0), 2) == 0.5   # beyond 60 s: ignored


@pytest.mark.parametrize("name", NAMES)
def test_a_hang_is_cut_at_600s_and_retried_after_the_routers_backoff(name):
    j = jitters(name, 1)
    r = run(name, agent("a", call("c", fault="hang")))
    rec = r.recorder.calls[0]
    assert sends(r.recorder) == [0.0, round(600.0 + 0.5 + j[0], 6)]
    assert rec.completed_at == pytest.approx(600.0 + 0.5 + j[0] + 2.0)
    assert rec.failed == 0 and r.recorder.hung_attempts_cut == 1


@pytest.mark.parametrize("name", NAMES)
def test_in_an_outage_three_tries_then_a_last_sleep_then_the_agent(name):
    # every try hangs: sleeps 0.5 (first failure, remaining 2), 1.0 (current_attempt 0, remaining
    # 1), 2.0 (current_attempt 1, remaining 0, after the last retry) plus jitter (router.py 8220);
    # then the error reaches the agent, which asks 1 s later.
    j = jitters(name, 3)
    r = run(name, agent("a", call("c")), outages=((0.0, 1500.0),))
    t1 = 600.0 + 0.5 + j[0]
    t2 = t1 + 600.0 + 1.0 + j[1]
    t3 = t2 + 600.0 + 2.0 + j[2] + AGENT_RETRY_S
    assert sends(r.recorder) == [0.0, round(t1, 6), round(t2, 6), round(t3, 6)]
    rec = r.recorder.calls[0]
    assert rec.failed == 1 and rec.completed_at == pytest.approx(t3 + 2.0)


@pytest.mark.parametrize("name", NAMES)
def test_a_mid_stream_stall_is_cut_600s_after_its_last_chunk_and_never_retried_by_the_router(name):
    r = run(name, agent("a", call("c", fault="stall", stall_after_s=3.0)))
    rec = r.recorder.calls[0]
    cut = 0.5 + 3.0 + 600.0
    assert sends(r.recorder) == [0.0, round(cut + AGENT_RETRY_S, 6)]
    assert rec.failed == 1 and rec.completed_at == pytest.approx(cut + AGENT_RETRY_S + 2.0)


@pytest.mark.parametrize("name", NAMES)
def test_slow_but_alive_is_waited_for(name):
    r = run(name, agent("a", call("c", latency=2.0, first=0.5, fault="slow", slow_extra_s=500.0)))
    assert sends(r.recorder) == [0.0]
    assert r.recorder.calls[0].completed_at == pytest.approx(502.0)


@pytest.mark.parametrize("name", NAMES)
def test_a_provider_429_sleeps_its_retry_after_plus_jitter(name):
    # the router's tpm check counts finished calls only, so the provider's own bucket refuses the
    # second call: charge 1000 + 1000 against 1000 tokens left of 3000/min -> retry-after 20 s.
    j = jitters(name, 1)
    big = dict(prompt=1000, max_out=1000)
    r = run(name, agent("a", call("a1", **big)), agent("b", call("b1", **big)), tpm=3000)
    assert r.recorder.rate_limited_at == [0.0]
    assert sends(r.recorder) == [0.0, 0.0, round(0.2 + 20.0 + j[0], 6)]


@pytest.mark.parametrize("name", NAMES)
def test_the_rpm_limit_refuses_the_request_past_it_before_calling_and_sleeps_60s(name):
    # rpm = 3: the selection-time test (`rpm_dict[item] + 1 >= rpm`, lowest_tpm_rpm_v2.py 388)
    # leaves no deployment once the minute has 2 requests, so the 3rd and 4th are refused with
    # retry-after 60 ("No deployments available") and their retries land in the next minute.
    j = jitters(name, 2)
    r = run(name, *(agent(f"a{i}", call(f"c{i}")) for i in range(4)), rpm=3)
    assert sends(r.recorder) == [0.0, 0.0] + sorted(round(60.0 + x, 6) for x in j)
    assert r.recorder.rate_limited_at == [] and r.policy.notes["no_deployments"] == 2


@pytest.mark.parametrize("name", NAMES)
def test_a_full_max_parallel_requests_refuses_and_the_slot_frees_at_the_first_chunk(name):
    # lanes 1: b finds the slot taken and is refused at once, without headers (backoff 0.5 s +
    # jitter), again at its retry (1.0 s + jitter); its second retry comes after a's first
    # chunk at 1.5 s freed the slot, though a's stream runs on to 10 s.
    j = jitters(name, 2)
    r = run(name, agent("a", call("a1", latency=10.0, first=1.5)), agent("b", call("b1")), lanes=1)
    assert sends(r.recorder) == [0.0, round(1.5 + j[0] + j[1], 6)]
    assert r.policy.notes["parallel_rejects"] == 2


@pytest.mark.parametrize("name", NAMES)
def test_a_single_deployment_is_cooled_down_only_when_all_of_1000_requests_failed(name):
    # (lanes 2000: a hung call keeps its max_parallel_requests permit until its timeout)
    # 999 hung calls time out at 600 s: 100% failures but fewer than 1000, no cooldown
    few = run(name, *(agent(f"a{i}", call(f"c{i}")) for i in range(999)), outages=((0.0, 600.1),),
              rpm=100_000, tpm=10**9, until=700.0, lanes=2000)
    assert few.policy.notes["cooldowns"] == 0
    # the 1000th puts it in cooldown for 5 s (605 s); a request at 602 s finds no healthy
    # deployment, so its first failure is raised at once (no retry), at 603 and 604 again;
    # at 605 s it goes. The priority heap changes nothing: alone, the request is popped at
    # its first poll.
    late = agent("late", call("late"), at=602.0)
    many = run(name, *(agent(f"a{i}", call(f"c{i}")) for i in range(1000)), late, outages=((0.0, 600.1),),
               rpm=100_000, tpm=10**9, until=700.0, lanes=2000)
    assert many.policy.notes["cooldowns"] == 1
    rec = next(r for r in many.recorder.calls if r.agent_id == "late")
    assert rec.failed == 3 and rec.attempts == 1 and rec.first_sent_at == pytest.approx(605.0)


def test_the_priority_variant_is_the_proxy_when_nothing_cools_down():
    agents = (agent("i", call("i1", fault="hang"), call("i2")), agent("b", call("b1"), cls=BACKGROUND),
              agent("s", call("s1", fault="stall", stall_after_s=1.0)))
    plain = run("litellm-proxy", *agents, lanes=1)
    prio = run("litellm-proxy-priority", *agents, lanes=1)
    # (the jitter differs: each policy's rng is seeded with its own name)
    def strip(rec):
        return [(c.agent_id, c.attempts, c.failed, c.completed_at is not None) for c in rec.calls]

    assert strip(prio.recorder) == strip(plain.recorder)
    assert prio.policy.notes["queued"] == 0

"""The trace-driven scenario: the bundled Mooncake excerpt loads, becomes the same trace for
the same seed at any load, plays its arrivals open-loop at the load asked, and a provider with
a prefix cache spares the prefill of the blocks it already holds."""
from __future__ import annotations

from dataclasses import replace

from agentrm_bench import mooncake_trace
from agentrm_bench.harness import run_policy
from agentrm_bench.scenarios import SCENARIOS, TRACE_LOADS
from agentrm_bench.sim import PrefixCache, Provider, ProviderLink, Recorder, Simulator
from agentrm_bench.workload import INTERACTIVE, AgentScript, CallSpec, RunSpec, Trace, WorkloadParams, generate

SCENARIO = SCENARIOS["mooncake-trace"]
PARAMS = WorkloadParams(**SCENARIO.params)


def _calls(trace):
    return [c for a in trace.agents for r in a.runs for c in r.calls]


def test_the_excerpt_loads_as_the_release_describes_it():
    requests = mooncake_trace.load_requests("mooncake-conversation")
    assert len(requests) == 2728
    assert requests[0].at_s == 0.0 and requests[-1].at_s < 15 * 60
    # One 512-token block hash per started block of the prompt (the release's README).
    assert all(len(r.hash_ids) == -(-r.input_length // 512) for r in requests)
    conversations = mooncake_trace.conversations(requests)
    assert len(set(conversations)) == 1895
    # A later turn of a conversation carries an earlier turn's prefix beyond the shared block 0.
    first_of = {}
    for req, conv in zip(requests, conversations):
        if conv in first_of:
            assert req.hash_ids[:2] == first_of[conv].hash_ids[:2]
        first_of.setdefault(conv, req)


def test_the_scenario_is_the_same_trace_for_a_seed_and_another_for_another_seed():
    one, again, other = (generate(replace(PARAMS, seed=s)) for s in (1, 1, 2))
    assert one == again
    assert [c.call_id for c in _calls(one)] == [c.call_id for c in _calls(other)]
    assert [c.first_chunk_s for c in _calls(one)] != [c.first_chunk_s for c in _calls(other)]
    a = run_policy("gateway-fifo@30s", one, SCENARIO.lanes, SCENARIO.rpm, SCENARIO.tpm,
                   provider_concurrency=SCENARIO.lanes)
    b = run_policy("gateway-fifo@30s", again, SCENARIO.lanes, SCENARIO.rpm, SCENARIO.tpm,
                   provider_concurrency=SCENARIO.lanes)
    assert [(r.call.call_id, r.completed_at) for r in a.recorder.calls] == \
        [(r.call.call_id, r.completed_at) for r in b.recorder.calls]


def test_arrivals_are_open_loop_at_the_load_asked():
    starts = {}
    for load in TRACE_LOADS:
        trace = generate(replace(PARAMS, trace_load=load))
        demand = sum(mooncake_trace.service_s(PARAMS, r) for r in mooncake_trace.load_requests("mooncake-conversation"))
        assert demand > 0
        first = {r.calls[0].call_id: r.not_before_s for a in trace.agents for r in a.runs}
        starts[load] = first
        assert max(first.values()) < trace.duration_s
    # Twice the load: every request arrives at half its time (the trace sped up, not re-drawn).
    both = set(starts[1.0]) & set(starts[2.0])
    assert len(both) == len(starts[1.0])
    assert all(abs(starts[2.0][k] - starts[1.0][k] / 2) < 1e-3 for k in both)


def _two_calls(blocks_b: tuple[int, ...]) -> Trace:
    p = replace(PARAMS, prefix_cache_blocks=100)
    a = CallSpec("a", 4096, 64, 1, provider_latency_s=1.0, first_chunk_s=0.8, tool_after_s=0.0,
                 prefix_blocks=tuple(range(8)), prefill_s=0.4)
    b = CallSpec("b", 4096, 64, 1, provider_latency_s=1.0, first_chunk_s=0.8, tool_after_s=0.0,
                 prefix_blocks=blocks_b, prefill_s=0.4)
    agents = (AgentScript("x", INTERACTIVE, (RunSpec(0.0, 0.0, (a,)),)),
              AgentScript("y", INTERACTIVE, (RunSpec(0.0, 5.0, (b,)),)))
    return Trace(params=p, agents=agents)


def test_a_cached_prefix_shortens_the_prefill():
    # b shares a's first 6 of 8 blocks: 6/8 of its 0.4 s prefill is spared; a stranger's is not.
    shared = run_policy("gateway-fifo@30s", _two_calls((0, 1, 2, 3, 4, 5, 90, 91)), 4, 10_000, 10**9)
    stranger = run_policy("gateway-fifo@30s", _two_calls(tuple(range(100, 108))), 4, 10_000, 10**9)
    latency = [{r.call.call_id: r.completed_at - r.answered_sent_at for r in run.recorder.calls}
               for run in (shared, stranger)]
    assert abs(latency[1]["b"] - 1.0) < 1e-6
    assert abs(latency[0]["b"] - (1.0 - 0.4 * 6 / 8)) < 1e-6
    assert latency[0]["a"] == latency[1]["a"] == 1.0
    assert shared.recorder.notes["prefix_cached_tokens"] == 6 * 512


def test_the_cache_forgets_the_least_recently_used_blocks():
    cache = PrefixCache(capacity_blocks=4, block_tokens=512)
    call = CallSpec("c", 2048, 8, 1, 1.0, 0.5, 0.0, prefix_blocks=(1, 2, 3, 4), prefill_s=0.1)
    cache.insert(call)
    assert cache.cached_tokens(call) == 2048
    cache.insert(replace(call, prefix_blocks=(9, 8)))          # 1 and 2 were the least recently used
    assert cache.cached_tokens(call) == 0
    assert cache.cached_tokens(replace(call, prefix_blocks=(3, 4))) == 1024


def test_a_hung_attempt_caches_nothing():
    sim = Simulator()
    recorder = Recorder(duration_s=100)
    cache = PrefixCache(10, 512)
    link = ProviderLink(sim, Provider(100, 10**9, outages=((0.0, 50.0),)), recorder, None, cache)
    call = CallSpec("h", 1024, 8, 1, 1.0, 0.5, 0.0, prefix_blocks=(1, 2), prefill_s=0.1)
    link.send(recorder.request(0.0, call, "x", INTERACTIVE), lambda _a: None)
    sim.run(100)
    assert cache.cached_tokens(call) == 0

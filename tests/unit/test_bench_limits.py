"""`fraction_of_limit` is goodput over the physical limit of the run's own completed calls:
no policy can pass 1, on any scenario or seed (metrics.realised_limit has the proof)."""
from __future__ import annotations

import pytest

from agentrm_bench.metrics import physical_limit, realised_limit
from agentrm_bench.scenarios import SCENARIOS
from agentrm_bench.scheduler_bench import run
from agentrm_bench.sim import Recorder
from agentrm_bench.workload import BATCH, AgentScript, CallSpec, RunSpec, Trace, WorkloadParams

# Every scenario at a fifth of its fleet and pool, so its limits bind as they do at full size.
SHRINK = 5


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_no_policy_exceeds_its_physical_limit_on_any_seed(name):
    sc = SCENARIOS[name]
    agents = WorkloadParams(**sc.params).agents // SHRINK
    result = run(name, (1, 2, 3), params={"agents": agents, "minutes": 4.0},
                 lanes=max(3, sc.lanes // SHRINK), rpm=max(1, sc.rpm // SHRINK), tpm=max(1, sc.tpm // SHRINK))
    over = {p: max(v for v in m["per_seed"]["fraction_of_limit"] if v is not None)
            for p, m in result["policies"].items()}
    assert max(over.values()) <= 1.0 + 1e-9, over


def _call(i: int, latency: float, output: int = 50) -> CallSpec:
    return CallSpec(call_id=f"c{i}", prompt_tokens=1000, max_output_tokens=100, output_tokens=output,
                    provider_latency_s=latency, first_chunk_s=0.5, tool_after_s=0.0)


def test_the_limit_counts_the_calls_a_run_completed_not_the_traces_mean():
    calls = [_call(0, 2.0), _call(1, 18.0)]             # the trace's mean service is 10 s
    trace = Trace(WorkloadParams(agents=1, minutes=1.0),
                  (AgentScript("bat0", BATCH, (RunSpec(0.0, 0.0, tuple(calls)),)),))
    nominal = physical_limit(trace, 2, 10**6, 10**9, concurrency=2)
    assert nominal["binding"] == "concurrency" and nominal["calls_per_min"] == pytest.approx(12.0)
    assert "concurrency" not in physical_limit(trace, 2, 10**6, 10**9)["bounds"]   # lanes the provider ignores
    recorder = Recorder(duration_s=60.0)
    done = recorder.request(0.0, calls[0], "bat0", BATCH)
    done.answered_sent_at, done.answered_at, done.completed_at = 0.0, 2.0, 2.0   # only the short call answered
    recorder.request(2.0, calls[1], "bat0", BATCH)
    lim = realised_limit(recorder, nominal["physical"])
    assert lim is not None and lim["calls_per_min"] == pytest.approx(60.0)   # 2 lanes x 60 / 2 s
    # RPM and TPM allow the bucket's first full minute on top of T: (T + 60) / T x the limit.
    assert realised_limit(recorder, {"concurrency": None, "rpm": 10, "tpm": 10**9})["calls_per_min"] == \
        pytest.approx(20.0)
    assert realised_limit(Recorder(duration_s=60.0), nominal["physical"]) is None

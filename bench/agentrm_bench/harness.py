"""One policy over one trace on a fresh simulator: the single place that wires a run, used by
the benchmark, the live check and the baselines' unit tests."""
from __future__ import annotations

from dataclasses import dataclass

from .policies import Context, Policy, build
from .sim import PrefixCache, Provider, ProviderLink, Recorder, Saturation, Simulator, SlowWindows
from .workload import Trace


@dataclass
class Run:
    policy: Policy
    recorder: Recorder
    provider: Provider
    sim: Simulator


def run_policy(name: str, trace: Trace, lanes: int, rpm: int, tpm: int, agentrm_overrides: dict | None = None,
               options: dict | None = None, outages: tuple[tuple[float, float], ...] = (),
               saturation: Saturation | None = None, replicas: int = 1, until: float | None = None,
               provider_concurrency: int | None = None) -> Run:
    sim = Simulator()
    provider = Provider(rpm, tpm, trace.params.ttft_slowdown_at_s, trace.params.ttft_slowdown_factor,
                        outages=outages, saturation=saturation, max_concurrent=provider_concurrency)
    end = trace.duration_s if until is None else until
    recorder = Recorder(duration_s=end)
    link = ProviderLink(sim, provider, recorder, SlowWindows.of(trace), PrefixCache.of(trace))
    ctx = Context(sim=sim, provider=provider, recorder=recorder, link=link, trace=trace, lanes=lanes,
                  seed=trace.params.seed, options=dict(options or {}))
    policy = build(name, ctx, agentrm_overrides, replicas)
    policy.start()
    sim.run(end)
    policy.finish()
    recorder.close(end)
    return Run(policy, recorder, provider, sim)

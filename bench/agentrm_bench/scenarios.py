"""The scheduler benchmark's scenarios: named presets, fixed before any policy was tuned on them
(benchmark v2; v3 adds `hangs-persist-model`, `reasoning-mix` and `provider-bound-predictable`, fixed
before any policy ran on them). Each sets the workload (WorkloadParams fields), the pool and the provider, and
says where each choice comes from. `--set NAME=VALUE` still changes any workload parameter, and
`--lanes/--rpm/--tpm` the pool; a changed scenario must be published as such, with both results.

The workload model itself (classes, think times, tool times, prompt growth, time to first
token) is described in workload.py, with the reason for each distribution. The values common
to every scenario unless it says otherwise:
- 200 agents over 30 simulated minutes: long enough for OpenClaw's 630 s run timeout to fire
  several times, and for AgentRM's 60 s boost to cycle 30 times.
- Provider speed: 0.4 s + prefill at 20k tokens/s to the first token (lognormal spread, sigma
  0.5), decode at 60 tokens/s: the order of magnitude of hosted GPT-4o-class APIs' published
  latency (first token in a few hundred ms, 50-100 output tokens/s).
- No faults, except where a scenario is about them: a scenario measures one thing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import mooncake_trace  # noqa: F401  (registers its trace reader with workload.generate)
from .sim import Saturation

# AgentRM's settings for every scenario: the core's defaults (app/domain/settings.py). Only the
# pool's lanes and the provider's RPM/TPM come from the scenario. Fixed in benchmark v2.
AGENTRM_DEFAULTS: dict = {}


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    params: dict = field(default_factory=dict)        # WorkloadParams overrides
    lanes: int = 64
    rpm: int = 10_000
    tpm: int = 12_000_000
    outages: tuple[tuple[float, float], ...] = ()
    saturation: Saturation | None = None
    replicas: int = 1
    # The provider itself admits at most `lanes` calls at once (429 beyond): lanes are then a
    # physical limit for every policy, not only a setting of those that have lanes.
    provider_concurrency_is_lanes: bool = False
    sweep_lanes: tuple[int, ...] = ()                  # fixed-lanes@N runs beside the policies
    policies: tuple[str, ...] | None = None           # None: every policy
    sources: dict = field(default_factory=dict)        # choice -> where it comes from / why

    def describe(self) -> dict:
        return {"name": self.name, "about": self.about, "params": dict(self.params), "lanes": self.lanes,
                "rpm": self.rpm, "tpm": self.tpm, "outages": [list(o) for o in self.outages],
                "saturation": None if self.saturation is None else vars(self.saturation),
                "replicas": self.replicas, "provider_concurrency_is_lanes": self.provider_concurrency_is_lanes,
                "sweep_lanes": list(self.sweep_lanes), "sources": dict(self.sources)}


NO_FAULTS = {"hang_rate": 0.0}

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario(
        name="mixed-lanes",
        about="Lanes are the bottleneck: interactive chat agents and batch coding agents share one pool, "
              "with tool time between calls; the provider has headroom.",
        params={**NO_FAULTS, "share_interactive": 0.6, "share_batch": 0.4},
        lanes=32, provider_concurrency_is_lanes=True,
        sources={
            "the provider admits 32 calls at once": "a provisioned deployment's concurrency (or a per-key cap): "
                                                    "beyond it the provider answers 429 with retry-after 1, so lanes "
                                                    "bind every policy, with or without lanes of its own; gateways "
                                                    "are configured with that number",
            "share_interactive=0.6, share_batch=0.4": "two classes only, so the contention is interactive vs batch",
            "lanes=32": "with unlimited lanes this fleet keeps about 60 calls in flight (120 interactive agents "
                        "x ~0.24 of their time in a call + 80 batch agents x ~0.4): 32 lanes make lanes bind",
            "rpm/tpm 10k/12M": "above the fleet's demand (~500 calls/min, ~8.7M tokens/min), so only lanes bind",
        }),
    Scenario(
        name="provider-bound",
        about="The provider's TPM and RPM bind: the fleet asks for about twice what the provider allows, "
              "and the provider answers 429 with retry-after.",
        params={**NO_FAULTS},
        lanes=64, rpm=300, tpm=4_500_000,
        sources={
            "rpm=300, tpm=4.5M": "the default fleet asks ~500 calls/min of ~17k tokens each (8.7M tokens/min); "
                                 "4.5M TPM allows ~260 calls/min and 300 RPM ~300: both limits near, both bind",
            "lanes=64": "lanes to spare, so the provider is the only bottleneck",
            "429 behaviour": "sim.Provider: OpenAI's documented limiter (continuous refill, one minute's capacity), "
                             "retry-after in whole seconds until the request would fit",
        }),
    Scenario(
        name="hangs",
        about="Failures of four kinds: calls that hang before their first chunk, streams that stall "
              "mid-way, calls that are slow but alive, and a 2-minute provider outage in which every "
              "attempt (retries too) hangs.",
        params={"hang_rate": 0.02, "stall_rate": 0.02, "slow_rate": 0.02,
                "stall_after_s": (0.5, 8.0), "slow_extra_s": (15.0, 90.0)},
        lanes=64, outages=((720.0, 840.0),),
        sources={
            "2% hangs, 2% stalls": "ASSUMPTION: public trackers report both kinds as routine (openclaw/openclaw#71127 "
                                   "stuck sessions, #80330 a stalled model_call); no published rate, so a rate high "
                                   "enough to matter and low enough that most calls are healthy",
            "2% slow, +15-90 s to first chunk": "long prefill or provider-side queueing on reasoning models; "
                                                "alive calls a short first-chunk timeout would cut",
            "outage 12:00-14:00": "a provider incident of minutes (status pages), mid-run so that policies "
                                  "must both survive it and recover",
        }),
    Scenario(
        name="hangs-persist",
        about="The `hangs` scenario with slowness that persists: an agent whose call is slow stays slow "
              "for its retries and its next calls with probability 0.8 (hangs, stalls and the outage "
              "as in `hangs`).",
        params={"hang_rate": 0.02, "stall_rate": 0.02, "slow_rate": 0.02,
                "stall_after_s": (0.5, 8.0), "slow_extra_s": (15.0, 90.0),
                "fault_persistence": 0.8, "persistence_scope": "agent", "persistent_faults": ("slow",)},
        lanes=64, outages=((720.0, 840.0),),
        sources={
            "everything but persistence": "the `hangs` scenario, unchanged, so the two differ in persistence only",
            "p = 0.8, per agent": "ASSUMPTION: no published rate. The causes of a slow start named in `hangs` "
                                  "(a long prefill, a reasoning model, queueing at the provider) belong to the "
                                  "agent's prompt, model or backend, not to one attempt: an agent slow once is "
                                  "slow again most of the time (mean episode 5 calls), and its retries too. "
                                  "The stationary share of slow calls is about r / (1 - p (1 - r)) = 9% "
                                  "(8.4-8.7% on seeds 1-3)",
            "only slowness persists": "a hang or a stall is a lost request or connection, which a retry escapes "
                                      "(as in `hangs`); slowness is the fault a retry meets again",
            "fixed before any policy ran on it": "with its target (docs/benchmarks/scheduler.md, persistent "
                                                 "slowness)",
        }),
    Scenario(
        name="hangs-persist-model",
        about="The `hangs` scenario with slowness that belongs to a model: the agents are spread over 4 models, "
              "and a model is slow for whole minutes at a time (every attempt sent to it then, retries "
              "included); hangs, stalls and the outage as in `hangs`.",
        params={"hang_rate": 0.02, "stall_rate": 0.02, "slow_rate": 0.02,
                "stall_after_s": (0.5, 8.0), "slow_extra_s": (15.0, 90.0),
                "fault_persistence": 0.8, "persistence_scope": "model", "persistent_faults": ("slow",),
                "models": 4, "persistence_window_s": 60.0},
        lanes=64, outages=((720.0, 840.0),),
        sources={
            "everything but persistence": "the `hangs` scenario, unchanged",
            "4 models, 1-minute windows, p = 0.8": "ASSUMPTION: a provider's per-model incidents and load "
                                                   "(status pages report degraded latency per model, for minutes); "
                                                   "slow windows make up the slow rate (2%) of each model's time, "
                                                   "a slow minute followed by another with probability 0.8",
            "fixed before any policy ran on it": "benchmark v3",
        }),
    Scenario(
        name="reasoning-mix",
        about="The `hangs` scenario's faults with a reasoning-model mix: 15% of calls think 20-120 s before "
              "their first token, on every attempt, and all of them answer.",
        params={"hang_rate": 0.02, "stall_rate": 0.02, "slow_rate": 0.0,
                "stall_after_s": (0.5, 8.0), "reasoning_share": 0.15, "reasoning_ttft_s": (20.0, 120.0)},
        lanes=64, outages=((720.0, 840.0),),
        sources={
            "15% reasoning calls, 20-120 s to the first token": "ASSUMPTION: reasoning models stream nothing while "
                                                                "they think (o-series and R1-style APIs: tens of "
                                                                "seconds to minutes before the first visible token); "
                                                                "a minority of an agent fleet's calls",
            "no `slow` faults": "the reasoning calls are the slow-but-alive calls here, and they are slow on "
                                "every attempt: a first-chunk deadline that cuts one cuts its retry too",
            "hangs, stalls, outage": "as in `hangs`, so a deadline still has hung calls to cut",
            "fixed before any policy ran on it": "benchmark v3",
        }),
    Scenario(
        name="provider-bound-predictable",
        about="`provider-bound` with answer lengths a scheduler can predict: each agent has a typical answer "
              "length, and answers grow with the prompt.",
        params={**NO_FAULTS, "length_predictability": 0.8},
        lanes=64, rpm=300, tpm=4_500_000,
        sources={
            "length_predictability=0.8": "ASSUMPTION: an agent's answers resemble each other (the same task, the "
                                         "same output format) and longer contexts ask for longer answers; "
                                         "log-length is 0.8 the agent's own typical length (scaled by "
                                         "prompt^0.3) and 0.2 the usual independent draw",
            "everything else": "the `provider-bound` scenario, unchanged: the lever is the only change",
            "fixed before any policy ran on it": "benchmark v3",
        }),
    Scenario(
        name="runs",
        about="Agent runs with a heavy-tailed number of calls (most short, a few of hundreds); lanes bind. "
              "What matters is run completion time.",
        params={**NO_FAULTS, "share_interactive": 0.5, "share_batch": 0.5,
                "calls_per_run_alpha": 1.2, "calls_per_run_min": 2, "calls_per_run_cap": 200},
        lanes=32, provider_concurrency_is_lanes=True,
        sources={
            "Pareto(min 2, alpha 1.2), cap 200": "agent trajectories' step counts are heavy-tailed (Autellix, "
                                                 "arXiv 2502.13965, on program lengths; SWE-agent runs from a few "
                                                 "steps to hundreds): median ~3.5 calls, mean ~10",
            "lanes=32, the provider admits 32 at once": "as mixed-lanes: lanes bind every policy, so the order of "
                                                        "service decides run completion",
        }),
    Scenario(
        name="saturating-provider",
        about="A self-hosted-like provider (continuous batching) whose latency grows with concurrency and "
              "whose throughput plateaus past a knee; no rate limit. Configured lanes are a ceiling of 128; "
              "a sweep of fixed lane counts shows the curve.",
        params={**NO_FAULTS},
        lanes=128, rpm=10_000_000, tpm=10_000_000_000, saturation=Saturation(),
        sweep_lanes=(8, 16, 24, 32, 48, 64, 96, 128),
        sources={
            "saturation curve": "sim.Saturation: fit to a published vLLM concurrency sweep (Mistral-7B on one "
                                "RTX 4090: 210-1190 output tok/s and 63-667 ms TTFT at concurrency 4-48)",
            "lanes=128": "a ceiling well past the knee: a policy that fills every lane runs past it",
        }),
    Scenario(
        name="replicas",
        about="Three gateway replicas share one provider budget: per-replica counters (each replica "
              "enforces the whole limit on what it sees) against one writer per pool.",
        params={**NO_FAULTS},
        lanes=63, rpm=300, tpm=4_500_000, replicas=3,
        policies=("agentrm", "gateway-fifo@30s", "litellm-proxy", "litellm-proxy-priority", "vtc", "plas"),
        sources={
            "3 replicas, the provider-bound limits": "the scenario of BerriAI/litellm#40291 and #8430: rate limits "
                                                     "that do not hold across replicas",
            "lanes=63": "21 per replica, so the replicas together have what one gateway would",
        }),
    Scenario(
        name="mooncake-trace",
        about="A recorded conversation trace (Mooncake FAST'25, its first 15 minutes) played open-loop against a "
              "provider with a prefix cache; the provider admits 16 calls at once. Run at 0.5, 1, 1.5 and 2 x "
              "the lanes' zero-wait capacity (`--load`; 1 by default).",
        params={**NO_FAULTS, "trace_file": "mooncake-conversation", "minutes": 10.0, "trace_load": 1.0,
                "trace_lanes": 16, "prefix_cache_blocks": 10_000, "prefix_block_tokens": 512},
        lanes=16, provider_concurrency_is_lanes=True,
        sources={
            "the trace": "kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl (Apache-2.0), its first "
                         "15 minutes: 2,728 requests, arrivals, lengths and 512-token prefix-block hashes "
                         "(mooncake_trace.py, data/README.md)",
            "conversations": "no session id in the trace: a request joins the conversation of the latest earlier "
                             "request sharing its longest prefix of >= 2 blocks (block 0 is everyone's)",
            "open-loop, loads 0.5/1/1.5/2": "arrivals at the trace's times sped up so that the zero-wait demand "
                                            "(noiseless, uncached service) is that multiple of the 16 lanes; fixed "
                                            "before any policy ran on the scenario",
            "10 simulated minutes": "at 2x the excerpt's 15 minutes are played in 10",
            "the provider admits 16 calls at once": "as mixed-lanes: a provisioned deployment's concurrency; 429 with "
                                                    "retry-after 1 beyond, so lanes bind every policy",
            "prefix cache of 10,000 blocks, LRU, 512 tokens a block": "ASSUMPTION on the capacity: 5.1M tokens of KV, "
                                                                      "about 1.6 TB for a 70B GQA model (320 KB a "
                                                                      "token), an 8-GPU node's HBM left after the "
                                                                      "weights (~0.5 TB) plus a host-DRAM pool as "
                                                                      "Mooncake's store keeps; the block size is the "
                                                                      "trace's (its README). In arrival order it "
                                                                      "spares 21% of the excerpt's prompt tokens (an "
                                                                      "unbounded cache 30%)",
            "provider speed": "the other scenarios' (0.4 s + 20k prefill tokens/s to the first token, lognormal "
                              "sigma 0.5, 60 decode tokens/s); the cache spares the cached share of the prefill",
            "rpm/tpm 10k/12M": "above the demand at 2x (~290 calls/min, ~3.6M tokens/min): only the lanes bind",
        }),
    Scenario(
        name="paper",
        about="The first benchmark's default (the paper's setting: lanes held through tools are the waste "
              "it measures), 1% hangs, against a faithful openclaw-lanes.",
        params={"hang_rate": 0.01},
        lanes=64,
        sources={"everything": "workload.py's defaults, unchanged from the first benchmark"}),
)}

SCENARIO_NAMES = tuple(SCENARIOS)

# The load multipliers a trace-driven scenario is judged at, fixed with it.
TRACE_LOADS = (0.5, 1.0, 1.5, 2.0)


def is_trace_driven(sc: Scenario) -> bool:
    return sc.params.get("trace_file") is not None

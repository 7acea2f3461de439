"""A seeded workload for the scheduler benchmark: a fleet of agents and what each will ask of
the provider, fixed before any policy runs so that every policy faces the same trace.

Three kinds of agent, after the classes the scheduler knows:
- interactive: a user sends a message, the agent answers with a short run of 1-4 LLM calls
  with tool calls between them, then the user thinks (exponential think time) before the next
  message. Short outputs; the prompt grows with the conversation, as a chat transcript does.
- batch: long jobs of many LLM calls back to back, with heavy-tailed (Pareto) outputs and tool
  times; the prompt grows within a job and is compacted back when it nears its cap.
- background: cron jobs. Every agent of this class fires on the same period (cron
  expressions cluster on round minutes), so the fleet sees bursts of short sub-agent calls.
A fraction of calls hang: the provider accepts them and never answers. The hang belongs to
the first attempt of a call; a retry of it is answered, so every policy can finish the work.

Persistent faults (`fault_persistence` > 0, the `hangs-persist` scenario). Real slowness (a
long prefill, a reasoning model, queueing at the provider) is not a property of one attempt:
it comes back on the retry and on the same agent's next calls. `persistence_scope` says what
the slowness belongs to:
- "agent": after a call whose fault is one of `persistent_faults`, the agent's next call has
  the same fault with probability p (a fresh size; otherwise its fault is drawn as usual),
  and each retry of the call repeats it with probability p, up to the first healthy attempt
  (`CallSpec.retry_faults`, at most MAX_RETRY_FAULTS). A geometric episode of mean 1/(1-p).
- "model": the agents are spread over `models` models; each model's time is cut into
  windows of `persistence_window_s`, and a window is slow with probability p after a slow
  one and q after a healthy one, q chosen so that a share `slow_rate` of windows is slow in
  the long run. Every attempt sent to a model in its slow window is slow, retries included.
- "window": the same windows, shared by every model: the provider itself is slow.
Windows are drawn per key (model, or the provider) from streams of their own, so they are
the same for every policy; a slow window's extra delay is drawn per (call, attempt) and so
is the same whichever policy sends that attempt. With p = 0 nothing is drawn and traces are
exactly the traces of before.

Why these defaults (the results they give: docs/benchmarks/scheduler.md):
- 30 simulated minutes: openclaw-lanes' last backstop against hung calls is a 630 s lane task
  timeout. A 10-minute window ends before it can ever fire, which would flatter AgentRM;
  30 minutes lets the baseline recycle zombies.
- Tool time. The paper's pair of results (throughput +168% at equal lanes, lane waste -96%)
  pins its baseline's lane waste at about 63%: at equal lanes a scheduler that wastes w_a
  of its lanes can out-serve one that wastes w_b by at most (1 - w_a) / (1 - w_b). Tools
  are where a run-holding lane goes idle, so the tool-time model decides which operating
  point a benchmark measures. Interactive tools (search, fetch, file edits): lognormal,
  median 4 s. Batch jobs are the tool-heavy class: their LLM calls follow each other with no
  human in between, but between them the agent runs builds, test suites and crawls (Pareto
  from 8 s, shape 1.3: median 14 s, capped at 120 s). A lighter model (median 2 s, Pareto
  from 1 s) would put the baseline's lane waste at about 45% and AgentRM's lead at about 2x,
  far from the paper's operating point.

`call_attempts(trace)` flattens a trace into per-agent sequences of calls, so that a live
check can drive the same trace through the real service with real clients.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

INTERACTIVE, BATCH, BACKGROUND = "INTERACTIVE", "BATCH", "BACKGROUND"
CLASSES = (INTERACTIVE, BATCH, BACKGROUND)
FAULT_KINDS = ("hang", "stall", "slow")
AGENT, MODEL, WINDOW = "agent", "model", "window"
SCOPES = (AGENT, MODEL, WINDOW)
# The longest run of faulty retries a call carries: past it a retry is healthy (p = 1 would
# otherwise never end).
MAX_RETRY_FAULTS = 16


@dataclass(frozen=True)
class WorkloadParams:
    """Everything that shapes the trace. Published with every report (`to_dict`)."""
    agents: int = 200
    minutes: float = 30.0
    seed: int = 1
    hang_rate: float = 0.01                 # share of calls whose first attempt never returns
    stall_rate: float = 0.0                 # share whose first attempt stalls mid-stream, for ever
    stall_after_s: tuple[float, float] = (0.5, 8.0)   # stream time before the stall (uniform)
    slow_rate: float = 0.0                  # share whose first attempt is alive but slow to start
    slow_extra_s: tuple[float, float] = (15.0, 90.0)  # extra time to first chunk (uniform)
    share_interactive: float = 0.5
    share_batch: float = 0.3                # background gets the rest
    # interactive
    interactive_think_mean_s: float = 30.0
    interactive_calls_per_run: tuple[int, int] = (1, 4)
    interactive_output_median: int = 250
    interactive_max_output: int = 1024
    interactive_prompt_start: int = 1_500
    interactive_prompt_cap: int = 24_000
    # batch
    batch_calls_per_job: tuple[int, int] = (8, 30)
    batch_output_min: int = 300             # Pareto scale
    batch_output_alpha: float = 1.5         # Pareto shape: heavy tail
    batch_max_output: int = 4096
    batch_prompt_start: int = 4_000
    batch_prompt_cap: int = 48_000
    batch_job_gap_mean_s: float = 5.0
    # Heavy-tailed run lengths (the `runs` scenario): when set, interactive and batch runs
    # take max(min, floor(Pareto(min, alpha))) calls, capped, instead of the uniform ranges.
    calls_per_run_alpha: float | None = None
    calls_per_run_min: int = 1
    calls_per_run_cap: int = 200
    # background
    background_period_s: float = 120.0
    background_jitter_s: float = 5.0
    background_calls_per_burst: tuple[int, int] = (3, 8)
    background_output_median: int = 400
    background_max_output: int = 2048
    background_prompt_start: int = 2_000
    # tools (between calls of one run)
    tool_median_s: float = 4.0              # interactive and background tools: lognormal median
    tool_sigma: float = 1.0                 # lognormal spread
    batch_tool_min_s: float = 8.0           # Pareto scale for batch tools (builds, tests, crawls)
    batch_tool_alpha: float = 1.3
    tool_max_s: float = 120.0
    tool_result_tokens: tuple[int, int] = (200, 1_500)
    # provider speed
    ttft_base_s: float = 0.4                # time to first token, plus prompt prefill below
    prefill_tokens_per_s: float = 20_000.0
    ttft_sigma: float = 0.5                 # lognormal spread of the time to first token (queueing)
    decode_tokens_per_s: float = 60.0
    # A provider that slows down mid-run: from this simulated second on, every call's time to
    # first token is multiplied by the factor (the `slow-provider` scenario; None: never).
    ttft_slowdown_at_s: float | None = None
    ttft_slowdown_factor: float = 1.0
    # Persistent faults (module docstring): p, what the slowness belongs to, which kinds recur.
    fault_persistence: float = 0.0
    persistence_scope: str = "agent"        # "agent", "model" or "window"
    persistent_faults: tuple[str, ...] = ("slow",)
    models: int = 1                         # models the agents are spread over (scope "model")
    persistence_window_s: float = 60.0      # window length of scopes "model" and "window"
    # A reasoning-model mix: this share of calls thinks for `reasoning_ttft_s` (uniform) before
    # its first token, on every attempt (it is the call's own service, not a fault): alive,
    # slow to start. Drawn from a stream of its own, so a share of 0 leaves traces unchanged.
    reasoning_share: float = 0.0
    reasoning_ttft_s: tuple[float, float] = (20.0, 120.0)
    # Answer lengths a scheduler can predict: with r > 0 the log of each answer's length is
    # (1 - r) x the usual independent draw + r x log(the agent's own typical length, scaled by
    # the prompt's size^0.3 against its class's starting prompt). The agent's typical length is
    # a lognormal factor (sigma 0.8) of the class median, from a stream of its own. r = 0:
    # lengths independent of agent and prompt (unchanged traces).
    length_predictability: float = 0.0
    # A recorded trace instead of the synthetic fleet (mooncake_trace.py): the bundled excerpt's
    # name, the load it is played at (its arrivals sped up so that its zero-wait demand for
    # lanes is `trace_load` x `trace_lanes`), and the provider's prefix cache (0 blocks: none).
    trace_file: str | None = None
    trace_load: float = 1.0
    trace_lanes: int = 16
    prefix_cache_blocks: int = 0
    prefix_block_tokens: int = 512

    def to_dict(self) -> dict:
        return asdict(self)

    def validate(self) -> WorkloadParams:
        """Self, or ValueError naming every parameter out of its range."""
        problems = []
        if not 0.0 <= self.fault_persistence <= 1.0:
            problems.append("fault_persistence must be between 0 and 1")
        if self.persistence_scope not in SCOPES:
            problems.append(f"persistence_scope must be one of {', '.join(SCOPES)}")
        unknown = sorted(set(self.persistent_faults) - set(FAULT_KINDS))
        if unknown:
            problems.append(f"persistent_faults: unknown kinds {', '.join(unknown)} (known: {', '.join(FAULT_KINDS)})")
        if self.models < 1:
            problems.append("models must be at least 1")
        if not self.persistence_window_s > 0:
            problems.append("persistence_window_s must be positive")
        if not 0.0 <= self.reasoning_share <= 1.0:
            problems.append("reasoning_share must be between 0 and 1")
        if not 0.0 <= self.length_predictability <= 1.0:
            problems.append("length_predictability must be between 0 and 1")
        if not self.minutes > 0:
            problems.append("minutes must be positive")
        if not self.trace_load > 0 or self.trace_lanes < 1:
            problems.append("trace_load must be positive and trace_lanes at least 1")
        if self.prefix_cache_blocks < 0 or self.prefix_block_tokens < 1:
            problems.append("prefix_cache_blocks must be at least 0 and prefix_block_tokens at least 1")
        if problems:
            raise ValueError("; ".join(problems))
        return self


@dataclass(frozen=True)
class CallSpec:
    """One LLM call an agent needs answered, and what the provider will do with it."""
    call_id: str
    prompt_tokens: int
    max_output_tokens: int
    output_tokens: int
    provider_latency_s: float               # from request sent to the last byte
    first_chunk_s: float                    # from request sent to the first streamed chunk
    tool_after_s: float                     # tool time before the agent's next call (0 at run end)
    fault: str | None = None                # None, "hang", "stall" or "slow": the first admitted attempt's
    stall_after_s: float = 0.0              # a stall: stream time after the first chunk
    slow_extra_s: float = 0.0               # slow: extra time to the first chunk
    # The faults of admitted attempts 2, 3, ... as (kind, size): a persistent fault's retries
    # (size: stall_after_s or slow_extra_s); past the end of the tuple an attempt is healthy.
    retry_faults: tuple[tuple[str, float], ...] = ()
    # A recorded trace's prompt as prefix-block hashes, and the prefill part of first_chunk_s:
    # a provider's prefix cache (sim.PrefixCache) spares the cached blocks' share of it.
    prefix_blocks: tuple[int, ...] = ()
    prefill_s: float = 0.0

    @property
    def hangs(self) -> bool:
        return self.fault == "hang"

    def attempt_fault(self, admitted: int) -> tuple[str | None, float]:
        """(kind, size) of the call's `admitted`-th admitted attempt (1: the first)."""
        if admitted <= 1:
            return self.fault, self.stall_after_s if self.fault == "stall" else self.slow_extra_s
        if admitted - 2 < len(self.retry_faults):
            kind, size = self.retry_faults[admitted - 2]
            return kind, size
        return None, 0.0


@dataclass(frozen=True)
class RunSpec:
    """One agent run: the calls that answer one message, one job, or one cron firing.
    It starts at max(end of previous run + idle_before_s, not_before_s)."""
    idle_before_s: float
    not_before_s: float
    calls: tuple[CallSpec, ...]


@dataclass(frozen=True)
class AgentScript:
    agent_id: str
    priority_class: str
    runs: tuple[RunSpec, ...]
    model: str = "m0"                       # the model its calls name (scope "model" spreads them)


@dataclass(frozen=True)
class SlowWindow:
    """[start, end) in which every attempt sent to `model` ("*": any model) is slow."""
    model: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Trace:
    params: WorkloadParams
    agents: tuple[AgentScript, ...] = field(default_factory=tuple)
    slow_windows: tuple[SlowWindow, ...] = ()

    @property
    def duration_s(self) -> float:
        return self.params.minutes * 60.0

    def call_count(self) -> int:
        return sum(len(r.calls) for a in self.agents for r in a.runs)


class _Draw:
    """The distributions the generator uses, over one seeded random stream."""

    def __init__(self, rng: random.Random, p: WorkloadParams):
        self.rng, self.p = rng, p

    def lognormal(self, median: float, sigma: float) -> float:
        return median * math.exp(self.rng.gauss(0.0, sigma))

    def pareto(self, scale: float, alpha: float) -> float:
        return scale * self.rng.paretovariate(alpha)

    def tool_time(self, priority_class: str) -> float:
        p = self.p
        if priority_class == BATCH:
            return min(p.tool_max_s, self.pareto(p.batch_tool_min_s, p.batch_tool_alpha))
        return min(p.tool_max_s, self.lognormal(p.tool_median_s, p.tool_sigma))

    def tool_result(self) -> int:
        low, high = self.p.tool_result_tokens
        return self.rng.randint(low, high)

    def first_chunk(self, prompt: int) -> float:
        # Base latency plus prefill, times a lognormal factor with median 1: provider-side
        # queueing makes the same prompt start sooner or later.
        return (self.p.ttft_base_s + prompt / self.p.prefill_tokens_per_s) * math.exp(
            self.rng.gauss(0.0, self.p.ttft_sigma))

    def decode(self, output: int) -> float:
        return output / self.p.decode_tokens_per_s


# The spread of agents' typical answer lengths around their class's median (length
# predictability), and how an answer's length grows with its prompt's size.
AGENT_LENGTH_SIGMA = 0.8
PROMPT_LENGTH_EXPONENT = 0.3


class _CallFactory:
    def __init__(self, agent_id: str, draw: _Draw, priority_class: str = INTERACTIVE):
        self.agent_id, self.draw, self.count = agent_id, draw, 0
        self.sticky: str | None = None      # the persistent fault of the agent's last call
        p = draw.p
        # Streams of their own: these levers never shift the main stream's draws.
        self.side = random.Random(f"{p.seed}/{agent_id}/levers")
        self.typical = (_CLASS_MEDIAN[priority_class](p) * math.exp(self.side.gauss(0.0, AGENT_LENGTH_SIGMA))
                        if p.length_predictability > 0 else 0.0)
        self.prompt_start = _CLASS_PROMPT[priority_class](p)

    def _predictable(self, output: int, prompt: int) -> int:
        r = self.draw.p.length_predictability
        if r <= 0:
            return output
        expected = self.typical * (max(1, prompt) / self.prompt_start) ** PROMPT_LENGTH_EXPONENT
        return int(math.exp((1.0 - r) * math.log(max(1, output)) + r * math.log(max(1.0, expected))))

    def make(self, prompt: int, output: int, max_output: int, tool_after: float) -> CallSpec:
        self.count += 1
        output = max(1, min(self._predictable(output, prompt), max_output))
        first_chunk = self.draw.first_chunk(prompt)
        p = self.draw.p
        if p.reasoning_share > 0 and self.side.random() < p.reasoning_share:
            first_chunk += self.side.uniform(*p.reasoning_ttft_s)   # thinking before the first token
        return CallSpec(call_id=f"{self.agent_id}-c{self.count}", prompt_tokens=int(prompt),
                        max_output_tokens=max_output, output_tokens=int(output),
                        provider_latency_s=round(first_chunk + self.draw.decode(output), 4),
                        first_chunk_s=round(first_chunk, 4),
                        tool_after_s=round(tool_after, 4), **self._fault())

    def _fault(self) -> dict:
        p, rng = self.draw.p, self.draw.rng
        # Persistence draws only after a persistent fault, so traces without it are unchanged.
        if self.sticky is not None and rng.random() < p.fault_persistence:
            fault = self._sized(self.sticky)
        else:
            fault = self._fresh_fault()
        kind = fault.get("fault")
        persists = (p.fault_persistence > 0 and p.persistence_scope == AGENT and kind in p.persistent_faults)
        self.sticky = kind if persists else None
        if persists:
            retries: list[tuple[str, float]] = []
            while len(retries) < MAX_RETRY_FAULTS and rng.random() < p.fault_persistence:
                sized = self._sized(str(kind))
                retries.append((str(kind), float(sized.get("stall_after_s", sized.get("slow_extra_s", 0.0)))))
            fault["retry_faults"] = tuple(retries)
        return fault

    def _fresh_fault(self) -> dict:
        # One draw decides the fault, so traces without stalls or slow calls are the same
        # as before those kinds existed; their sizes are drawn only when they occur.
        p, rng = self.draw.p, self.draw.rng
        u = rng.random()
        if u < p.hang_rate:
            return {"fault": "hang"}
        if u < p.hang_rate + p.stall_rate:
            return self._sized("stall")
        if u < p.hang_rate + p.stall_rate + p.slow_rate:
            return self._sized("slow")
        return {}

    def _sized(self, kind: str) -> dict:
        p, rng = self.draw.p, self.draw.rng
        if kind == "stall":
            return {"fault": "stall", "stall_after_s": round(rng.uniform(*p.stall_after_s), 4)}
        if kind == "slow":
            return {"fault": "slow", "slow_extra_s": round(rng.uniform(*p.slow_extra_s), 4)}
        return {"fault": kind}


_CLASS_MEDIAN = {INTERACTIVE: lambda p: float(p.interactive_output_median),
                 BATCH: lambda p: p.batch_output_min * 2 ** (1.0 / p.batch_output_alpha),   # Pareto median
                 BACKGROUND: lambda p: float(p.background_output_median)}
_CLASS_PROMPT = {INTERACTIVE: lambda p: float(p.interactive_prompt_start),
                 BATCH: lambda p: float(p.batch_prompt_start),
                 BACKGROUND: lambda p: float(p.background_prompt_start)}


def _run(draw: _Draw, factory: _CallFactory, priority_class: str, n_calls: int, prompt: int,
         cap: int, output_of, max_output: int) -> tuple[list[CallSpec], int]:
    """n_calls calls with tools between them; the prompt grows by each answer and tool result.
    Returns the calls and the prompt size the conversation ends at."""
    calls = []
    for i in range(n_calls):
        last = i == n_calls - 1
        output = output_of()
        tool = 0.0 if last else draw.tool_time(priority_class)
        calls.append(factory.make(min(prompt, cap), output, max_output, tool))
        prompt += min(output, max_output) + (0 if last else draw.tool_result())
        if prompt > cap:
            prompt = draw.p.batch_prompt_start if priority_class == BATCH else cap  # compaction
    return calls, prompt


def _calls_per_run(draw: _Draw, uniform: tuple[int, int]) -> int:
    p = draw.p
    if p.calls_per_run_alpha is None:
        return draw.rng.randint(*uniform)
    return min(p.calls_per_run_cap, max(p.calls_per_run_min,
                                        int(draw.pareto(p.calls_per_run_min, p.calls_per_run_alpha))))


def _interactive(agent_id: str, draw: _Draw, horizon: float) -> AgentScript:
    p, rng = draw.p, draw.rng
    factory, runs, prompt, t = _CallFactory(agent_id, draw, INTERACTIVE), [], p.interactive_prompt_start, 0.0
    while t < horizon:
        think = rng.expovariate(1.0 / p.interactive_think_mean_s)
        t += think
        calls, prompt = _run(draw, factory, INTERACTIVE, _calls_per_run(draw, p.interactive_calls_per_run),
                             prompt, p.interactive_prompt_cap,
                             lambda: int(draw.lognormal(p.interactive_output_median, 0.6)),
                             p.interactive_max_output)
        prompt += 100  # the user's next message
        runs.append(RunSpec(idle_before_s=round(think, 4), not_before_s=0.0, calls=tuple(calls)))
        t += sum(c.provider_latency_s + c.tool_after_s for c in calls)
    return AgentScript(agent_id, INTERACTIVE, tuple(runs))


def _batch(agent_id: str, draw: _Draw, horizon: float) -> AgentScript:
    p, rng = draw.p, draw.rng
    factory, runs, t = _CallFactory(agent_id, draw, BATCH), [], 0.0
    first = True
    while t < horizon:
        # Jobs start staggered over the first minute, then follow each other closely.
        gap = rng.uniform(0.0, 60.0) if first else rng.expovariate(1.0 / p.batch_job_gap_mean_s)
        first = False
        t += gap
        calls, _ = _run(draw, factory, BATCH, _calls_per_run(draw, p.batch_calls_per_job), p.batch_prompt_start,
                        p.batch_prompt_cap, lambda: int(draw.pareto(p.batch_output_min, p.batch_output_alpha)),
                        p.batch_max_output)
        runs.append(RunSpec(idle_before_s=round(gap, 4), not_before_s=0.0, calls=tuple(calls)))
        t += sum(c.provider_latency_s + c.tool_after_s for c in calls)
    return AgentScript(agent_id, BATCH, tuple(runs))


def _background(agent_id: str, draw: _Draw, horizon: float) -> AgentScript:
    p, rng = draw.p, draw.rng
    factory, runs = _CallFactory(agent_id, draw, BACKGROUND), []
    # Cron on a shared period: everyone fires near the same instants (the burst), each agent
    # at its own small offset, as `*/2 * * * *` jobs started by different hosts would.
    offset = rng.uniform(0.0, p.background_jitter_s)
    fire = offset + rng.choice((0.0, p.background_period_s / 2))
    while fire < horizon:
        calls, _ = _run(draw, factory, BACKGROUND, rng.randint(*p.background_calls_per_burst),
                        p.background_prompt_start, p.interactive_prompt_cap,
                        lambda: int(draw.lognormal(p.background_output_median, 0.5)), p.background_max_output)
        runs.append(RunSpec(idle_before_s=0.0, not_before_s=round(fire, 4), calls=tuple(calls)))
        fire += p.background_period_s
    return AgentScript(agent_id, BACKGROUND, tuple(runs))


def class_counts(p: WorkloadParams) -> dict[str, int]:
    interactive = round(p.agents * p.share_interactive)
    batch = min(p.agents - interactive, round(p.agents * p.share_batch))
    return {INTERACTIVE: interactive, BATCH: batch, BACKGROUND: p.agents - interactive - batch}


def slow_windows(params: WorkloadParams, keys: tuple[str, ...]) -> tuple[SlowWindow, ...]:
    """The slow windows of scopes "model" and "window": per key, a two-state chain over
    windows of `persistence_window_s`, slow after slow with probability p and slow after
    healthy with q = r (1 - p) / (1 - r), which makes the long-run share of slow windows the
    call-level slow rate r. Each key has its own stream, so adding a model changes no other."""
    p, r = params.fault_persistence, params.slow_rate
    if p <= 0 or r <= 0 or "slow" not in params.persistent_faults:
        return ()
    q = 1.0 if r >= 1 else min(1.0, r * (1.0 - p) / (1.0 - r))
    width = params.persistence_window_s
    count = math.ceil(params.minutes * 60.0 / width)
    out: list[SlowWindow] = []
    for key in keys:
        rng = random.Random(f"{params.seed}/slow-windows/{key}")
        slow = rng.random() < r
        for i in range(count):
            if slow:
                start = i * width
                if out and out[-1].model == key and out[-1].end_s == start:
                    out[-1] = SlowWindow(key, out[-1].start_s, start + width)
                else:
                    out.append(SlowWindow(key, start, start + width))
            slow = rng.random() < (p if slow else q)
    return tuple(out)


# Trace-driven workloads by `trace_file` name. A trace module builds on this module's types
# and registers its reader here when it is imported (scenarios.py imports them), so this
# module never imports it back.
TRACE_READERS: dict[str, Callable[[WorkloadParams], Trace]] = {}


def generate(params: WorkloadParams) -> Trace:
    """The trace for `params`: the same parameters always give the same trace."""
    params.validate()
    if params.trace_file is not None:
        reader = TRACE_READERS.get(params.trace_file)
        if reader is None:
            raise ValueError(f"no reader for trace {params.trace_file!r}: known {sorted(TRACE_READERS)}")
        return reader(params)
    horizon = params.minutes * 60.0
    agents: list[AgentScript] = []
    makers = {INTERACTIVE: _interactive, BATCH: _batch, BACKGROUND: _background}
    by_model = params.fault_persistence > 0 and params.persistence_scope == MODEL
    index = 0
    for priority_class, count in class_counts(params).items():
        for _ in range(count):
            agent_id = f"{priority_class[:3].lower()}{index:04d}"
            # One stream per agent: adding agents never changes the existing agents' scripts.
            rng = random.Random(f"{params.seed}/{agent_id}")
            script = makers[priority_class](agent_id, _Draw(rng, params), horizon)
            if by_model:
                script = replace(script, model=f"m{index % params.models}")   # round robin: no draw
            agents.append(script)
            index += 1
    windows: tuple[SlowWindow, ...] = ()
    if params.fault_persistence > 0 and params.persistence_scope == MODEL:
        windows = slow_windows(params, tuple(f"m{i}" for i in range(params.models)))
    elif params.fault_persistence > 0 and params.persistence_scope == WINDOW:
        windows = slow_windows(params, ("*",))
    return Trace(params=params, agents=tuple(agents), slow_windows=windows)


def call_attempts(trace: Trace) -> dict[str, list[dict]]:
    """Per agent, the calls it will make in order, with what happens around each: for a live
    check that replays this trace through the real service. `idle_before_s`/`not_before_s`
    apply to the first call of a run (think time, job gap, cron instant); `tool_after_s` is
    spent after a successful answer, outside any turn."""
    out: dict[str, list[dict]] = {}
    for agent in trace.agents:
        seq = []
        for run in agent.runs:
            for i, call in enumerate(run.calls):
                seq.append({
                    "call_id": call.call_id, "priority_class": agent.priority_class,
                    "idle_before_s": run.idle_before_s if i == 0 else 0.0,
                    "not_before_s": run.not_before_s if i == 0 else 0.0,
                    "prompt_tokens": call.prompt_tokens, "max_output_tokens": call.max_output_tokens,
                    "output_tokens": call.output_tokens, "provider_latency_s": call.provider_latency_s,
                    "first_chunk_s": call.first_chunk_s,
                    "tool_after_s": call.tool_after_s, "hangs": call.hangs, "fault": call.fault,
                    "stall_after_s": call.stall_after_s, "slow_extra_s": call.slow_extra_s,
                    "retry_faults": [list(f) for f in call.retry_faults], "model": agent.model,
                })
        out[agent.agent_id] = seq
    return out


@dataclass(frozen=True)
class Demand:
    """What one agent asks of the provider over the horizon if no call ever waits."""
    calls: int          # calls it completes by the horizon
    cost: float         # their service in VTC's cost units (prompt + 2 x completion tokens)
    busy_s: float       # seconds it has a call at the provider (lane-seconds at zero wait)


def zero_wait_demand(trace: Trace) -> dict[str, Demand]:
    """Per agent, the calls it would complete, their cost and its seconds at the provider if
    every call were sent the moment it is wanted and answered in its healthy service time
    (`provider_latency_s`; faults ignored). On a provider that answers in the trace's time no
    policy serves an agent more calls than this: under any policy each call starts no earlier
    and takes no less. (A saturating provider sets its own speed, which can be faster.)"""
    horizon = trace.duration_s
    out: dict[str, Demand] = {}
    for agent in trace.agents:
        t, calls, cost, busy = 0.0, 0, 0.0, 0.0
        for run in agent.runs:
            t = max(t + run.idle_before_s, run.not_before_s)
            for call in run.calls:
                if t >= horizon:
                    break
                busy += min(call.provider_latency_s, horizon - t)
                t += call.provider_latency_s
                if t <= horizon:
                    calls += 1
                    cost += call.prompt_tokens + 2 * call.output_tokens
                t += call.tool_after_s
        out[agent.agent_id] = Demand(calls, cost, busy)
    return out


def zero_wait_load(trace: Trace, lanes: int) -> float:
    """The fleet's zero-wait demand for lanes as a share of them: mean calls in flight if no
    call ever waited, over `lanes` (1.0: the lanes are exactly enough on average)."""
    busy = sum(d.busy_s for d in zero_wait_demand(trace).values())
    return busy / (lanes * trace.duration_s)

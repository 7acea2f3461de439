"""The `mooncake-trace` scenario's workload: a recorded conversation trace played open-loop.

The data: the first 15 minutes (2,728 requests) of the Mooncake FAST'25 conversation trace
(kvcache-ai/Mooncake, `FAST25-release/traces/conversation_trace.jsonl`, Apache-2.0; source,
commit and licence in `data/README.md`). Per request: its arrival (ms from the trace's start),
its input and output lengths, and `hash_ids`, the hashes of its prompt's 512-token prefix
blocks (the release's README: "The block size is 512 tokens. Identical hash IDs indicate
reusable prefix KV cache blocks").

How it becomes a Trace (workload.Trace, so every policy, metric and bound reads it as it reads
the synthetic fleet):
- Agents are conversations. The trace has no session id, so a request joins the conversation
  of the latest earlier request with which it shares the longest prefix of at least two
  blocks; block 0 is shared by every request (a common system prompt), so sharing it alone
  links nothing. A conversation's next turn carries the last turn's prompt and answer as its
  prefix, which is what this follows. Requests that share a longer prefix with no one start a
  conversation of their own (1,895 conversations in the excerpt; most have one turn in 15
  minutes). Every agent is INTERACTIVE: the trace is chat.
- Arrivals are open-loop: each request is a run of one call that starts at its trace time
  divided by the speed-up (`RunSpec.not_before_s`), whatever the provider does; only within a
  conversation does a turn wait for the previous turn's answer (a user answers what they read).
  Requests past the horizon (`minutes`) are left out.
- Load: the speed-up makes the excerpt's zero-wait demand for lanes `trace_load` x
  `trace_lanes`: the excerpt's noiseless, uncached service (first token + decode below) per
  second of trace time, times the speed-up, is that many lanes busy. The prefix cache makes
  the real demand lower than this nominal one, for every policy alike.
- Service: as the synthetic workload's provider (scenarios.py): time to first token (0.4 s +
  prefill at 20k tokens/s) x a lognormal factor (sigma 0.5, median 1), then decode at 60
  tokens/s. The factor is drawn per request from a stream of the seed and the request's index,
  so it is the same at every load; the seed changes only it (the arrivals are the trace's).
  `CallSpec.prefill_s` is the prefill's part of the first token (times the same factor); the
  provider's prefix cache (sim.PrefixCache) spares the cached blocks' share of it.
- max_tokens: 4096, or the answer's length if longer (the trace does not record the request's
  cap).
"""
from __future__ import annotations

import gzip
import json
import math
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .workload import INTERACTIVE, TRACE_READERS, AgentScript, CallSpec, RunSpec, Trace, WorkloadParams

DATA_DIR = Path(__file__).parent / "data"
TRACES = {"mooncake-conversation": "mooncake_conversation_15min.jsonl.gz"}
MAX_OUTPUT_TOKENS = 4096
# Requests share a conversation when they share at least this many leading blocks (block 0
# is everyone's).
MIN_SHARED_BLOCKS = 2


@dataclass(frozen=True)
class TraceRequest:
    at_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@lru_cache(maxsize=4)
def load_requests(name: str) -> tuple[TraceRequest, ...]:
    """The bundled excerpt `name` (a key of TRACES), in arrival order."""
    if name not in TRACES:
        raise ValueError(f"unknown trace {name!r} (known: {', '.join(TRACES)})")
    with gzip.open(DATA_DIR / TRACES[name], "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    requests = [TraceRequest(r["timestamp"] / 1000.0, int(r["input_length"]), int(r["output_length"]),
                             tuple(int(h) for h in r["hash_ids"])) for r in rows]
    return tuple(sorted(requests, key=lambda r: r.at_s))


def _shared(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def conversations(requests: tuple[TraceRequest, ...]) -> list[int]:
    """Per request, its conversation's index (module docstring: the latest earlier request with
    the longest shared prefix of at least MIN_SHARED_BLOCKS blocks)."""
    by_head: dict[tuple[int, ...], list[int]] = {}
    out: list[int] = []
    count = 0
    for i, req in enumerate(requests):
        head = req.hash_ids[:MIN_SHARED_BLOCKS]
        best, best_len = None, MIN_SHARED_BLOCKS - 1
        if len(head) == MIN_SHARED_BLOCKS:
            for j in reversed(by_head.get(head, [])):
                n = _shared(requests[j].hash_ids, req.hash_ids)
                if n > best_len:
                    best, best_len = j, n
            by_head.setdefault(head, []).append(i)
        if best is None:
            out.append(count)
            count += 1
        else:
            out.append(out[best])
    return out


def _first_token_s(p: WorkloadParams, prompt: int) -> tuple[float, float]:
    """(time to first token, its prefill part) before the lognormal factor."""
    prefill = prompt / p.prefill_tokens_per_s
    return p.ttft_base_s + prefill, prefill


def service_s(p: WorkloadParams, req: TraceRequest) -> float:
    """A request's noiseless, uncached service: first token and decode."""
    return _first_token_s(p, req.input_length)[0] + max(1, req.output_length) / p.decode_tokens_per_s


def speedup(p: WorkloadParams, requests: tuple[TraceRequest, ...]) -> float:
    """How much faster than recorded the excerpt is played for `p.trace_load` x `p.trace_lanes`."""
    span = requests[-1].at_s - requests[0].at_s
    lanes_busy = sum(service_s(p, r) for r in requests) / span     # at the recorded pace
    return p.trace_load * p.trace_lanes / lanes_busy


def generate_from_trace(p: WorkloadParams) -> Trace:
    """The Trace of the excerpt `p.trace_file` at `p.trace_load`, for seed `p.seed`."""
    assert p.trace_file is not None
    requests = load_requests(p.trace_file)
    k = speedup(p, requests)
    start, horizon = requests[0].at_s, p.minutes * 60.0
    runs: dict[int, list[RunSpec]] = {}
    for index, (req, conv) in enumerate(zip(requests, conversations(requests))):
        at = (req.at_s - start) / k
        if at >= horizon:
            break
        rng = random.Random(f"{p.seed}/mooncake/{index}")
        factor = math.exp(rng.gauss(0.0, p.ttft_sigma))
        first, prefill = _first_token_s(p, req.input_length)
        output = max(1, req.output_length)
        call = CallSpec(call_id=f"req{index:05d}", prompt_tokens=req.input_length,
                        max_output_tokens=max(MAX_OUTPUT_TOKENS, output), output_tokens=output,
                        provider_latency_s=round(first * factor + output / p.decode_tokens_per_s, 4),
                        first_chunk_s=round(first * factor, 4), tool_after_s=0.0,
                        prefix_blocks=req.hash_ids, prefill_s=round(prefill * factor, 4))
        runs.setdefault(conv, []).append(RunSpec(idle_before_s=0.0, not_before_s=round(at, 4), calls=(call,)))
    agents = tuple(AgentScript(f"conv{conv:04d}", INTERACTIVE, tuple(r)) for conv, r in sorted(runs.items()))
    return Trace(params=p, agents=agents)


TRACE_READERS.update({name: generate_from_trace for name in TRACES})

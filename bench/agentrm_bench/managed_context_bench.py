"""`agentrm bench managed-context`: an agent's conversation outgrows its model's window
through the gateway, end to end (the real server and log, the openai SDK, a recording
upstream whose model has a small window).

Scenario (fixed before any tuning): each LoCoMo conversation (``--locomo DIR``) is played
as one agent's chat, speaker_a as the user and speaker_b as the assistant. Every
``cadence`` turns (8-12, drawn per seed) the client calls the model with its whole history
so far, as most frameworks do; ``--facts`` planted facts ("Note for later: the locker code
of NAME is CODE.") are inserted at seed-drawn places. At the end the agent asks each
planted fact and every LoCoMo question of categories 1-4, each as one call: its history
plus the question. Three clients, each on its own agent, at the same prompt size (the
model's window minus the call's output bound):

- ``managed``: sends everything, with ``x-agentrm-context: managed``;
- ``last-n``: truncates itself, keeping the system message and the latest messages that
  fit the budget (counted with the same tokenizer): what most frameworks do;
- ``none``: sends everything, unmanaged: the provider's context error once the history
  passes the window.

Scores, from what the upstream received: calls completed; evidence recall (the share of a
question's evidence turns whose text is in the forwarded prompt; a failed call holds
none); planted facts held (the code is in the forwarded prompt). Repeats are seeds; the
spread is over them.
"""
from __future__ import annotations

import asyncio
import json
import random
import socket
import statistics
import string
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import uvicorn

from app import config
from app.context.tokens import count_text
from app.gateway.wire import OPENAI

from .locomo import Conversation, load_dir

STRATEGIES = ("managed", "last-n", "none")
SYSTEM = "You are a helpful assistant in a long-running conversation."
MODEL = "bench-small-window"
OUTPUT_TOKENS = 256
NAMES = ("Avery", "Blake", "Casey", "Devon", "Emery", "Finley", "Harper", "Jordan", "Kendall", "Logan",
         "Morgan", "Parker", "Quinn", "Riley", "Sawyer", "Taylor")
TARGETS = {"recall_gain_points": 15.0, "planted_held": 0.95}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RecordingUpstream:
    """An OpenAI-compatible model with a context window: a prompt (tiktoken cl100k_base, as
    the gateway counts) plus its output bound over the window gets the provider's context
    error; every other call is answered "ok" and its body kept."""

    def __init__(self, window: int):
        self.window = window
        self.bodies: list[dict] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(raw or b"{}")
        prompt = OPENAI.count_prompt(body, "cl100k_base")
        payload: dict[str, Any]
        if prompt + OPENAI.max_output_tokens(body) > self.window:
            status, payload = 400, {"error": {"message": f"This model's maximum context length is {self.window} "
                                              f"tokens; you requested {prompt} in the messages.",
                                              "type": "invalid_request_error", "param": "messages",
                                              "code": "context_length_exceeded"}}
        else:
            self.bodies.append(body)
            status, payload = 200, {"id": "chatcmpl-bench", "object": "chat.completion", "created": 0,
                                    "model": body.get("model"), "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": "ok"}}],
                                    "usage": {"prompt_tokens": prompt, "completion_tokens": 1,
                                              "total_tokens": prompt + 1}}
        data = json.dumps(payload).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})


async def _serve(app, port: int) -> uvicorn.Server:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on" if not isinstance(app, RecordingUpstream) else "off",
                                           timeout_graceful_shutdown=5))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.05)
    server.task = task   # type: ignore[attr-defined]
    return server


async def _stop(server: uvicorn.Server) -> None:
    server.should_exit = True
    await server.task   # type: ignore[attr-defined]


@dataclass
class Planted:
    name: str
    code: str
    at: int     # index into the conversation's turns: inserted before it


@dataclass
class Script:
    """One seed's play of one conversation: the messages, when calls are made, the asks."""
    messages: list[dict]
    call_after: list[int]                      # message counts at which the client calls
    planted: list[Planted]
    questions: list[tuple[str, list[str]]]     # (question, the evidence turns' texts)
    fact_questions: list[tuple[str, str]] = field(default_factory=list)   # (question, code)


def script_of(conversation: Conversation, seed: int, facts: int) -> Script:
    rng = random.Random(f"{conversation.name}/{seed}")
    n = len(conversation.turns)
    places = sorted(rng.sample(range(n // 10, 8 * n // 10), facts))
    names = rng.sample(NAMES, facts)
    planted = [Planted(names[i], "".join(rng.choices(string.ascii_uppercase + string.digits, k=6)), at)
               for i, at in enumerate(places)]
    messages: list[dict] = []
    call_after: list[int] = []
    next_call = rng.randint(8, 12)
    by_place = {p.at: p for p in planted}
    for i, turn in enumerate(conversation.turns):
        if i in by_place:
            p = by_place[i]
            messages.append({"role": "user", "content": f"Note for later: the locker code of {p.name} is {p.code}."})
        messages.append({"role": turn.role, "content": turn.content})
        next_call -= 1
        if next_call == 0:
            call_after.append(len(messages))
            next_call = rng.randint(8, 12)
    text = {t.dia_id: t.text for t in conversation.turns}
    questions = [(q.question, [text[e] for e in q.evidence]) for q in conversation.questions]
    fact_questions = [(f"What is the locker code of {p.name}?", p.code) for p in planted]
    return Script(messages, call_after, planted, questions, fact_questions)


def _prompt_text(body: dict) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages") or ())


def last_n(messages: list[dict], budget: int) -> list[dict]:
    """The client's own truncation: the system message, then the latest messages that fit."""
    system, rest = messages[0], messages[1:]
    kept: list[dict] = []
    for m in reversed(rest):
        if OPENAI.count_prompt({"messages": [system, m, *kept]}, "cl100k_base") > budget:
            break
        kept.insert(0, m)
    return [system, *kept]


class Agent:
    def __init__(self, strategy: str, client: openai.AsyncOpenAI, upstream: RecordingUpstream, budget: int):
        self.strategy, self.client, self.upstream, self.budget = strategy, client, upstream, budget
        self.calls = self.completed = 0
        self.prompt_tokens: list[int] = []
        self.seconds: list[float] = []
        self.tiers: dict[str, int] = {}

    async def call(self, messages: list[dict]) -> str | None:
        """The forwarded prompt's text, or None when the call failed."""
        sent = last_n(messages, self.budget) if self.strategy == "last-n" else messages
        headers = {"x-agentrm-context": "managed"} if self.strategy == "managed" else {}
        self.calls += 1
        before = len(self.upstream.bodies)
        started = time.perf_counter()
        try:
            raw = await self.client.chat.completions.with_raw_response.create(
                model=MODEL, messages=cast(Any, sent), max_tokens=OUTPUT_TOKENS, extra_headers=headers)
        except openai.BadRequestError:
            return None
        finally:
            self.seconds.append(time.perf_counter() - started)
        self.completed += 1
        tiers = raw.headers.get("x-agentrm-context-tiers")
        if tiers:
            self.tiers[tiers] = self.tiers.get(tiers, 0) + 1
        body = self.upstream.bodies[before] if len(self.upstream.bodies) > before else {}
        self.prompt_tokens.append(OPENAI.count_prompt(body, "cl100k_base"))
        return _prompt_text(body)


async def play(agent: Agent, script: Script) -> dict:
    system = {"role": "system", "content": SYSTEM}
    for count in script.call_after:
        await agent.call([system, *script.messages[:count]])
    history = [system, *script.messages]
    held = 0
    for question, code in script.fact_questions:
        text = await agent.call([*history, {"role": "user", "content": question}])
        held += bool(text and code in text)
    recalls = []
    for question, evidence in script.questions:
        text = await agent.call([*history, {"role": "user", "content": question}])
        recalls.append(sum(e in (text or "") for e in evidence) / len(evidence))
    return {"calls": agent.calls, "completed": agent.completed,
            "evidence_recall": statistics.fmean(recalls) if recalls else None,
            "questions": len(recalls), "planted": len(script.fact_questions), "planted_held": held,
            "prompt_tokens_mean": round(statistics.fmean(agent.prompt_tokens), 1) if agent.prompt_tokens else None,
            "prompt_tokens_max": max(agent.prompt_tokens, default=None),
            "call_s_p50": round(statistics.median(agent.seconds), 4) if agent.seconds else None,
            "tiers": agent.tiers}


async def run_async(url: str, locomo: Path, *, seeds: list[int], window: int, facts: int) -> dict:
    from app.api.app import create_app
    # The recording model runs on loopback, which a pool may call only when the operator allows it.
    config.allow_loopback_upstreams()
    conversations = load_dir(locomo)
    operator = "op_bench_" + "".join(random.choices(string.ascii_lowercase, k=16))
    upstream = RecordingUpstream(window)
    up_port, port = _free_port(), _free_port()
    up_server = await _serve(upstream, up_port)
    server = await _serve(create_app(url, op_token=operator), port)
    base = f"http://127.0.0.1:{port}"
    budget = window - OUTPUT_TOKENS
    runs: list[dict] = []
    try:
        async with httpx.AsyncClient(base_url=base, timeout=120) as http:
            async def gql(query: str, **variables) -> dict:
                answer = (await http.post("/graphql", json={"query": query, "variables": variables},
                                          headers={"authorization": f"Bearer {operator}"})).json()
                if answer.get("errors"):
                    raise RuntimeError(answer["errors"])
                return answer["data"]
            await gql("mutation($i: PoolInput!) { createPool(input: $i) { name } }", i={
                "name": "managed_bench", "lanes": 8, "rpm": 1_000_000, "tpm": 1_000_000_000,
                "upstreamBaseUrl": f"http://127.0.0.1:{up_port}/v1", "upstreamApiKey": "sk-bench",
                "contextWindowTokens": window})
            for seed in seeds:
                for conversation in conversations:
                    script = script_of(conversation, seed, facts)
                    run: dict[str, Any] = {"seed": seed, "conversation": conversation.name, "strategies": {}}
                    for strategy in STRATEGIES:
                        agent_name = f"{strategy.replace('-', '_')}_{conversation.name}_{seed}"
                        data = await gql("mutation($i: RegisterAgentInput!) { registerAgent(input: $i) { token } }",
                                         i={"name": agent_name, "pool": "managed_bench"})
                        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=data["registerAgent"]["token"],
                                                    max_retries=0, timeout=120)
                        result = await play(Agent(strategy, client, upstream, budget), script)
                        await client.close()
                        run["strategies"][strategy] = result
                        print(f"seed {seed} {conversation.name} {strategy}: recall {result['evidence_recall']:.3f} "
                              f"planted {result['planted_held']}/{result['planted']} "
                              f"completed {result['completed']}/{result['calls']}", flush=True)
                    runs.append(run)
    finally:
        await _stop(server)
        await _stop(up_server)
    return summarise(runs, window=window, budget=budget, facts=facts, seeds=seeds,
                     history_tokens={c.name: count_text("\n".join(t.content for t in c.turns)) for c in conversations})


def _spread(values: list[float]) -> dict:
    return {"mean": round(statistics.fmean(values), 4), "min": round(min(values), 4), "max": round(max(values), 4),
            "stdev": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0, "n": len(values)}


def summarise(runs: list[dict], **settings) -> dict:
    strategies: dict[str, dict] = {}
    for name in STRATEGIES:
        per_seed_held, completed, calls = [], 0, 0
        for seed in settings["seeds"]:
            mine = [r["strategies"][name] for r in runs if r["seed"] == seed]
            per_seed_held.append(sum(m["planted_held"] for m in mine) / max(1, sum(m["planted"] for m in mine)))
            completed += sum(m["completed"] for m in mine)
            calls += sum(m["calls"] for m in mine)
        per_seed_recall = _per_seed(runs, name, settings["seeds"])
        tokens = [r["strategies"][name]["prompt_tokens_mean"] for r in runs
                  if r["strategies"][name]["prompt_tokens_mean"]]
        strategies[name] = {"evidence_recall": _spread(per_seed_recall), "planted_held": _spread(per_seed_held),
                            "calls": calls, "completed": completed,
                            "prompt_tokens_mean": round(statistics.fmean(tokens), 1) if tokens else None,
                            "prompt_tokens_max": max((m["strategies"][name]["prompt_tokens_max"] or 0) for m in runs)}
    seeds = settings["seeds"]
    gain = [(m - n) * 100 for m, n in zip(_per_seed(runs, "managed", seeds), _per_seed(runs, "last-n", seeds),
                                          strict=True)]
    managed = strategies["managed"]
    targets = {"every_call_completes": managed["completed"] == managed["calls"],
               "recall_gain_points": _spread(gain),
               "recall_gain_met": min(gain) >= TARGETS["recall_gain_points"],
               "planted_held_met": managed["planted_held"]["min"] >= TARGETS["planted_held"],
               "within_budget": (managed["prompt_tokens_max"] or 0) <= settings["budget"]}
    return {"settings": settings, "strategies": strategies, "targets": targets, "runs": runs}


def _per_seed(runs: list[dict], name: str, seeds: list[int]) -> list[float]:
    out = []
    for seed in seeds:
        mine = [r["strategies"][name] for r in runs if r["seed"] == seed]
        questions = sum(m["questions"] for m in mine)
        out.append(sum(m["evidence_recall"] * m["questions"] for m in mine) / max(1, questions))
    return out


def render_markdown(r: dict) -> str:
    s = r["settings"]
    lines = ["# Managed context through the gateway", "",
             f"Model window {s['window']:,} tokens, output bound {OUTPUT_TOKENS}: prompt budget {s['budget']:,} "
             f"tokens for every strategy. LoCoMo conversations of "
             + ", ".join(f"{name}: {tokens:,} tokens" for name, tokens in s["history_tokens"].items())
             + f"; {s['facts']} planted facts per conversation; seeds {', '.join(map(str, s['seeds']))} "
             "(the spread is over them).", "",
             "| strategy | calls completed | evidence recall (mean, min-max over seeds) | planted facts held | "
             "forwarded prompt tokens (mean / max) |", "|---|---|---|---|---|"]
    for name, m in r["strategies"].items():
        recall, held = m["evidence_recall"], m["planted_held"]
        lines.append(f"| {name} | {m['completed']}/{m['calls']} | {recall['mean']:.1%} ({recall['min']:.1%}-"
                     f"{recall['max']:.1%}) | {held['mean']:.1%} ({held['min']:.1%}-{held['max']:.1%}) | "
                     f"{m['prompt_tokens_mean']} / {m['prompt_tokens_max']} |")
    t = r["targets"]
    gain = t["recall_gain_points"]
    lines += ["", "Targets:", "",
              f"- every managed call completes: {'yes' if t['every_call_completes'] else 'NO'}",
              f"- managed evidence recall over last-N truncation: +{gain['mean']:.1f} points "
              f"(min {gain['min']:.1f}, max {gain['max']:.1f} over seeds; target >= 15): "
              f"{'met' if t['recall_gain_met'] else 'NOT met'}",
              f"- planted facts held (managed, worst seed {r['strategies']['managed']['planted_held']['min']:.1%}; "
              f"target >= 95%): {'met' if t['planted_held_met'] else 'NOT met'}",
              f"- every forwarded prompt within the budget: {'yes' if t['within_budget'] else 'NO'}", ""]
    return "\n".join(lines)

"""The four abusers of `agentrm bench abuse`, in a process of their own.

Why a process: the honest agents' latencies are timed in the benchmark's event loop, and
the abusers' client work (a flood of requests, hundreds of WebSocket frames) in that loop
would delay the honest agents' timers and callbacks, which would read as the server being
slower. Here they share the machine's two cores with everything else, as a real abuser
would, but not the honest agents' interpreter.

`python -m agentrm_bench.abusers` reads one JSON object on stdin (the server's address,
each abuser's token, the wall-clock second to start and to stop, a seed) and prints what
each abuser did and what the server answered, counted by answer, as one JSON object.
"""
from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections import Counter

import httpx
import websockets
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.typing import Subprotocol

from . import abuse_scenario as s
from .abuse_scenario import graphql


async def _sleep_until(at: float) -> None:
    await asyncio.sleep(max(0.0, at - time.time()))


async def flood(base: str, token: str, until: float, seed: int) -> dict:
    """Open-loop (Poisson) requests at FLOOD_RATE_PER_S, each waiting up to WAIT_S for its
    grant; a granted turn is held HOLD_S and completed at once. Completions and cancels go
    over connections of their own, so they never queue behind the flood's waiting
    requests (a slow completion would hold a lane longer than a greedy client does). At
    the end the requests still waiting are dropped; the benchmark cancels their turns."""
    rng, counts = random.Random(seed), Counter[str]()
    limits = httpx.Limits(max_connections=s.FLOOD_CONNECTIONS, max_keepalive_connections=s.FLOOD_CONNECTIONS)
    async with httpx.AsyncClient(base_url=base, timeout=s.WAIT_S + 60, limits=limits) as asking, \
            httpx.AsyncClient(base_url=base, timeout=60) as finishing:
        waiting: set[asyncio.Task] = set()

        async def one() -> None:
            counts["requests"] += 1
            data, code = await graphql(asking, token, s.REQUEST, {"wait": s.WAIT_S})
            waiting.discard(asyncio.current_task())
            if data is None:
                counts[f"refused {code}"] += 1
                return
            turn = data["requestTurn"]
            if turn["status"] != "GRANTED":
                counts[f"not granted in {s.WAIT_S:g} s ({turn['status']})"] += 1
                await graphql(finishing, token, s.CANCEL, {"id": turn["id"]})
                return
            counts["granted"] += 1
            await asyncio.sleep(s.HOLD_S)
            _, code = await graphql(finishing, token, s.COMPLETE_OK, {"id": turn["id"]})
            counts["completed" if code is None else f"completion refused {code}"] += 1

        running: set[asyncio.Task] = set()
        at = time.time()
        while True:
            at += rng.expovariate(s.FLOOD_RATE_PER_S)
            if at >= until:
                break
            await _sleep_until(at)
            task = asyncio.create_task(one())
            running.add(task)
            waiting.add(task)
            task.add_done_callback(running.discard)
        counts["requests still waiting at the end"] = len(waiting)
        for task in list(waiting):
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
    return dict(counts)


def junk_message(run: str, length: int) -> str:
    return (run * (length // len(run) + 1))[:length]


async def append_junk(base: str, token: str, until: float, seed: int) -> dict:
    """A pathological message every JUNK_INTERVAL_S (one in flight), a compaction request
    after every COMPACT_EVERY-th."""
    rng, counts, seconds = random.Random(seed), Counter[str](), []
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        at, sent = time.time(), 0
        while time.time() < until:
            run = s.JUNK_RUNS[sent % len(s.JUNK_RUNS)]
            content = junk_message(run, rng.randint(*s.JUNK_CHARS))
            started = time.perf_counter()
            _, code = await graphql(http, token, s.APPEND, {"r": "tool" if sent % 2 else "user", "c": content})
            seconds.append(time.perf_counter() - started)
            counts["appended" if code is None else f"append refused {code}"] += 1
            counts["characters sent"] += len(content)
            sent += 1
            if sent % s.COMPACT_EVERY == 0:
                data, code = await graphql(http, token, s.COMPACT)
                counts[f"compaction refused {code}" if data is None else
                       "compacted" if data["compactContext"]["compacted"] else "compaction: nothing to do"] += 1
            at += s.JUNK_INTERVAL_S
            await _sleep_until(at)
    out: dict[str, float] = dict(counts)
    if seconds:
        seconds.sort()
        out["append_p50_ms"] = round(seconds[len(seconds) // 2] * 1000, 1)
        out["append_max_ms"] = round(seconds[-1] * 1000, 1)
    return out


def _refusal(message: dict) -> str:
    payload = message.get("payload")
    first = (payload[0] if isinstance(payload, list) and payload else
             (payload or {}).get("errors", [{}])[0] if isinstance(payload, dict) else {})
    return f"refused {(first.get('extensions') or {}).get('code', 'ERROR')}"


async def _answers(ws, pending: set[str], accepted: set[str], counts: Counter) -> None:
    """Each subscription's first answer (a `next` accepts it, an `error` refuses it), for at
    most SUB_ANSWER_S. The ones left in `pending` had no answer."""
    deadline = time.monotonic() + s.SUB_ANSWER_S
    while pending and time.monotonic() < deadline:
        try:
            message = json.loads(await asyncio.wait_for(ws.recv(), deadline - time.monotonic()))
        except TimeoutError:
            break
        if message.get("type") == "ping":
            await ws.send(json.dumps({"type": "pong"}))
        elif message.get("id") in pending:
            pending.discard(message["id"])
            if message["type"] == "next" and not message["payload"].get("errors"):
                accepted.add(message["id"])
                counts["accepted"] += 1
            else:
                counts[_refusal(message)] += 1


async def _one_connection(url: str, token: str, k: int, after: int, until: float, counts: Counter) -> None:
    n = s.SUBS_PER_CONNECTION
    try:
        ws = await websockets.connect(url, subprotocols=[Subprotocol("graphql-transport-ws")],
                                      open_timeout=s.SUB_ANSWER_S, max_size=None)
    except (OSError, WebSocketException, TimeoutError) as exc:
        counts[f"refused at connect ({type(exc).__name__})"] += n
        return
    pending: set[str] = set()
    accepted: set[str] = set()     # accepted and not ended since
    acked = False
    try:
        await ws.send(json.dumps({"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}))
        try:
            ack = json.loads(await asyncio.wait_for(ws.recv(), s.SUB_ANSWER_S))
        except TimeoutError:
            counts[f"refused at init (no ack in {s.SUB_ANSWER_S:g} s)"] += n
            return
        if ack.get("type") != "connection_ack":
            counts[f"refused at init ({ack.get('type')})"] += n
            return
        acked = True
        pending = {f"{k}-{j}" for j in range(n)}
        for op in sorted(pending):
            await ws.send(json.dumps({"id": op, "type": "subscribe",
                                      "payload": {"query": s.SUBSCRIBE, "variables": {"after": after}}}))
        await _answers(ws, pending, accepted, counts)
        counts["no answer"] += len(pending)
        pending = set()
        # Held: read (and answer pings) until the phase ends.
        while time.time() < until:
            try:
                message = json.loads(await asyncio.wait_for(ws.recv(), max(0.1, until - time.time())))
            except TimeoutError:
                break
            if message.get("type") == "ping":
                await ws.send(json.dumps({"type": "pong"}))
            elif message.get("type") in ("error", "complete") and message.get("id") in accepted:
                accepted.discard(message["id"])
                counts["ended by the server"] += 1
        counts["held to the end"] += len(accepted)
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd else "no close frame"
        if not acked:
            counts[f"refused at init (closed {code})"] += n
        else:
            counts[f"refused (connection closed {code})"] += len(pending)
            counts[f"ended by the server (connection closed {code})"] += len(accepted)
    finally:
        await ws.close()


async def hold_subscriptions(base: str, token: str, until: float, after: int) -> dict:
    """SUB_CONNECTIONS connections of SUBS_PER_CONNECTION `events` subscriptions each, from
    `after` (just before the agent's registration, so an accepted one answers at once with
    the registration), held until the phase ends."""
    counts: Counter = Counter()
    url = base.replace("http://", "ws://", 1) + "/graphql"
    await asyncio.gather(*(_one_connection(url, token, k, after, until, counts) for k in range(s.SUB_CONNECTIONS)))
    counts["attempted"] = s.SUB_CONNECTIONS * s.SUBS_PER_CONNECTION
    return dict(counts)


async def claim_429s(base: str, token: str, until: float, seed: int) -> dict:
    """An honest agent's pace, but every granted turn ends RATE_LIMITED with an hour's
    retry-after and headers saying nothing remains."""
    rng, counts = random.Random(seed), Counter[str]()
    async with httpx.AsyncClient(base_url=base, timeout=s.WAIT_S + 60) as http:
        while time.time() < until:
            wait = max(0.0, min(s.WAIT_S, until - time.time()))
            data, code = await graphql(http, token, s.REQUEST, {"wait": wait})
            if data is None:
                counts[f"request refused {code}"] += 1
            elif data["requestTurn"]["status"] != "GRANTED":
                counts[f"not granted by the end ({data['requestTurn']['status']})"] += 1
                await graphql(http, token, s.CANCEL, {"id": data["requestTurn"]["id"]})
            else:
                counts["granted"] += 1
                await asyncio.sleep(s.HOLD_S)
                _, code = await graphql(http, token, s.COMPLETE_CLAIM, {"id": data["requestTurn"]["id"],
                                                                        "retry": s.CLAIM_RETRY_AFTER_S,
                                                                        "headers": s.CLAIM_HEADERS})
                counts["429 claims accepted" if code is None else f"429 claim refused {code}"] += 1
            await asyncio.sleep(rng.uniform(s.THINK_MIN_S, s.THINK_MAX_S))
    return dict(counts)


ROLES = ("flooder", "junk", "subscriber", "claimant")


async def run(spec: dict) -> dict:
    base, tokens, start, until, seed = spec["base"], spec["tokens"], spec["start"], spec["until"], spec["seed"]
    await _sleep_until(start)
    cpu = time.process_time()
    roles = spec.get("roles") or list(ROLES)
    plays = {"flooder": lambda: flood(base, tokens["flooder"], until, seed),
             "junk": lambda: append_junk(base, tokens["junk"], until, seed + 1),
             "subscriber": lambda: hold_subscriptions(base, tokens["subscriber"], until, spec["subscribe_after"]),
             "claimant": lambda: claim_429s(base, tokens["claimant"], until, seed + 2)}
    answers = await asyncio.gather(*(plays[role]() for role in roles))
    return {**{role: {} for role in ROLES}, **dict(zip(roles, answers, strict=True)),
            "cpu_s": round(time.process_time() - cpu, 2)}


def main() -> int:
    print(json.dumps(asyncio.run(run(json.loads(sys.stdin.read()))), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A small demo fleet of simulated agents, so the console shows live work under `make run`.

They use the same service calls a real agent's GraphQL requests reach: interactive agents
make short calls with think time, batch agents long calls back to back, a background
agent bursts; now and then a provider answers 429, and one call in fifty hangs (it never
sends its first chunk, so its start deadline expires and the reaper frees the lane). They
stream: each heartbeats when its answer's first chunk arrives.

The fleet works in a pool of its own, `demo` (created at its first start), with limits of
its own: an agent's report of a 429 pauses that agent briefly (an agent's report is a
claim, not a fact: docs/operations/security.md), and never touches the `default` pool,
which serves a newcomer's first gateway call at full speed."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import random

import asyncpg

from app.auth import OPERATOR, Principal
from app.domain import events as ev
from app.domain.settings import PoolSettings
from app.errors import Conflict, ServiceError
from app.tasks import cancel_all

log = logging.getLogger(__name__)

# Six agents ask for about 60 calls and 300,000 tokens a minute; these limits take that
# with room to spare, and its 429s (3 in 100 calls) show agents' own pauses in the console.
DEMO_POOL = PoolSettings(name="demo", lanes=4, rpm=600, tpm=600_000, lease_seconds=30.0)

FLEET = [("demo-chat-1", ev.INTERACTIVE), ("demo-chat-2", ev.INTERACTIVE), ("demo-chat-3", ev.INTERACTIVE),
         ("demo-batch-1", ev.BATCH), ("demo-batch-2", ev.BATCH), ("demo-cron", ev.BACKGROUND)]


async def _agent_loop(rt, agent_id: str, priority_class: str, rng: random.Random) -> None:
    svc, me = rt.service, Principal("agent", agent_id)
    while True:
        try:
            if svc.agent_view(agent_id)["state"] == ev.QUARANTINED:
                await asyncio.sleep(5)
                await svc.release_agent(OPERATOR, agent_id)
                continue
            batchy = priority_class != ev.INTERACTIVE
            tokens = rng.randint(2000, 12000) if batchy else rng.randint(300, 3000)
            turn = await svc.request_turn(me, tokens, 512, wait_seconds=30, streams=True)
            if turn["status"] != ev.GRANTED:
                await asyncio.sleep(1)
                continue
            if rng.random() < 0.02:
                continue  # a hung call: no first chunk ever; the start deadline reaps it
            first_chunk = rng.uniform(0.2, 0.8) * (3 if batchy else 1)
            await asyncio.sleep(first_chunk)
            await svc.heartbeat(me, turn["turn_id"])    # the answer's first chunk
            call = max(0.0, (rng.uniform(2, 8) if batchy else rng.uniform(0.3, 1.5)) - first_chunk)
            while call > 10:
                await asyncio.sleep(10)
                call -= 10
                await svc.heartbeat(me, turn["turn_id"])
            await asyncio.sleep(call)
            if rng.random() < 0.03:
                await svc.complete_turn(me, turn["turn_id"], ev.RATE_LIMITED, 0, 0, 2.0,
                                        {"x-ratelimit-remaining-requests": "0"})
            else:
                await svc.complete_turn(me, turn["turn_id"], ev.OK, tokens, rng.randint(50, 500))
                if not batchy and rng.random() < 0.5:
                    n = svc.agent_view(agent_id)["completions"]
                    await rt.context.append(me, [("user", f"Question {n}: how is ticket DEMO-{n % 7} going?", False),
                                                 ("assistant", f"Ticket DEMO-{n % 7} is at step {n}; next we must "
                                                  f"rerun the checks in /srv/demo/{n % 3}.", False)])
            await asyncio.sleep(rng.uniform(0, 1) if batchy else rng.uniform(2, 6))  # tool time / thinking
        except asyncio.CancelledError:
            raise
        except ServiceError as exc:
            log.debug("demo agent %s: %s", agent_id, exc)
            await asyncio.sleep(1)


DEMO_LOCK = 0x44454D4F  # "DEMO": with several workers, one of them drives the fleet


async def _ensure_pool(service) -> None:
    if DEMO_POOL.name not in service.model.pools:
        await service.projector.catch_up()
    if DEMO_POOL.name not in service.model.pools:
        with contextlib.suppress(Conflict):   # another start made it a moment ago
            await service.create_pool(OPERATOR, DEMO_POOL)


def start_demo(rt, seed: int = 7) -> asyncio.Task:
    """Drive the demo fleet in a task (which ends at once if another worker drives it)."""
    return asyncio.create_task(_run_demo(rt, seed), name="demo-fleet")


async def _run_demo(rt, seed: int) -> None:
    # A connection of its own, as the schedulers' locks have: the lock is the session's, and
    # closing the session releases it, whatever happens to this task.
    lock_conn = await asyncpg.connect(rt.url)
    tasks: list[asyncio.Task] = []
    try:
        if not await lock_conn.fetchval("SELECT pg_try_advisory_lock($1)", DEMO_LOCK):
            return
        rng = random.Random(seed)
        await _ensure_pool(rt.service)
        existing = {v["name"]: v for v in rt.service.list_agents(OPERATOR, DEMO_POOL.name)}
        agents = []
        for name, cls in FLEET:
            view = existing.get(name)
            if view is None:
                view, _token = await rt.service.register_agent(OPERATOR, name, DEMO_POOL.name, cls)
            agents.append((view["agent_id"], cls))
        tasks = [asyncio.create_task(_agent_loop(rt, a, c, random.Random(rng.random()))) for a, c in agents]
        await asyncio.gather(*tasks)
    except Exception:
        log.exception("the demo fleet stopped")
    finally:
        await cancel_all(tasks)
        with contextlib.suppress(Exception):
            await lock_conn.close()

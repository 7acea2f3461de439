"""A scripted, seeded workload for one pool, run through decide_many (the production
path), recorded as a log: inputs in their own streams (as the API appends them, field for
field) and the decisions in `pool-<name>`, each with its global position and stream
version. The log exercises every decision type; `record.py` writes it to tests/data."""
from __future__ import annotations

import random

from app.domain import events as ev
from app.domain.apply import new_pool
from app.domain.decide import decide_many, next_deadline
from app.domain.settings import PoolSettings

POOL = "golden"
SETTINGS = PoolSettings(name=POOL, policy="mlfq", lanes=3, rpm=40, tpm=30_000, lease_seconds=12.0, boost_seconds=40.0,
                        allotment_seconds=(6.0, 20.0, float("inf")),
                        allotment_tokens=(9_000, 40_000, float("inf"))).legacy()
# legacy(): the log was recorded before the stall deadline, outage detection and adaptive
# lanes; a pool created then has them off, and the core must still decide it byte for byte.
AGENTS = [("g0", ev.INTERACTIVE), ("g1", ev.INTERACTIVE), ("g2", ev.BATCH), ("g3", ev.BACKGROUND), ("g4", ev.BATCH)]
T0 = 1_700_000_000.0


class Log:
    def __init__(self):
        self.records: list[dict] = []
        self.versions: dict[str, int] = {}

    def append(self, stream: str, type_: str, data: dict) -> int:
        version = self.versions.get(stream, -1) + 1
        self.versions[stream] = version
        position = len(self.records) + 1
        self.records.append({"position": position, "stream": stream, "version": version, "type": type_,
                             "data": data, "metadata": {}, "recorded_at": "2023-11-14T22:13:20+00:00"})
        return position


def run(seed: int = 12, batches: int = 500) -> list[dict]:
    rng = random.Random(seed)
    log = Log()
    created = {"settings": SETTINGS.to_dict(), "at": T0}
    log.append(f"pool-{POOL}", ev.POOL_CREATED, created)
    state = new_pool(created)
    now = T0
    turns: list[tuple[str, str]] = []      # (turn_id, agent_id) ever requested
    hung: set[str] = set()                 # calls that never answer
    counter = 0

    def step(inputs: list[tuple[str, str, dict]]) -> None:
        numbered = []
        for stream, type_, data in inputs:
            numbered.append((type_, data, log.append(stream, type_, data)))
        for type_, data in decide_many(state, numbered, now):
            log.append(f"pool-{POOL}", type_, data)

    def agent_input(agent_id: str, type_: str, **extra) -> tuple[str, str, dict]:
        return f"agent-{agent_id}", type_, {"agent_id": agent_id, "pool": POOL, **extra, "at": now}

    step([agent_input(a, ev.AGENT_REGISTERED, name=a, priority_class=c, token_hash=f"h-{a}",
                      context_budget_tokens=8192) for a, c in AGENTS[:4]])
    for i in range(batches):
        gap = rng.choice([0.0, 0.2, 0.5, 1.0, 2.0, 3.5, 7.0, 13.0, 45.0])
        deadline = next_deadline(state, now)
        if deadline is not None and deadline < now + gap and rng.random() < 0.5:
            now = deadline
            step([])                       # a timer pass
            continue
        now += gap
        inputs = []
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            kind = rng.choices(["request", "complete", "heartbeat", "cancel", "bogus"],
                               [6, 5, 2, 1, 0.3])[0]
            granted = [t for t in state.turns.values() if t.status == ev.GRANTED]
            if kind == "request":
                agent_id = rng.choice([a for a, _ in AGENTS[:4]] + (["g4"] if i > 200 else []))
                counter += 1
                turn_id = f"t{counter:04d}"
                data = {"turn_id": turn_id, "agent_id": agent_id, "pool": POOL,
                        "estimated_tokens": rng.randint(0, 6_000), "max_output_tokens": rng.randint(0, 2_000),
                        "at": now}
                if rng.random() < 0.4:
                    data["streams"] = True
                if rng.random() < 0.01:
                    data["estimated_tokens"] = 40_000           # beyond the pool's tpm
                if rng.random() < 0.06:
                    hung.add(turn_id)
                turns.append((turn_id, agent_id))
                inputs.append((f"turn-{turn_id}", ev.TURN_REQUESTED, data))
            elif kind == "complete" and granted:
                turn = rng.choice(granted)
                if turn.turn_id in hung:
                    continue
                outcome = rng.choices([ev.OK, ev.RATE_LIMITED, ev.ERROR], [10, 1, 0.5])[0]
                data = {"turn_id": turn.turn_id, "agent_id": turn.agent_id, "pool": POOL, "at": now,
                        "outcome": outcome, "prompt_tokens": rng.randint(0, 6_000),
                        "completion_tokens": rng.randint(0, 1_500)}
                if outcome == ev.RATE_LIMITED and rng.random() < 0.5:
                    data["retry_after_seconds"] = rng.choice([0.5, 3.0, 20.0])
                if rng.random() < 0.3:
                    data["rate_limit_headers"] = {"x-ratelimit-remaining-requests": str(rng.randint(0, 40)),
                                                  "x-ratelimit-remaining-tokens": str(rng.randint(0, 30_000)),
                                                  "x-ratelimit-reset-requests": "1s"}
                    if rng.random() < 0.5:
                        data["rate_limit_headers"].update({"x-ratelimit-limit-tokens": "30000",
                                                           "x-ratelimit-reset-tokens": "6m0s",
                                                           "retry-after": "2"})
                inputs.append((f"turn-{turn.turn_id}", ev.COMPLETION_REPORTED, data))
            elif kind == "heartbeat" and granted:
                turn = rng.choice(granted)
                if turn.turn_id in hung:
                    continue
                inputs.append((f"turn-{turn.turn_id}", ev.HEARTBEAT_SENT,
                               {"turn_id": turn.turn_id, "agent_id": turn.agent_id, "pool": POOL, "at": now}))
            elif kind == "cancel" and state.turns:
                turn = rng.choice(sorted(state.turns.values(), key=lambda t: t.turn_id))
                inputs.append((f"turn-{turn.turn_id}", ev.CANCEL_REQUESTED,
                               {"turn_id": turn.turn_id, "agent_id": turn.agent_id, "pool": POOL, "at": now,
                                "reason": "cancelled by operator"}))
            elif kind == "bogus":
                counter += 1
                turn_id = f"t{counter:04d}"
                inputs.append((f"turn-{turn_id}", ev.TURN_REQUESTED,
                               {"turn_id": turn_id, "agent_id": "nobody", "pool": POOL, "estimated_tokens": 10,
                                "max_output_tokens": 0, "at": now}))
        if i == 200:
            inputs.append(agent_input("g4", ev.AGENT_REGISTERED, name="g4", priority_class=ev.BATCH,
                                      token_hash="h-g4", context_budget_tokens=4096))
        quarantined = [a for a in state.agents.values() if a.state == ev.QUARANTINED]
        if quarantined and rng.random() < 0.1:
            inputs.append(agent_input(quarantined[0].agent_id, ev.AGENT_RELEASED))
        step(inputs)
    # Let everything still running end by lease, so the log ends quiet.
    for _ in range(20):
        deadline = next_deadline(state, now)
        if deadline is None or not state.turns:
            break
        now = max(now, deadline)
        step([])
    return log.records

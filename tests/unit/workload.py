"""Random batched workloads for the scheduling core, driven through decide_many (the
production path), and an independent ledger of what the decisions say.

The ledger folds the decision log with its own code (not apply()), restating the rules
the decisions must follow, so comparing it with the scheduler's state is not circular."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import strategies as st

from app.domain import events as ev
from app.domain.apply import new_pool
from app.domain.decide import decide_many
from app.domain.settings import PoolSettings

AGENTS = [("a0", ev.INTERACTIVE), ("a1", ev.INTERACTIVE), ("a2", ev.BATCH), ("a3", ev.BACKGROUND)]

# A small budget that binds: a few calls empty either bucket.
SETTINGS = PoolSettings(name="p", lanes=4, rpm=30, tpm=20_000, lease_seconds=20.0, boost_seconds=30.0,
                        policy="mlfq")
# The same pool under policy "deadline" with every term of the order switched on, runs
# forgotten soon enough that the workloads below forget some, and a backlog cap that an
# agent with four turns live reaches.
DEADLINE_SETTINGS = replace(SETTINGS, policy="deadline", class_slack_seconds=(0.0, 6.0, 12.0),
                            run_slack_per_service=2.0, run_slack_cap_seconds=40.0,
                            size_slack_per_ktoken=1.0, size_slack_cap_seconds=5.0, run_forget_seconds=100.0,
                            agent_backlog_slack_seconds=2.0, agent_backlog_slack_cap_seconds=5.0)
RUNS = (None, "r0", "r1", "r2")

headers = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={
        "x-ratelimit-remaining-requests": st.integers(0, 100).map(str),
        "x-ratelimit-remaining-tokens": st.integers(0, 60_000).map(str),
        "retry-after": st.integers(0, 5).map(str),
    }),
)

action = st.one_of(
    st.tuples(st.just("request"), st.integers(0, len(AGENTS) - 1), st.integers(0, 8_000),
              st.integers(0, 4_000), st.booleans(), st.sampled_from(RUNS)),
    st.tuples(st.just("complete"), st.integers(0, 60),
              st.sampled_from([ev.OK, ev.OK, ev.OK, ev.RATE_LIMITED, ev.ERROR]),
              st.integers(0, 9_000), st.integers(0, 3_000), headers),
    st.tuples(st.just("heartbeat"), st.integers(0, 60)),
    st.tuples(st.just("cancel"), st.integers(0, 60)),
)

# A batch: the seconds that pass before it, then the inputs that arrived together.
batch = st.tuples(st.one_of(st.floats(0.0, 5.0), st.floats(0.0, 90.0)), st.lists(action, max_size=8))
workload = st.lists(batch, max_size=40)


@dataclass
class Run:
    state: object
    created: dict
    log: list[tuple[str, dict]] = field(default_factory=list)
    inputs: list[list[tuple[str, dict, int]]] = field(default_factory=list)
    outputs: list[list[tuple[str, dict]]] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    now: float = 0.0
    position: int = 0

    def step(self, now: float, inputs: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
        numbered = []
        for type_, data in inputs:
            self.position += 1
            numbered.append((type_, {**data, "pool": "p", "at": now}, self.position))
        self.now = now
        out = decide_many(self.state, numbered, now)
        self.inputs.append(numbered)
        self.outputs.append(out)
        self.log += out
        return out


def start(settings: PoolSettings = SETTINGS) -> Run:
    created = {"settings": settings.to_dict(), "at": 0.0}
    run = Run(new_pool(created), created)
    run.step(0.0, [(ev.AGENT_REGISTERED, {"agent_id": a, "name": a, "priority_class": c}) for a, c in AGENTS])
    return run


def to_inputs(run: Run, actions) -> list[tuple[str, dict]]:
    inputs = []
    for act in actions:
        kind = act[0]
        if kind == "request":
            turn_id = f"t{len(run.issued)}"
            run.issued.append(turn_id)
            request = {"turn_id": turn_id, "agent_id": AGENTS[act[1]][0], "estimated_tokens": act[2],
                       "max_output_tokens": act[3], "streams": act[4]}
            if len(act) > 5 and act[5] is not None:
                request["run_id"] = f"{AGENTS[act[1]][0]}.{act[5]}"
            inputs.append((ev.TURN_REQUESTED, request))
            continue
        if not run.issued:
            continue
        turn_id = run.issued[act[1] % len(run.issued)]
        if kind == "complete":
            data = {"turn_id": turn_id, "outcome": act[2], "prompt_tokens": act[3], "completion_tokens": act[4]}
            if len(act) > 5 and act[5] is not None:
                data["rate_limit_headers"] = act[5]
            inputs.append((ev.COMPLETION_REPORTED, data))
        elif kind == "heartbeat":
            inputs.append((ev.HEARTBEAT_SENT, {"turn_id": turn_id}))
        else:
            inputs.append((ev.CANCEL_REQUESTED, {"turn_id": turn_id}))
    return inputs


def drive(batches, settings: PoolSettings = SETTINGS) -> Run:
    run = start(settings)
    for wait, actions in batches:
        run.step(run.now + wait, to_inputs(run, actions))
    return run


# -- the independent ledger ------------------------------------------------------------

class IllegalDecision(AssertionError):
    pass


@dataclass
class Ledger:
    """Turn lifecycles, lanes, levels and agent states, as the decisions alone tell them."""
    settings: PoolSettings
    turns: dict[str, dict] = field(default_factory=dict)      # live turns: status, lane, level, seq, queued_at
    finished: set[str] = field(default_factory=set)
    lanes: dict[int, str] = field(default_factory=dict)
    agents: dict[str, dict] = field(default_factory=dict)     # level, state, class
    runs: dict[str, dict] = field(default_factory=dict)       # service, live turns, last activity
    limit_in_use: int | None = None                            # the last LaneLimitChanged's lanes

    def deadline(self, t: dict, rate_bound: bool = False) -> float:
        """Policy "deadline": queued_at + class slack + run slack + size slack + backlog slack
        (app/domain/ordering.py); while the rate budget binds, the output credit (negative)
        instead of the class slack."""
        s = self.settings
        if rate_bound:
            total = -min(s.output_credit_cap_seconds, s.output_credit_per_ktoken * t["max_output"] / 1000.0)
        else:
            total = s.class_slack_seconds[{ev.INTERACTIVE: 0, ev.BATCH: 1, ev.BACKGROUND: 2}[
                self.agents[t["agent"]]["class"]]]
        if s.run_slack_per_service > 0 and t["run"] is not None:
            run = self.runs.get(t["run"])
            total += min(s.run_slack_cap_seconds, s.run_slack_per_service * (run["service"] if run else 0.0))
        if s.size_slack_per_ktoken > 0:
            total += min(s.size_slack_cap_seconds, s.size_slack_per_ktoken * t["need"] / 1000.0)
        if s.agent_backlog_slack_seconds > 0:
            # The agent's live turns (queued or holding a lane), this one included.
            backlog = sum(1 for other in self.turns.values() if other["agent"] == t["agent"])
            total += min(s.agent_backlog_slack_cap_seconds, s.agent_backlog_slack_seconds * (backlog - 1))
        return t["queued_at"] + total

    def reserve_holds(self, t: dict, at: float) -> bool:
        """Whether the light-agent reserve may hold `t` back, so that a turn behind it in the
        order goes first (app/domain/limiter.py): the rule is on, another agent is in the
        pool, t's agent has another turn live, and t has waited less than the backlog cap.
        Whether the budget really was down to the reserve is the buckets' to say (checked
        in test_light_agent_reserve.py), and a lane reserve needs lanes_reserved; this says
        only that the order may bend here."""
        s = self.settings
        backlog = sum(1 for other in self.turns.values() if other["agent"] == t["agent"])
        return (s.light_agent_reserve > 0 and len(self.agents) >= 2 and backlog >= 2
                and at - t["queued_at"] < s.agent_backlog_slack_cap_seconds)

    def lanes_in_use(self) -> int:
        """The lanes the pool may grant: all configured ones, or the learned limit's whole
        part (its initial value until the first LaneLimitChanged)."""
        s = self.settings
        if not s.adaptive_lanes:
            return s.lanes
        return self.limit_in_use if self.limit_in_use is not None else max(1, min(s.lanes, s.adaptive_lanes_initial))

    def lanes_reserved(self) -> int:
        """The lanes a heavy agent's turn must leave free: the smallest whole number at least
        reserve x lanes in use, none in a pool of one lane."""
        lanes, reserve = self.lanes_in_use(), self.settings.light_agent_reserve
        if lanes < 2 or not reserve > 0:
            return 0
        return next(n for n in range(lanes + 1) if n >= reserve * lanes - 1e-9)

    def _charge(self, turn: dict, seconds: float, at: float) -> None:
        run = self.runs.get(turn["run"]) if turn["run"] is not None else None
        if run is not None:
            run["service"] += max(0.0, seconds)
            run["live"] -= 1
            run["last"] = at

    def entry(self, cls: str) -> int:
        return min({ev.INTERACTIVE: 0, ev.BATCH: 1, ev.BACKGROUND: 2}[cls], self.settings.levels - 1)

    def fold(self, type_: str, d: dict) -> None:
        turn = self.turns.get(d.get("turn_id"))

        def need(cond: bool, why: str) -> None:
            if not cond:
                raise IllegalDecision(f"{type_} {d}: {why}")

        if type_ == ev.AGENT_ADMITTED:
            self.agents[d["agent_id"]] = {"level": d["level"], "state": ev.ACTIVE, "class": d["priority_class"]}
            need(d["level"] == self.entry(d["priority_class"]), "admitted at the wrong level")
        elif type_ == ev.TURN_QUEUED:
            need(d["turn_id"] not in self.turns and d["turn_id"] not in self.finished, "queued twice")
            need(self.agents[d["agent_id"]]["state"] == ev.ACTIVE, "queued for an inactive agent")
            need(d["level"] == self.agents[d["agent_id"]]["level"], "queued off its agent's level")
            self.turns[d["turn_id"]] = {"status": ev.QUEUED, "lane": None, "level": d["level"], "seq": d["seq"],
                                        "queued_at": d["at"], "agent": d["agent_id"], "run": d.get("run_id"),
                                        "need": d["estimated_tokens"] + d["max_output_tokens"],
                                        "max_output": d["max_output_tokens"]}
            if d.get("run_id") is not None:
                run = self.runs.setdefault(d["run_id"], {"service": 0.0, "live": 0, "last": d["at"]})
                run["live"] += 1
                run["last"] = d["at"]
        elif type_ == ev.TURN_GRANTED:
            need(turn is not None and turn["status"] == ev.QUEUED, "granted but not queued")
            need(0 <= d["lane"] < self.settings.lanes and d["lane"] not in self.lanes, "lane busy or absent")
            # An agent paused by its own report of a 429 is passed over: its turns wait.
            waiting = [t for t in self.turns.values() if t["status"] == ev.QUEUED
                       and self.agents[t["agent"]].get("paused_until", d["at"]) <= d["at"]]
            need(turn is not None and turn in waiting, "granted to an agent paused by its own 429")
            # The lane reserve: a grant that leaves fewer free lanes than it keeps goes to a
            # light turn, or to a heavy one whose patience has run out (reserve_holds false).
            free_after = self.lanes_in_use() - len(self.lanes) - 1
            need(free_after >= self.lanes_reserved() or not self.reserve_holds(turn, d["at"]),
                 "a heavy agent's turn took a lane of the light-agent reserve")
            if self.settings.policy == "deadline":
                # Whether the rate budget binds is the grant's own claim (rate_bound); the
                # claim itself is checked against the buckets in test_ordering.py.
                bound = bool(d.get("rate_bound"))
                need(not bound or self.settings.output_credit_per_ktoken > 0, "a rate-bound grant with the rule off")
                key = (self.deadline(turn, bound), turn["seq"])
                ahead = [t for t in waiting if (self.deadline(t, bound), t["seq"]) < key]
                need(all(self.reserve_holds(t, d["at"]) for t in ahead),
                     "granted out of deadline order (earliest virtual deadline, then FIFO)")
                need(d["order_deadline"] == self.deadline(turn, bound), "recorded a deadline it was not granted by")
            else:
                ahead = [t for t in waiting if (t["level"], t["seq"]) < (turn["level"], turn["seq"])]
                need(all(self.reserve_holds(t, d["at"]) for t in ahead),
                     "granted out of MLFQ order (lowest level, then FIFO)")
                need("order_deadline" not in d, "an MLFQ grant with a deadline")
            turn.update(status=ev.GRANTED, lane=d["lane"])
            self.lanes[d["lane"]] = d["turn_id"]
        elif type_ in (ev.TURN_COMPLETED, ev.TURN_REAPED):
            need(turn is not None and turn["status"] == ev.GRANTED, "settled but not granted")
            held = d["lane_seconds"] if type_ == ev.TURN_COMPLETED else d["at"] - d["granted_at"]
            self._charge(turn, held, d["at"])
            self._finish(d["turn_id"])
        elif type_ == ev.TURN_CANCELLED:
            if turn is not None:
                self._charge(turn, d.get("lane_seconds") or 0.0, d["at"])
                self._finish(d["turn_id"])
            else:
                need(d["turn_id"] not in self.finished, "cancelled after it finished")
                self.finished.add(d["turn_id"])   # refused on arrival
        elif type_ == ev.TURN_PROMOTED:
            need(self.settings.policy != "deadline", "a promotion under deadlines (they age by themselves)")
            need(turn is not None and turn["status"] == ev.QUEUED, "promoted but not queued")
            need(d["from_level"] == turn["level"] > 0 and d["to_level"] == 0, "promoted from the top or elsewhere")
            need(d["at"] - turn["queued_at"] >= self.settings.boost_seconds - 1e-9, "promoted before it aged")
            turn["level"] = d["to_level"]
        elif type_ == ev.AGENT_DEMOTED:
            need(self.settings.policy != "deadline", "a demotion under deadlines")
            agent = self.agents[d["agent_id"]]
            need(d["from_level"] == agent["level"] and d["to_level"] == agent["level"] + 1, "demoted oddly")
            agent["level"] = d["to_level"]
            for t in self.turns.values():
                if t["agent"] == d["agent_id"] and t["status"] == ev.QUEUED:
                    t["level"] = d["to_level"]
        elif type_ == ev.LEVELS_BOOSTED:
            for agent in self.agents.values():
                agent["level"] = self.entry(agent["class"])
            for t in self.turns.values():
                if t["status"] == ev.QUEUED:
                    aged = d["at"] - t["queued_at"] >= self.settings.boost_seconds
                    t["level"] = 0 if aged else self.agents[t["agent"]]["level"]
            forget = d["at"] - self.settings.run_forget_seconds
            self.runs = {r: x for r, x in self.runs.items() if x["live"] > 0 or x["last"] > forget}
        elif type_ == ev.LANE_LIMIT_CHANGED:
            self.limit_in_use = d["lanes_in_use"]
        elif type_ == ev.AGENT_PAUSED:
            agent = self.agents[d["agent_id"]]
            agent["paused_until"] = max(d["until"], agent.get("paused_until", d["until"]))
        elif type_ == ev.AGENT_QUARANTINED:
            self.agents[d["agent_id"]]["state"] = ev.QUARANTINED
        elif type_ == ev.QUARANTINE_LIFTED:
            self.agents[d["agent_id"]]["state"] = ev.ACTIVE

    def _finish(self, turn_id: str) -> None:
        turn = self.turns.pop(turn_id)
        if turn["lane"] is not None:
            del self.lanes[turn["lane"]]
        self.finished.add(turn_id)

    def matches(self, state) -> None:
        """The scheduler state says what the ledger says."""
        live = {tid: (t.status, t.lane, t.level) for tid, t in state.turns.items()}
        assert live == {tid: (t["status"], t["lane"], t["level"]) for tid, t in self.turns.items()}
        assert {i: tid for i, tid in enumerate(state.lanes) if tid is not None} == self.lanes
        for level, queue in enumerate(state.queues):
            expected = sorted((tid for tid, t in self.turns.items()
                               if t["status"] == ev.QUEUED and t["level"] == level),
                              key=lambda tid: self.turns[tid]["seq"])
            assert queue == expected, f"level {level}"
        assert {a: (x.level, x.state) for a, x in state.agents.items()} == \
            {a: (x["level"], x["state"]) for a, x in self.agents.items()}
        assert {r: (x.service_s, x.live) for r, x in state.runs.items()} == \
            {r: (x["service"], x["live"]) for r, x in self.runs.items()}

"""No starvation under sustained load: a hog keeps every lane busy and its queue full,
arrivals never stop and completions keep coming, and a background turn is still granted
within one boost period plus the work queued ahead of it (aging, rule 5)."""
from __future__ import annotations

import math

from app.domain import events as ev
from app.domain.apply import new_pool
from app.domain.decide import decide_many, next_deadline
from app.domain.settings import PoolSettings

LANES, CALL_S, DEPTH, HOGS = 4, 2.0, 8, 16
BOOST_S = 60.0


class Hog:
    """HOGS interactive agents taking turns, so no single one uses up its level-0
    allotment (4 lanes x 60 s spread over 16 agents is 15 lane-seconds each per period,
    against 30): they stay at the top level and keep DEPTH turns queued at all times."""

    def __init__(self, **settings):
        s = PoolSettings(**{"lanes": LANES, "rpm": 1_000_000, "tpm": 1_000_000_000, "boost_seconds": BOOST_S,
                            "lease_seconds": 30.0, **settings})
        self.state = new_pool({"settings": s.to_dict(), "at": 0.0})
        self.now, self.n, self.position = 0.0, 0, 0
        self.finishes: dict[str, float] = {}     # granted turn -> when its call ends
        self.granted_at: dict[str, float] = {}
        self.spins = 0                           # passes after which next_deadline was already due
        agents = [(f"h{i}", ev.INTERACTIVE) for i in range(HOGS)] + [("bg", ev.BACKGROUND)]
        self.step([(ev.AGENT_REGISTERED, {"agent_id": a, "name": a, "priority_class": c}) for a, c in agents])

    def step(self, inputs) -> list:
        numbered = []
        for type_, data in inputs:
            self.position += 1
            numbered.append((type_, {**data, "at": self.now}, self.position))
        out = decide_many(self.state, numbered, self.now)
        for type_, data in out:
            if type_ == ev.TURN_GRANTED:
                self.finishes[data["turn_id"]] = self.now + CALL_S
                self.granted_at[data["turn_id"]] = self.now
        return out

    def request(self, turn_id: str, agent_id: str):
        return ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": agent_id, "estimated_tokens": 100,
                                   "max_output_tokens": 100}

    def run_until(self, end: float, extra=()) -> None:
        """Advance to `end`: at each instant, complete the calls that are done and top the
        hog's queue up to DEPTH, in one batch."""
        extra = list(extra)
        while True:
            done = [t for t, at in self.finishes.items() if at <= self.now]
            inputs = [(ev.COMPLETION_REPORTED, {"turn_id": t, "outcome": ev.OK, "prompt_tokens": 100,
                                                "completion_tokens": 50}) for t in done]
            for t in done:
                del self.finishes[t]
            hog_queued = sum(1 for t in self.state.turns.values()
                             if t.status == ev.QUEUED and t.agent_id != "bg")
            for _ in range(DEPTH - hog_queued + len(done)):
                inputs.append(self.request(f"h.{self.n}", f"h{self.n % HOGS}"))
                self.n += 1
            inputs += extra
            extra = []
            self.step(inputs)
            deadline = next_deadline(self.state, self.now)
            if deadline is not None and deadline <= self.now:
                # Nothing may be due once a pass has run; count it, and poll instead of
                # spinning so that the waits below are still measured.
                self.spins += 1
                deadline = self.now + CALL_S / 4
            upcoming = min([*self.finishes.values(), deadline if deadline is not None else math.inf])
            if upcoming > end:
                return
            self.now = max(self.now, upcoming)


def test_a_background_turn_is_granted_within_a_boost_period_plus_the_work_ahead():
    hog = Hog()
    hog.run_until(BOOST_S)
    assert hog.state.last_boost_at == BOOST_S            # a boost has just happened
    assert all(lane is not None for lane in hog.state.lanes)
    # The background turn arrives just after the boost: the next boost (t=120) finds it
    # 59.5 s old, a whole period has not passed, so only its own aging deadline (t=120.5)
    # can lift it before the boost after that (t=180).
    arrival = BOOST_S + 0.5
    hog.now = arrival
    hog.run_until(400.0, [hog.request("bg.0", "bg")])
    assert "bg.0" in hog.granted_at, "the background turn starved"
    # Ahead of it at level 0 when it is promoted: at most DEPTH hog turns (FIFO by
    # arrival), served LANES at a time, each a CALL_S call, plus one call to free a lane.
    bound = BOOST_S + (DEPTH / LANES + 1) * CALL_S
    waited = hog.granted_at["bg.0"] - arrival
    assert waited <= bound, f"waited {waited:.1f} s, more than {bound:.1f}"
    assert hog.spins == 0


def test_the_hog_was_saturating_the_pool_all_along():
    """The premise of the test above: without the background turn, lanes never idle and
    the hog's queue never empties (so a grant of the background turn is not luck)."""
    hog = Hog()
    idle = []
    while hog.now < 200.0:
        hog.run_until(hog.now + CALL_S)
        hog.now += CALL_S
        idle.append(sum(1 for lane in hog.state.lanes if lane is None))
        assert hog.state.queued_count() >= DEPTH - LANES
    assert max(idle) == 0 and hog.spins == 0
    assert all(a.level == 0 for a in hog.state.agents.values() if a.agent_id != "bg")

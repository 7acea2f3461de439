"""The light-agent reserve (app/domain/limiter.py): an agent with another turn of its own
queued or held spends the pool's rate budget only down to the reserve; the last share is
for agents with one turn at a time; and it takes a lane only while ceil(reserve x lanes)
others stay free. Worked examples through decide_many, with their numbers.

The heavy agent is "a". Every pool of the budget examples admits 20 requests per 60-second
window (or holds 20 in its bucket) and has far more lanes and tokens than the examples use,
so the request budget is all that binds; the reserve is 0.1 of it, 2 requests. The lane
examples (LanePool) are the other way round."""
from __future__ import annotations

import pytest

from app.domain import events as ev
from app.domain.decide import next_deadline
from app.domain.limiter import reserved_lanes
from app.domain.settings import SLIDING_WINDOW, TOKEN_BUCKET, PoolSettings

from .test_rate_window import Pool as WindowPool


class Pool(WindowPool):
    """test_rate_window's pool (its one agent "a" is the heavy one here), with `others`
    registered beside it."""

    def __init__(self, others=("light", "light2"), **settings):
        super().__init__(**{"rpm": 20, "tpm": 1_000_000, "adaptive_lanes": False, "light_agent_reserve": 0.1,
                            **settings})
        self.batch(0.0, *[(ev.AGENT_REGISTERED, {"agent_id": a, "name": a, "priority_class": ev.INTERACTIVE})
                          for a in others])

    @staticmethod
    def ask(turn_id: str, agent: str) -> tuple[str, dict]:
        return ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": agent, "estimated_tokens": 10,
                                   "max_output_tokens": 0}


def flood(p: Pool, n: int, at: float = 0.0) -> list[str]:
    return p.batch(at, *[p.ask(f"h{i}", "a") for i in range(n)])


@pytest.mark.parametrize("limiter", [SLIDING_WINDOW, TOKEN_BUCKET])
def test_a_heavy_agent_leaves_the_reserve_and_a_light_agent_is_granted_at_once(limiter):
    # 25 turns of one agent at t=0: 18 granted (20 less the reserve of 2), 7 wait. A light
    # agent's one turn at t=1 goes at once, and so does a second light agent's: the budget
    # is then spent to its last request.
    p = Pool(limiter=limiter)
    assert flood(p, 25) == [f"h{i}" for i in range(18)]
    assert p.batch(1.0, p.ask("l1", "light")) == ["l1"]
    assert p.batch(1.5, p.ask("l2", "light2")) == ["l2"]
    assert p.batch(2.0, p.ask("l3", "light")) == []


def test_without_the_reserve_the_light_agent_waits_for_the_window_to_slide():
    # The same flood with the rule off spends all 20; the light agent's turn then waits
    # until the first grants leave the window (60 s plus the arrival margin).
    p = Pool(light_agent_reserve=0.0)
    assert flood(p, 25) == [f"h{i}" for i in range(20)]
    assert p.batch(1.0, p.ask("l1", "light")) == []
    assert next_deadline(p.state, 1.0) > 60.0


def test_an_agent_alone_in_its_pool_spends_the_whole_budget():
    # The reserve is for other agents: with none registered there is no one to keep it for.
    p = Pool(others=())
    assert flood(p, 25) == [f"h{i}" for i in range(20)]


def test_an_agent_with_one_turn_at_a_time_spends_the_reserve():
    # One turn live at a time is light, however many it asks in a row: each of 20 turns,
    # completed before the next is asked, is granted.
    p = Pool()
    for i in range(20):
        assert p.batch(float(i), p.ask(f"s{i}", "a")) == [f"s{i}"]
        p.batch(float(i) + 0.5, (ev.COMPLETION_REPORTED, {"turn_id": f"s{i}", "outcome": ev.OK,
                                                          "prompt_tokens": 10, "completion_tokens": 0}))


def test_a_heavy_turn_that_waited_the_backlog_cap_spends_the_reserve():
    # With a backlog cap of 5 s, the heavy agent's first waiting turn (h18, queued at t=0)
    # spends the reserve at t=5, and the scheduler wakes for it then.
    p = Pool(agent_backlog_slack_cap_seconds=5.0)
    flood(p, 25)
    assert next_deadline(p.state, 1.0) == pytest.approx(5.0)
    assert p.tick(5.0) == ["h18", "h19"]


def test_a_reservation_larger_than_what_the_reserve_leaves_is_not_held_by_it():
    # A turn needing more than 1 - reserve of the token budget could never pass the rule,
    # so the rule leaves it to the plain budget (which holds it until it fits).
    p = Pool(tpm=10_000, rpm=600)
    out = p.batch(0.0, p.ask("h0", "a"),
                  (ev.TURN_REQUESTED, {"turn_id": "big", "agent_id": "a", "estimated_tokens": 9_500,
                                       "max_output_tokens": 0}))
    assert out == ["h0", "big"]


def test_a_pool_recorded_before_the_rule_reads_it_as_off():
    stored = PoolSettings(name="old").to_dict()
    stored.pop("light_agent_reserve")
    assert PoolSettings.from_dict(stored).light_agent_reserve == 0.0
    assert "light_agent_reserve" not in PoolSettings(name="old", light_agent_reserve=0.0).to_dict()
    assert PoolSettings(name="new").to_dict()["light_agent_reserve"] == 0.1


@pytest.mark.parametrize("bad", [-0.1, 0.6, True, "0.1"])
def test_a_reserve_outside_0_to_half_is_refused_with_its_reason(bad):
    with pytest.raises(ValueError, match="lightAgentReserve must be between 0 and 0.5"):
        PoolSettings(light_agent_reserve=bad).validate()


# -- the lane reserve: ceil(reserve x lanes) lanes kept free for light agents' turns --------

class LanePool(Pool):
    """Lanes are what binds here: budget to spare, `lanes` fixed lanes, and the reserve
    0.1 of them rounded up (one lane of 4)."""

    def __init__(self, lanes: int = 4, **settings):
        super().__init__(**{"lanes": lanes, "rpm": 100_000, **settings})

    @staticmethod
    def done(turn_id: str) -> tuple[str, dict]:
        return ev.COMPLETION_REPORTED, {"turn_id": turn_id, "outcome": ev.OK, "prompt_tokens": 10,
                                        "completion_tokens": 0}


@pytest.mark.parametrize("policy", ["deadline", "mlfq", "fifo"])
def test_a_heavy_agent_leaves_a_lane_free_and_a_light_agent_takes_it_at_once(policy):
    # Ten turns of one agent at t=0 on 4 lanes: three granted, one lane left free. A light
    # agent's turn at t=1 takes it at once, passing the heavy agent's older turns (a SKIP,
    # not a WAIT, whatever the order); the next light turn then waits for a lane like any.
    p = LanePool(policy=policy)
    assert flood(p, 10) == ["h0", "h1", "h2"]
    assert p.batch(1.0, p.ask("l1", "light")) == ["l1"]
    assert p.batch(1.5, p.ask("l2", "light2")) == []
    # A completion frees a lane: the light turn queued for it goes, not the backlog.
    assert p.batch(2.0, p.done("h0")) == ["l2"]


def test_without_the_reserve_the_flooder_takes_every_lane_and_the_light_agent_waits():
    p = LanePool(light_agent_reserve=0.0)
    assert flood(p, 10) == ["h0", "h1", "h2", "h3"]
    assert p.batch(1.0, p.ask("l1", "light")) == []


def test_a_freed_lane_goes_to_the_heavy_agent_only_while_another_stays_free():
    # The reserve is a number of free lanes, not lanes of its own: with the light agent's
    # turn in the last lane, the first lane freed is the reserve again, the second the
    # heavy agent's.
    p = LanePool(lanes=5)
    assert flood(p, 10) == ["h0", "h1", "h2", "h3"]
    assert p.batch(1.0, p.ask("l1", "light")) == ["l1"]
    assert p.batch(2.0, p.done("h0")) == []
    assert p.batch(3.0, p.done("l1")) == ["h4"]


def test_a_one_lane_pool_keeps_no_lane_back():
    p = LanePool(lanes=1)
    assert flood(p, 3) == ["h0"]
    assert p.batch(1.0, p.done("h0")) == ["h1"]


def test_an_agent_alone_in_its_pool_takes_every_lane():
    p = LanePool(others=())
    assert flood(p, 10) == ["h0", "h1", "h2", "h3"]


def test_a_turn_holding_a_lane_makes_its_agent_heavy():
    # One turn running and one queued is a backlog of two: the queued one leaves the last
    # lane free. An agent's single queued turn (nothing running) is light and takes it.
    p = LanePool(lanes=2)
    assert p.batch(0.0, p.ask("h0", "a")) == ["h0"]
    assert p.batch(0.5, p.ask("h1", "a")) == []
    assert p.batch(1.0, p.ask("l1", "light")) == ["l1"]


def test_a_heavy_turn_that_waited_the_backlog_cap_takes_the_reserved_lane():
    # With a backlog cap of 5 s, the heavy agent's first waiting turn (h3, queued at t=0)
    # takes the free lane at t=5, and the scheduler wakes for it then (a SKIP's `when`).
    p = LanePool(agent_backlog_slack_cap_seconds=5.0)
    flood(p, 10)
    assert next_deadline(p.state, 1.0) == pytest.approx(5.0)
    assert p.tick(4.9) == []
    assert p.tick(5.0) == ["h3"]


@pytest.mark.parametrize(("lanes", "reserve", "kept"), [
    (1, 0.5, 0), (2, 0.1, 1), (4, 0.1, 1), (10, 0.1, 1), (11, 0.1, 2), (30, 0.1, 3), (16, 0.25, 4), (3, 0.5, 2),
    (8, 0.0, 0)])
def test_the_reserve_is_the_lanes_fraction_rounded_up(lanes, reserve, kept):
    # 0.1 x 30 is 3.0000000000000004 in floating point, and keeps 3 lanes, not 4.
    p = LanePool(lanes=lanes, light_agent_reserve=reserve)
    assert reserved_lanes(p.state) == kept


def test_the_reserve_counts_the_lanes_the_pool_has_learned_to_use():
    # Adaptive lanes start at min(lanes, initial): 64 configured, 10 in use, 1 kept.
    p = LanePool(lanes=64, adaptive_lanes=True, adaptive_lanes_initial=10)
    assert reserved_lanes(p.state) == 1
    assert flood(p, 20) == [f"h{i}" for i in range(9)]

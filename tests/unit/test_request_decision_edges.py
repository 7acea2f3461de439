"""What a turn request decides at its edges (app/domain/decide.py, _on_request and
_queue_refusal): the request's own cap on its agent's queued turns (counted per agent, at
exactly the cap, and only when the cap is a whole number), and what the TurnQueued carries
when the request leaves fields out."""
from __future__ import annotations

from app.domain import events as ev
from app.domain import rules
from app.domain.apply import new_pool
from app.domain.decide import decide
from app.domain.settings import PoolSettings


def pool(**kw):
    s = PoolSettings(**{"lanes": 1, "rpm": 600, "tpm": 60_000, "lease_seconds": 5.0, "policy": "mlfq", **kw})
    return new_pool({"settings": s.to_dict(), "at": 0.0})


def register(state, agent_id, cls=ev.BATCH, now=0.0):
    return decide(state, ev.AGENT_REGISTERED, {"agent_id": agent_id, "name": agent_id, "priority_class": cls}, now)


def request(state, turn_id, agent_id, now, **fields):
    data = {"turn_id": turn_id, "agent_id": agent_id, "estimated_tokens": 100, "at": now, **fields}
    return decide(state, ev.TURN_REQUESTED, data, now)


def kinds(out):
    return [t for t, _ in out]


def busy_pool():
    """A one-lane pool whose lane is held by agent "hold": every later request queues."""
    s = pool()
    register(s, "hold")
    register(s, "a")
    register(s, "b")
    assert kinds(request(s, "h", "hold", 0.0)) == [ev.TURN_QUEUED, ev.TURN_GRANTED]
    return s


# -- the queue cap ----------------------------------------------------------------------------

def test_an_agent_with_exactly_its_cap_queued_is_refused_the_next_turn():
    s = busy_pool()
    assert kinds(request(s, "t1", "a", 1.0, queue_cap=2)) == [ev.TURN_QUEUED]
    assert kinds(request(s, "t2", "a", 1.0, queue_cap=2)) == [ev.TURN_QUEUED]
    # Two queued in the whole pool, both the agent's: the cap of 2 is reached.
    out = request(s, "t3", "a", 2.0, queue_cap=2)
    assert out == [(ev.TURN_CANCELLED, {"turn_id": "t3", "agent_id": "a", "at": 2.0,
                                        "reason": "queue full: the agent has 2 turns waiting, "
                                                  "the most one agent may have is 2"})]
    assert "t3" not in s.turns and s.queued_of("a") == 2


def test_the_cap_counts_the_agents_own_queued_turns_not_the_pools():
    s = busy_pool()
    for i in range(3):
        request(s, f"b{i}", "b", 1.0)
    request(s, "a1", "a", 1.0)
    # Four queued in the pool, more than the cap, but one of them is a's.
    assert kinds(request(s, "a2", "a", 2.0, queue_cap=2)) == [ev.TURN_QUEUED]
    out = request(s, "a3", "a", 2.0, queue_cap=2)
    assert kinds(out) == [ev.TURN_CANCELLED] and rules.is_queue_full_reason(out[0][1]["reason"])
    # b's own requests are judged by b's queued turns (3).
    assert kinds(request(s, "b3", "b", 2.0, queue_cap=4)) == [ev.TURN_QUEUED]
    assert kinds(request(s, "b4", "b", 2.0, queue_cap=4)) == [ev.TURN_CANCELLED]


def test_a_cap_that_is_not_a_whole_number_is_no_cap():
    s = busy_pool()
    request(s, "t1", "a", 1.0)
    request(s, "t2", "a", 1.0)
    # True is an int to Python, but not a number of turns; 1.0 is not an int.
    assert kinds(request(s, "t3", "a", 2.0, queue_cap=True)) == [ev.TURN_QUEUED]
    assert kinds(request(s, "t4", "a", 2.0, queue_cap=1.0)) == [ev.TURN_QUEUED]
    assert kinds(request(s, "t5", "a", 2.0, queue_cap="1")) == [ev.TURN_QUEUED]
    assert s.queued_of("a") == 5


# -- what the TurnQueued carries ------------------------------------------------------------

def test_a_run_id_that_is_empty_or_not_a_string_is_no_run():
    s = pool(lanes=4)
    register(s, "a")
    for turn_id, run_id in (("empty", ""), ("number", 7), ("absent", None)):
        out = request(s, turn_id, "a", 1.0, run_id=run_id)
        queued = dict(out)[ev.TURN_QUEUED]
        assert "run_id" not in queued and s.turns[turn_id].run_id is None
    assert s.runs == {} and "runs" not in s.to_dict()
    out = request(s, "named", "a", 2.0, run_id="r1")
    assert dict(out)[ev.TURN_QUEUED]["run_id"] == "r1" and s.runs["r1"].live == 1

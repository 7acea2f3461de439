"""Per-agent fairness in the deadline order (app/domain/ordering.py, backlog slack): an
agent that keeps its queue full cannot make another agent's turn wait behind its backlog,
in the lane-bound order and in the rate-bound one; it still gets every lane and every bit
of budget nobody else asks for; and a pool recorded before the rule decides as it did."""
from __future__ import annotations

from app.domain import events as ev
from app.domain import ordering
from app.domain.apply import new_pool
from app.domain.decide import decide_many
from app.domain.settings import PoolSettings
from app.domain.state import PoolState

QUEUE_CAP = 32          # the service's per-agent cap on queued turns (app/service.py)


def pool(**settings) -> PoolState:
    s = PoolSettings(**{"lanes": 1, "rpm": 100_000, "tpm": 100_000_000, "lease_seconds": 60.0, **settings})
    return pool_of(s.to_dict())


def pool_of(stored: dict) -> PoolState:
    state = new_pool({"settings": stored, "at": 0.0})
    decide_many(state, [(ev.AGENT_REGISTERED, {"agent_id": a, "name": a, "priority_class": ev.INTERACTIVE}, None)
                        for a in ("flood", "honest")], 0.0)
    return state


class Feed:
    """Inputs at increasing instants; every grant, in order, with when it was made."""

    def __init__(self, state: PoolState):
        self.state, self.n, self.grants = state, 0, list[tuple[str, float]]()

    def request(self, agent: str, at: float, out: int = 100) -> str:
        self.n += 1
        turn_id = f"{agent}.{self.n}"
        self.send([(ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": agent, "estimated_tokens": 100,
                                        "max_output_tokens": out, "at": at}, None)], at)
        return turn_id

    def complete(self, turn_ids: list[str], at: float) -> None:
        self.send([(ev.COMPLETION_REPORTED, {"turn_id": t, "outcome": ev.OK, "prompt_tokens": 100,
                                             "completion_tokens": 100, "at": at}, None) for t in turn_ids], at)

    def send(self, inputs, at: float) -> None:
        for type_, data in decide_many(self.state, inputs, at):
            if type_ == ev.TURN_GRANTED:
                self.grants.append((data["turn_id"], at))

    def held(self) -> list[str]:
        return [t for t in self.state.lanes if t is not None]


def test_an_honest_turn_goes_ahead_of_a_full_flooders_queue_even_its_oldest_turn():
    feed = Feed(pool())
    for _ in range(QUEUE_CAP + 1):              # one holds the lane, 32 wait
        feed.request("flood", 0.0)
    honest = feed.request("honest", 50.0)       # the flood's turns are 50 s old by then
    feed.complete(feed.held(), 51.0)
    assert feed.grants[-1] == (honest, 51.0)
    # Backlog 33 (32 queued + 1 held): min(60, 2 x 32) = 60 s, so the flood's oldest turn's
    # deadline is 60 and the honest one's 50.
    flood_head = feed.state.turns[feed.state.queues[0][0]]
    assert ordering.backlog_slack(feed.state, flood_head) == 60.0


def test_a_flooder_that_refills_as_it_is_served_never_puts_more_than_one_turn_ahead_of_another_agent():
    """The steady state the bench measures: the flooder keeps its queue full, each call ends
    fast, and an honest agent asks for one turn at a time. Between an honest request and
    its grant at most one flood turn is granted (the lane's next one, when the request came
    during a flood call), over hundreds of grants, when the flood's head has waited far
    longer than any backlog slack: the slack is charged to every one of its turns."""
    call_s, think_s = 0.25, 1.0
    feed = Feed(pool())
    for _ in range(QUEUE_CAP + 1):
        feed.request("flood", 0.0)
    now, honest, honest_next, ahead, worst = 0.0, None, 0.3, 0, 0
    while now < 120.0:
        now = round(now + 0.05, 2)
        if honest is None and now >= honest_next:
            honest, ahead = feed.request("honest", now), 0
        for turn_id in feed.held():
            granted_at = dict(feed.grants)[turn_id]
            if now - granted_at >= call_s:
                feed.complete([turn_id], now)
                if turn_id.startswith("flood"):
                    feed.request("flood", now)          # refill: the queue stays full
        if honest is not None and honest in dict(feed.grants):
            worst, honest, honest_next = max(worst, ahead), None, now + call_s + think_s
        elif honest is not None:
            asked = feed.state.turns[honest].queued_at
            ahead = sum(1 for t, at in feed.grants if t.startswith("flood") and at >= asked)
    assert sum(t.startswith("honest") for t, _ in feed.grants) > 50
    assert worst <= 1
    flood_head = feed.state.turns[feed.state.queues[0][0]]
    assert flood_head.agent_id == "flood" and now - flood_head.queued_at > 5.0   # an old head, still behind


def test_while_the_rate_budget_binds_an_honest_turn_takes_the_next_request_the_budget_allows():
    """rpm 60 with four lanes and calls that end at once: the budget, not the lanes, holds
    the flood back, and the rate-bound order (no class slack, output credit) applies. The
    honest turn, queued last, is the next grant the budget lets through."""
    feed = Feed(pool(lanes=4, rpm=60, limiter="token-bucket"))
    for _ in range(QUEUE_CAP):
        feed.request("flood", 0.0)
    now, honest, granted_before = 0.0, None, -1
    while honest is None or feed.state.turns[honest].status == ev.QUEUED:
        now = round(now + 0.1, 2)
        done = feed.held()                    # the flood completes whatever it holds, and refills
        feed.complete(done, now)
        for _ in done:
            feed.request("flood", now)
        if honest is None and len(feed.grants) >= 40:     # the bucket spent below half, refill-paced
            assert ordering.rate_bound(feed.state) and feed.state.queued_count() >= QUEUE_CAP - 4
            # Counted before the request: the lane the light-agent reserve keeps free may
            # take the honest turn at once.
            granted_before = len(feed.grants)
            honest = feed.request("honest", now)
        assert now < 60.0
    assert feed.grants[granted_before][0] == honest


def test_alone_a_flooder_gets_every_lane_and_every_request_the_budget_allows():
    """Work conserving: the slack only orders; with nobody else queued the flood is granted
    each free lane at once, as without the rule. (The light-agent reserve, off here, does
    keep a lane back while another agent is registered: test_light_agent_reserve.py.)"""
    for backlog in (2.0, 0.0):
        feed = Feed(pool(lanes=4, agent_backlog_slack_seconds=backlog, light_agent_reserve=0.0))
        for _ in range(QUEUE_CAP + 4):
            feed.request("flood", 0.0)
        assert len(feed.grants) == 4
        feed.complete(feed.held()[:3], 1.0)
        assert len(feed.grants) == 7 and all(at == 1.0 for _, at in feed.grants[4:])


def test_an_agent_with_one_turn_gets_no_backlog_slack_and_its_second_turn_waits_two_seconds():
    state = pool(lanes=1)
    feed = Feed(state)
    first = feed.request("honest", 0.0)           # takes the lane: backlog 1
    second = feed.request("honest", 0.0)          # backlog 2 (one held, one queued)
    assert ordering.backlog_slack(state, state.turns[first]) == 2.0   # counted, though it holds a lane
    assert ordering.deadline(state, state.turns[second], False) == 2.0
    feed.complete([first], 1.0)
    assert ordering.backlog_slack(state, state.turns[second]) == 0.0  # its agent's only live turn


def test_a_deadline_pool_recorded_without_the_rule_keeps_the_fifo_order():
    """Stored settings without agent_backlog_slack_seconds were written before the rule:
    they read it as off, so replay and what-if of an old log decide as recorded. A new
    pool stores the rule (and only the cap left at its default is left out)."""
    stored = PoolSettings(lanes=1, rpm=100_000, tpm=100_000_000, lease_seconds=60.0).to_dict()
    assert stored["agent_backlog_slack_seconds"] == 2.0 and "agent_backlog_slack_cap_seconds" not in stored
    del stored["agent_backlog_slack_seconds"]
    assert PoolSettings.from_dict(stored).agent_backlog_slack_seconds == 0.0
    feed = Feed(pool_of(stored))
    for _ in range(4):
        feed.request("flood", 0.0)
    honest = feed.request("honest", 1.0)
    feed.complete(feed.held(), 2.0)
    assert feed.grants[-1][0] != honest        # FIFO, as the pool always decided
    assert ordering.max_slack(feed.state) == 12.0      # the background class's slack alone


def test_backlog_settings_are_validated():
    for field, value in (("agent_backlog_slack_seconds", -1.0), ("agent_backlog_slack_cap_seconds", 4000.0)):
        try:
            PoolSettings(**{field: value}).validate()
        except ValueError as exc:
            assert "between 0 and 3600" in str(exc)
        else:
            raise AssertionError(f"{field}={value} was accepted")

"""One fold of a turn's history, over logs the real core writes."""
from __future__ import annotations

from app.domain import events as ev
from app.domain import turn_history
from tests.unit.test_audit_verify import Log, one_lane_two_agents


def typed(log: Log) -> list[tuple[int, ev.Event]]:
    return [(r.position, ev.parse(r.type, r.data)) for r in log.records]


def test_a_turn_that_waited_for_a_lane_and_completed():
    log = one_lane_two_agents()                 # t1 holds lane 0, t2 queued behind it
    log.heartbeat("t1", 1010.0)
    log.complete("t1", 1020.0)                  # frees lane 0 for t2
    log.heartbeat("t2", 1025.0)
    log.complete("t2", 1030.0, outcome=ev.RATE_LIMITED, p=0, c=0)
    h = turn_history.histories(typed(log))
    t1, t2 = h["t1"], h["t2"]
    assert (t1.requested_at, t1.queued_at, t1.granted_at, t1.finished_at) == (1001.0, 1001.0, 1001.0, 1020.0)
    assert (t2.requested_at, t2.queued_at, t2.granted_at, t2.finished_at) == (1002.0, 1002.0, 1020.0, 1030.0)
    assert (t2.lane, t2.level, t2.priority_class, t2.pool) == (0, 0, ev.INTERACTIVE, "p")
    assert ((t1.status, t1.outcome, t1.end, t1.prompt_tokens, t1.completion_tokens)
            == (ev.COMPLETED, ev.OK, ev.OK, 80, 40))
    assert t2.end == ev.RATE_LIMITED and t2.lease_expires_at is None
    assert [beat.at for _, beat in t1.heartbeats] == [1010.0]
    assert t1.last_life_at == 1010.0            # the heartbeat's lease extension
    assert t1.report.at == 1020.0 and t1.report_position < t1.version
    assert (t1.estimated_tokens, t1.max_output_tokens, t1.reserved_tokens) == (100, 100, 200)


def test_a_reaped_turn_says_why_and_holds_no_lease():
    log = one_lane_two_agents()
    log.tick(1031.0 + 1.0)                      # t1's lease (30 s from 1001) has run out
    t1 = turn_history.histories(typed(log))["t1"]
    assert (t1.status, t1.end, t1.reason) == (ev.REAPED, ev.REAPED, turn_history.REAPED_LEASE_EXPIRED)
    assert t1.finished and t1.finished_at == 1032.0 and t1.lease_expires_at is None


def test_a_reader_of_decisions_alone_starts_at_the_queued_decision():
    log = one_lane_two_agents()
    decisions = [(p, e) for p, e in typed(log) if isinstance(e, ev.Decided)]
    assert turn_history.histories(decisions) == {}          # no request read: no turn
    h = turn_history.histories(decisions, start_at=(ev.TurnQueued,))
    assert set(h) == {"t1", "t2"}
    assert h["t2"].requested_at == 1002.0 and h["t2"].status == ev.QUEUED and h["t2"].end is None


def test_events_of_other_kinds_or_turns_change_nothing():
    log = one_lane_two_agents()
    events = typed(log)
    h = turn_history.histories(events)["t2"]
    before = turn_history.TurnHistory(**vars(h))
    for position, e in events:
        if getattr(e, "turn_id", None) != "t2":
            turn_history.fold(h, ev.LevelsBoosted(at=5000.0), position)
    assert h == before

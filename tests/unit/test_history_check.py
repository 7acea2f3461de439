"""The history checker finds each kind of violation in a forged history, and none in a
clean one: a checker that cannot fail would prove nothing in the fault tests."""
from __future__ import annotations

from app.audit import Record
from app.audit.history_check import FAIL, INFO, OK, Delivery, Op, check_history
from app.domain import events as ev


def _log() -> list[Record]:
    """Pool `p` with one lane; turn a granted and completed, then turn b granted."""
    rows = [("pool-p", ev.POOL_CREATED, {"settings": {"lanes": 1}}),
            ("turn-a", ev.TURN_REQUESTED, {"turn_id": "a", "pool": "p"}),
            ("pool-p", ev.TURN_QUEUED, {"turn_id": "a"}),
            ("pool-p", ev.TURN_GRANTED, {"turn_id": "a", "lane": 0}),
            ("turn-b", ev.TURN_REQUESTED, {"turn_id": "b", "pool": "p"}),
            ("pool-p", ev.TURN_QUEUED, {"turn_id": "b"}),
            ("turn-a", ev.COMPLETION_REPORTED, {"turn_id": "a", "pool": "p"}),
            ("pool-p", ev.TURN_COMPLETED, {"turn_id": "a"}),
            ("pool-p", ev.TURN_GRANTED, {"turn_id": "b", "lane": 0})]
    return [Record(i + 1, s, 0, t, d) for i, (s, t, d) in enumerate(rows)]


def _ops() -> list[Op]:
    return [Op("c1", "request", 0.0, 1.0, OK, "a", "GRANTED", 0),
            Op("c1", "complete", 2.0, 3.0, OK, "a", "COMPLETED"),
            Op("c2", "request", 0.5, 4.0, OK, "b", "GRANTED", 0),
            Op("c2", "request", 5.0, 6.0, INFO, error="connection cut"),   # unknown: claims nothing
            Op("c3", "request", 5.0, 6.0, FAIL, error="BAD_USER_INPUT")]


def _pool_events(r: Record) -> bool:
    return r.stream == "pool-p"


def test_a_clean_history_passes():
    report = check_history(_ops(), _log(), [Delivery("s", 1, [3, 4, 6, 8, 9], _pool_events)])
    assert report.ok, report.violations
    assert report.acknowledged == 3 and report.deliveries == 5


def test_an_acknowledged_command_missing_from_the_log_is_found():
    log = [r for r in _log() if r.type != ev.COMPLETION_REPORTED]
    report = check_history(_ops(), log)
    assert any("acknowledged complete of turn a has no CompletionReported" in v for v in report.violations)


def test_a_double_grant_and_an_overfull_lane_are_found():
    log = _log()
    log.insert(5, Record(99, "pool-p", 0, ev.TURN_GRANTED, {"turn_id": "a", "lane": 0}))
    report = check_history([], log)
    assert any("turn a granted 2 times" in v for v in report.violations), report.violations
    log = _log() + [Record(10, "pool-p", 0, ev.TURN_GRANTED, {"turn_id": "c", "lane": 1})]
    report = check_history([], log)
    assert any("holds 2 turns on 1 lanes" in v for v in report.violations), report.violations
    log = _log()
    log[7] = Record(8, "pool-p", 0, "Other", {})     # a never finishes: b's grant takes a held lane
    report = check_history([], log)
    assert any("lane 0 of pool p granted to b while a holds it" in v for v in report.violations)


def test_a_state_the_log_never_gave_or_a_stale_one_is_found():
    ops = [Op("c1", "request", 0.0, 1.0, OK, "b", "GRANTED", 1)]
    assert any("on lane 1" in v for v in check_history(ops, _log()).violations)
    ops = [Op("c1", "request", 0.0, 1.0, OK, "a", "CANCELLED")]
    assert any("never gave it" in v for v in check_history(ops, _log()).violations)
    # c2 asks after c1's answer came back, and is shown an older state of the same turn.
    ops = [Op("c1", "complete", 0.0, 1.0, OK, "a", "COMPLETED"),
           Op("c2", "request", 2.0, 3.0, OK, "a", "GRANTED", 0)]
    assert any("after c1 had been shown COMPLETED" in v for v in check_history(ops, _log()).violations)
    # Overlapping in real time, either order is linearisable.
    ops = [Op("c1", "complete", 0.0, 3.0, OK, "a", "COMPLETED"),
           Op("c2", "request", 2.0, 4.0, OK, "a", "GRANTED", 0)]
    assert check_history(ops, _log()).ok


def test_a_subscription_that_repeats_reorders_or_skips_is_found():
    def violations(positions):
        return check_history([], _log(), [Delivery("s", 1, positions, _pool_events)]).violations
    assert any("delivered after" in v for v in violations([3, 4, 4, 6]))
    assert any("delivered after" in v for v in violations([3, 6, 4]))
    assert any("skipped 1 events, first at position 4" in v for v in violations([3, 6, 8]))
    assert any("do not match" in v for v in violations([3, 4, 5, 6]))
    assert not violations([])

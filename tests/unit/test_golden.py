"""Logs recorded with the code before events were typed (tests/golden/record.py: a
scripted workload through decide_many, and a real run through the API on PostgreSQL,
exported as JSON Lines): folding them today must give the same projection state hash, and
every reader of the log (verify, the rate oracle, explain, what-if, the live check's turn
fold) must derive the same from them. Old logs load; behaviour is unchanged."""
from __future__ import annotations

import json

import pytest

from tests.golden import expected
from tests.golden.record import API, EXPECTED, SCRIPTED

RECORDED = json.loads(EXPECTED.read_text())


@pytest.mark.parametrize("name, path, pool", [("scripted", SCRIPTED, "golden"), ("api", API, "gold")])
def test_a_log_recorded_before_typed_events_folds_to_the_same_state(name, path, pool):
    now = expected.compute(path, pool)
    assert now["events"] == RECORDED[name]["events"]
    assert now["core_hash"] == RECORDED[name]["core_hash"]
    assert now == RECORDED[name]


def test_the_scripted_log_is_what_the_core_decides_today():
    """The scripted workload, run again through decide_many, writes the recorded log byte
    for byte: the decisions' JSON (keys, values, optional fields) is unchanged."""
    from tests.golden.scripted import run
    lines = run()
    recorded = [json.loads(line) for line in SCRIPTED.read_text().splitlines()]
    assert [json.dumps(x, sort_keys=True) for x in json.loads(json.dumps(lines))] == \
           [json.dumps(x, sort_keys=True) for x in recorded]


def test_a_context_stream_recorded_before_typed_context_events_folds_to_the_same_states():
    """tests/golden/context_log.py: appends, eight compactions (facts, supersessions,
    chunks) and a hibernation and wake, recorded with the untyped fold. Today's typed fold
    gets the same state hash after every event, and the same view bytes at the end."""
    from tests.golden import context_log
    recorded = json.loads(context_log.EXPECTED.read_text())
    final, hashes = context_log.fold(context_log.load())
    assert hashes == recorded["hashes"]
    assert context_log.view_digest(final) == recorded["view"]


def test_context_events_round_trip_the_recorded_json_exactly():
    from app.domain import events as ev
    from tests.golden import context_log
    for type_, data in context_log.load():
        event = ev.parse(type_, data)
        assert event.to_dict() == data and not event.extra


def test_a_context_event_without_a_required_field_is_refused_by_name():
    from app.domain import context as ctx
    from app.domain import events as ev
    with pytest.raises(ev.EventError, match="tokens"):
        ctx.apply(ctx.new_context("a"), ctx.CONTEXT_APPENDED,
                  {"agent_id": "a", "seq": 1, "role": "user", "content": "x", "at": 1.0})

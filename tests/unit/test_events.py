"""The typed events: every type round-trips its logged JSON exactly, unknown types and
data without a required field are refused with a clear error, unknown keys are kept, and
a misspelt field fails loudly instead of reading as a default."""
from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain import events as ev
from app.domain import resource_events as rev
from app.domain.apply import apply, new_pool
from app.domain.decide import decide
from app.domain.settings import PoolSettings
from tests.golden.record import API, SCRIPTED

ALL_TYPES = {ev.POOL_CREATED, ev.AGENT_HIBERNATED, ev.AGENT_WOKEN} | ev.INPUTS | ev.DECISIONS
# Decisions of rules added after the golden logs were recorded: test_capacity_rules
# round-trips them from the core's own output.
LATER_TYPES = {ev.LANE_LIMIT_CHANGED, ev.PROVIDER_OUTAGE_SUSPECTED, ev.PROVIDER_RECOVERED, ev.RATE_RECOVERED,
               ev.TURN_SUSPECTED,   # held calls: tests/unit/test_held_calls.py
               ev.MODEL_PAUSED, ev.AGENT_PAUSED}   # the limiter rules: tests/unit/test_rate_scopes.py


def _logged() -> list[dict]:
    return [json.loads(line) for path in (SCRIPTED, API) for line in path.read_text().splitlines()]


def test_every_event_type_has_a_class_registered_under_its_name():
    # the token events came after the recordings; context events: tests/unit/test_golden.py
    assert set(ev.registered()) == ALL_TYPES | ev.TOKEN_EVENTS | rev.RESOURCE_TYPES | ev.CONTEXT_EVENTS
    for name, cls in ev.registered().items():
        assert cls.TYPE == name and ev.event_class(name) is cls


@pytest.mark.parametrize("type_, data", [
    (ev.AGENT_TOKEN_ROTATED, {"agent_id": "a", "token_hash": "ab" * 32, "at": 1.5}),
    (ev.AGENT_TOKEN_REVOKED, {"agent_id": "a", "at": 2.5}),
])
def test_the_token_events_round_trip_and_require_their_fields(type_, data):
    assert ev.parse(type_, data).to_dict() == data
    with pytest.raises(ev.EventError):
        ev.parse(type_, {"at": 1.0})


def test_every_recorded_event_round_trips_to_the_same_json():
    seen = set()
    for line in _logged():
        if line["type"] not in ALL_TYPES:
            continue                                    # the context's own events
        event = ev.parse(line["type"], line["data"])
        assert type(event).TYPE == line["type"]
        assert json.dumps(event.to_dict(), sort_keys=True) == json.dumps(line["data"], sort_keys=True)
        seen.add(line["type"])
    assert seen == ALL_TYPES - LATER_TYPES              # the recorded logs hold every older type


def test_optional_fields_are_absent_unless_set_and_explicit_nulls_are_kept():
    granted = ev.TurnGranted(turn_id="t", agent_id="a", lane=0, level=0, lease_expires_at=5.0,
                             reserved_tokens=10, at=1.0)
    assert "start_deadline" not in granted.to_dict() and "cause" not in granted.to_dict()
    cancelled = ev.TurnCancelled(turn_id="t", agent_id="a", reason="x", lane=None, lane_seconds=0.0, at=1.0)
    assert cancelled.to_dict()["lane"] is None           # a client's cancel of a queued turn
    assert "lane" not in ev.TurnCancelled(turn_id="t", agent_id="a", reason="x", at=1.0).to_dict()
    data = {"turn_id": "t", "agent_id": "a", "at": 2.0, "retry_after_seconds": None}
    assert ev.parse(ev.COMPLETION_REPORTED, data).to_dict() == data


def test_unknown_keys_are_kept_and_written_back():
    data = {"agent_id": "a", "at": 3.0, "pool": "p", "reason": "turn requested", "added_later": {"x": 1}}
    woken = ev.parse(ev.AGENT_WOKEN, data)
    assert woken.extra == {"added_later": {"x": 1}}
    assert woken.to_dict() == data


def test_an_unknown_type_is_refused_with_a_clear_error():
    with pytest.raises(ev.EventError, match="unknown event type 'TurnGrantd'"):
        ev.parse("TurnGrantd", {})


def test_data_without_a_required_field_is_refused():
    with pytest.raises(ev.EventError, match="TurnGranted is missing lane"):
        ev.parse(ev.TURN_GRANTED, {"turn_id": "t", "agent_id": "a", "level": 0, "lease_expires_at": 1.0,
                                   "reserved_tokens": 1, "at": 0.0})
    with pytest.raises(ev.EventError, match="must be an object"):
        ev.parse(ev.TURN_GRANTED, ["not", "a", "dict"])


def test_a_misspelt_field_fails_loudly():
    granted = ev.TurnGranted(turn_id="t", agent_id="a", lane=0, level=0, lease_expires_at=5.0,
                             reserved_tokens=10, at=1.0)
    with pytest.raises(AttributeError):
        granted.lease_expire_at                         # noqa: B018 - a reader's typo
    with pytest.raises(TypeError):
        ev.TurnGranted(turn_id="t", agent_id="a", lane=0, level=0, lease_expire_at=5.0,  # a writer's typo
                       reserved_tokens=10, at=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        granted.lane = 1                                # type: ignore[misc]


def test_a_decision_whose_field_was_renamed_is_not_folded_as_a_default():
    """A renamed field must not fold silently as its default (a `d.get("lane_seconds")`
    style read would take it as zero): the fold refuses the event."""
    state = new_pool({"settings": PoolSettings(name="p").to_dict(), "at": 0.0})
    decide(state, ev.AGENT_REGISTERED, {"agent_id": "a", "name": "a", "priority_class": ev.INTERACTIVE}, 0.0)
    decide(state, ev.TURN_REQUESTED, {"turn_id": "t", "agent_id": "a", "estimated_tokens": 10}, 0.0)
    renamed = {"turn_id": "t", "agent_id": "a", "lane": 0, "outcome": ev.OK, "prompt_tokens": 1,
               "completion_tokens": 1, "lane_secs": 2.0, "reserved_tokens": 10, "level": 0,
               "queued_at": 0.0, "granted_at": 0.0, "at": 2.0}
    with pytest.raises(ev.EventError, match="missing lane_seconds"):
        apply(state, ev.TURN_COMPLETED, renamed)
    assert state.turns["t"].status == ev.GRANTED        # and nothing changed


def test_the_type_name_constants_still_name_the_types():
    assert ev.TURN_GRANTED == "TurnGranted" == ev.TurnGranted.TYPE == ev.TurnGranted(
        turn_id="t", agent_id="a", lane=0, level=0, lease_expires_at=5.0, reserved_tokens=10, at=1.0).type


def test_a_turn_queued_before_the_start_deadline_existed_folds_as_not_streaming():
    """Logs written before the start deadline have no `streams` in TurnQueued."""
    state = new_pool({"settings": PoolSettings(name="p").to_dict(), "at": 0.0})
    decide(state, ev.AGENT_REGISTERED, {"agent_id": "a", "name": "a", "priority_class": ev.INTERACTIVE}, 0.0)
    old = {"turn_id": "t", "agent_id": "a", "level": 0, "seq": 0, "estimated_tokens": 10,
           "max_output_tokens": 0, "requested_at": 1.0, "priority_class": ev.INTERACTIVE, "at": 1.0}
    apply(state, ev.TURN_QUEUED, old)
    assert state.turns["t"].streams is False
    assert ev.parse(ev.TURN_QUEUED, old).to_dict() == old


def test_a_partial_read_is_for_checkers_only_and_leaves_missing_fields_empty():
    data = {"turn_id": "t", "agent_id": "a", "level": 0, "lease_expires_at": 1.0, "at": 0.0}
    partial = ev.parse(ev.TURN_GRANTED, data, partial=True)
    assert (partial.turn_id, partial.lane, partial.reserved_tokens) == ("t", None, None)
    with pytest.raises(ev.EventError, match="missing lane, reserved_tokens"):
        ev.parse(ev.TURN_GRANTED, data)
    with pytest.raises(ev.EventError, match="unknown event type"):
        ev.parse("Nope", {}, partial=True)
    assert ev.is_event_type(ev.TURN_GRANTED) and not ev.is_event_type("Nope")


# -- from_dict builds events without __init__ (a fast path): the same events as __init__ ---
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    st.text(max_size=5), st.lists(st.integers(), max_size=3))


def _through_init(cls, data: dict, partial: bool):
    """The event as the dataclass's own __init__ builds it from `data` (the oracle)."""
    known = {k: v for k, v in data.items() if k in cls._FIELDS and not (v is None and k in cls.OPTIONAL)}
    extra = {k: v for k, v in data.items() if k not in known}
    missing = {f.name for f in dataclasses.fields(cls) if f.name != "extra"
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING} - set(known)
    if missing and not partial:
        return None
    return cls(**known, **dict.fromkeys(missing), extra=extra)


@st.composite
def _typed_data(draw):
    type_ = draw(st.sampled_from(sorted(ev.registered())))
    cls = ev.event_class(type_)
    names = [f.name for f in dataclasses.fields(cls) if f.name != "extra"]
    data = {name: draw(_VALUES) for name in names if draw(st.booleans()) or draw(st.booleans())}
    data.update(draw(st.dictionaries(st.sampled_from(["x", "later_field", "cause2"]), _VALUES, max_size=2)))
    return type_, cls, data


@settings(max_examples=400, deadline=None)
@given(_typed_data(), st.booleans())
def test_from_dict_builds_the_event_init_would(typed, partial):
    type_, cls, data = typed
    expected = _through_init(cls, data, partial)
    if expected is None:
        with pytest.raises(ev.EventError, match="is missing"):
            ev.parse(type_, data, partial=partial)
        return
    got = ev.parse(type_, data, partial=partial)
    assert type(got) is cls and got == expected and vars(got) == vars(expected)
    assert got.extra == expected.extra and got.to_dict() == expected.to_dict()
    if not partial:
        written = dict(data)
        if cls is ev.TurnCancelled and data.get("lane_seconds") is not None:
            written.setdefault("lane", None)   # a client's cancel always writes its lane
        assert got.to_dict() == written or any(v is None for v in data.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.at = 0.0


def test_every_event_class_is_sealed_for_the_fast_path():
    for cls in ev.registered().values():
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        assert cls._FIELD_SET == names == set(cls._FIELDS)
        assert set(cls._DEFAULTS) == {f.name for f in dataclasses.fields(cls)
                                      if f.name != "extra" and f.default is not dataclasses.MISSING}


def test_an_event_class_with_a_factory_default_is_refused():
    with pytest.raises(TypeError, match="plain defaults"):
        @ev.event
        class Listy(ev.Event):   # never registered: TYPE is empty
            items: list = dataclasses.field(default_factory=list)

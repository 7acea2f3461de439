"""The scheduler state's storage form, and the operator's release of a quarantine."""
from __future__ import annotations

import json

from hypothesis import given, settings

from app.domain import events as ev
from app.domain.apply import new_pool
from app.domain.decide import REAP_GRACE_S, decide_many
from app.domain.settings import PoolSettings
from app.domain.state import PoolState

from .examples import examples
from .workload import drive, to_inputs, workload


@settings(max_examples=examples(60), deadline=None)
@given(workload, workload)
def test_a_stored_and_reloaded_state_decides_exactly_as_the_original(first, then):
    """The projection stores PoolState.to_dict() as JSON and a new leader resumes from it:
    the reloaded state must equal the original and make the very same decisions."""
    run = drive(first)
    stored = json.loads(json.dumps(run.state.to_dict(), allow_nan=False))
    reloaded = PoolState.from_dict(stored)
    assert reloaded.canonical_json() == run.state.canonical_json()
    copy = run.state.copy()
    assert copy.canonical_json() == run.state.canonical_json() and copy is not run.state
    original_log = len(run.log)
    twin = drive([])
    twin.state, twin.issued, twin.now, twin.position = reloaded, list(run.issued), run.now, run.position
    twin_log = len(twin.log)
    for wait, actions in then:
        twin.step(twin.now + wait, to_inputs(twin, actions))
        run.step(run.now + wait, to_inputs(run, actions))
    assert json.dumps(twin.log[twin_log:]) == json.dumps(run.log[original_log:])
    assert twin.state.canonical_json() == run.state.canonical_json()


def test_a_state_round_trip_keeps_every_field():
    s = PoolSettings(name="p", lanes=2, rpm=60, tpm=6_000, lease_seconds=5.0, quarantine_after_reaps=1)
    state = new_pool({"settings": s.to_dict(), "at": 10.0})
    inputs = [(ev.AGENT_REGISTERED, {"agent_id": "a", "name": "a", "priority_class": ev.BATCH, "at": 10.0}, 1),
              (ev.TURN_REQUESTED, {"turn_id": "t", "agent_id": "a", "estimated_tokens": 10,
                                   "max_output_tokens": 5, "streams": True, "at": 10.0}, 2)]
    decide_many(state, inputs, 10.0)
    decide_many(state, [], 15.0 + REAP_GRACE_S)            # reaped: quarantined
    back = PoolState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert back.to_dict() == state.to_dict()
    assert back.agents["a"].state == ev.QUARANTINED and back.agents["a"].reaps == 1
    assert back.reserved_total == 15 and back.granted_total == 1 and back.start == state.start
    assert (back.requests.level, back.tokens.level, back.clock) == (state.requests.level, state.tokens.level, 15.25)


def test_releasing_a_quarantined_agent_lets_it_ask_again():
    s = PoolSettings(name="p", lanes=1, lease_seconds=5.0, quarantine_after_reaps=2)
    state = new_pool({"settings": s.to_dict(), "at": 0.0})

    def step(now, *inputs):
        return decide_many(state, [(t, {**d, "at": now}, None) for t, d in inputs], now)

    def ask(turn_id):
        return ev.TURN_REQUESTED, {"turn_id": turn_id, "agent_id": "z", "estimated_tokens": 1, "max_output_tokens": 0,
                                   "streams": True}

    step(0.0, (ev.AGENT_REGISTERED, {"agent_id": "z", "name": "z", "priority_class": ev.INTERACTIVE}))
    assert step(0.0, (ev.AGENT_RELEASED, {"agent_id": "z"})) == []          # not quarantined: nothing to lift
    step(0.0, ask("t1"))
    step(6.0, ask("t2"))                                                      # t1 reaped, t2 granted
    out = step(12.0)                                                          # t2 reaped: second in a row
    assert [t for t, _ in out] == [ev.TURN_REAPED, ev.AGENT_QUARANTINED]
    agent = state.agents["z"]
    assert (agent.consecutive_reaps, agent.start_misses) == (2, 2)
    assert [t for t, _ in step(13.0, ask("t3"))] == [ev.TURN_CANCELLED]
    out = step(14.0, (ev.AGENT_RELEASED, {"agent_id": "z"}))
    assert out == [(ev.QUARANTINE_LIFTED, {"agent_id": "z", "at": 14.0})]
    assert (agent.state, agent.consecutive_reaps, agent.start_misses) == (ev.ACTIVE, 0, 0)
    assert [t for t, _ in step(15.0, ask("t4"))] == [ev.TURN_QUEUED, ev.TURN_GRANTED]
    assert step(15.0, (ev.AGENT_RELEASED, {"agent_id": "nobody"})) == []

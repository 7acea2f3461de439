"""fold_pool (app/domain/apply.py): the one fold of a pool's own stream, shared by its
scheduler, its read model and the replay. It creates the state at PoolCreated, applies
decisions, moves the version and position on every event of the stream (a type that is not
a decision moves only those), and skips what a loaded state already holds."""
from __future__ import annotations

from hypothesis import given, settings

from app.domain import events as ev
from app.domain.apply import apply, fold_pool, new_pool

from .examples import examples
from .workload import DEADLINE_SETTINGS, start, to_inputs, workload


def _stream(run) -> list[tuple[ev.Event | None, int, int]]:
    """The run's pool stream as (typed event, version, position): PoolCreated at version 0,
    then each decision, with a foreign type between some of them and positions with gaps
    (other streams' events in the global log)."""
    out = [(ev.PoolCreated.from_dict(run.created), 0, 3)]
    version, position = 0, 3
    for i, (type_, data) in enumerate(run.log):
        if i % 7 == 3:   # a type the scheduler does not fold: version and position only
            version, position = version + 1, position + 2
            out.append((None, version, position))
        version, position = version + 1, position + 1 + i % 3
        out.append((ev.parse(type_, data), version, position))
    return out


@settings(max_examples=examples(60), deadline=None)
@given(workload)
def test_folding_the_stream_gives_the_applied_state_with_its_version_and_position(batches):
    run = start(DEADLINE_SETTINGS)
    for wait, actions in batches:
        run.step(run.now + wait, to_inputs(run, actions))
    stream = _stream(run)
    state = None
    assert fold_pool(None, None, 0, 1) is None and fold_pool(None, stream[1][0], 1, 4) is None  # before creation
    for event, version, position in stream:
        state = fold_pool(state, event, version, position)
        if isinstance(event, ev.PoolCreated):
            assert state.version == version and state.position == 0   # stays 0 until a decision
        else:
            assert (state.version, state.position) == (version, position)
    applied = new_pool(run.created)
    for type_, data in run.log:
        apply(applied, type_, data)
    applied.version, applied.position = stream[-1][1], stream[-1][2]
    assert state.canonical_json() == applied.canonical_json()

    # A loaded state already holds every event up to its position: folding one of them
    # again changes nothing, and the next one folds.
    if len(stream) > 2:
        before = state.canonical_json()
        for event, version, position in stream[1:]:
            assert fold_pool(state, event, version, position) is state
        assert state.canonical_json() == before


def test_an_event_at_the_states_own_position_is_not_folded_again():
    run = start(DEADLINE_SETTINGS)
    run.step(1.0, to_inputs(run, [("request", 0, 100, 0, None)]))
    (first_type, first), *_ = [(t, d) for t, d in run.log if t == ev.TURN_QUEUED]
    state = fold_pool(None, ev.PoolCreated.from_dict(run.created), 0, 1)
    for type_, data in run.log[:run.log.index((first_type, first))]:
        apply(state, type_, data)
    state.version, state.position = 5, 40
    queued = ev.parse(first_type, first)
    assert fold_pool(state, queued, 6, 40) is state and first["turn_id"] not in state.turns
    assert (state.version, state.position) == (5, 40)
    assert fold_pool(state, queued, 6, 41) is state and first["turn_id"] in state.turns
    assert (state.version, state.position) == (6, 41)

"""What ends a run of silent reaps (app/domain/apply.py, _lease_extended and _turn_completed).

Start-deadline reaps without a first chunk count towards a suspected outage, from the grant
of the earliest of them (`silent_from`). A first chunk or a completion ends the count only
when its call was granted no earlier than that: the provider then answered a call sent
during the silence. A call granted before it says nothing about the calls sent since, so
its answer leaves the count as it was."""
from __future__ import annotations

import pytest

from app.domain import events as ev
from app.domain.apply import apply, new_pool
from app.domain.decide import decide_many
from app.domain.settings import PoolSettings


def _pool(grants: list[list[str]]):
    """One agent; streaming turns granted in batches at t = 1, 2, 3, ...: grants[i] at 1 + i."""
    s = PoolSettings(lanes=8, rpm=6000, tpm=10_000_000, lease_seconds=60.0, outage_after_silent_reaps=3)
    state = new_pool({"settings": s.to_dict(), "at": 0.0})
    decide_many(state, [(ev.AGENT_REGISTERED, {"agent_id": "a", "name": "a", "priority_class": ev.BATCH}, None)],
                0.0)
    for i, batch in enumerate(grants):
        at = 1.0 + i
        decide_many(state, [(ev.TURN_REQUESTED, {"turn_id": t, "agent_id": "a", "estimated_tokens": 10,
                                                 "max_output_tokens": 0, "streams": True, "at": at}, None)
                            for t in batch], at)
        assert all(state.turns[t].granted_at == at for t in batch)
    return state


def _silent_reap(state, turn_id: str, at: float) -> None:
    turn = state.turns[turn_id]
    apply(state, ev.TURN_REAPED, {"turn_id": turn_id, "agent_id": turn.agent_id, "lane": turn.lane,
                                  "lease_expires_at": turn.lease_expires_at, "granted_at": turn.granted_at,
                                  "at": at, "no_first_chunk": True, "full_lease": False})


def _first_chunk(state, turn_id: str, at: float) -> None:
    out = decide_many(state, [(ev.HEARTBEAT_SENT, {"turn_id": turn_id, "at": at}, None)], at)
    assert [d["first_chunk_s"] for t, d in out if t == ev.LEASE_EXTENDED] == [at - state.turns[turn_id].granted_at]


def _completion(state, turn_id: str, at: float) -> None:
    out = decide_many(state, [(ev.COMPLETION_REPORTED, {"turn_id": turn_id, "outcome": ev.OK, "prompt_tokens": 5,
                                                        "completion_tokens": 5}, None)], at)
    assert [d["turn_id"] for t, d in out if t == ev.TURN_COMPLETED] == [turn_id]


@pytest.mark.parametrize("answer", [_first_chunk, _completion])
def test_an_answer_to_a_call_granted_before_the_silence_leaves_the_count(answer):
    state = _pool([["old"], ["s1"], ["s2"]])
    _silent_reap(state, "s1", 10.0)                    # granted at 2: the silence runs from 2
    assert (state.silent_reaps, state.silent_from) == (1, 2.0)
    answer(state, "old", 11.0)                         # granted at 1
    assert (state.silent_reaps, state.silent_from) == (1, 2.0)
    _silent_reap(state, "s2", 12.0)
    assert (state.silent_reaps, state.silent_from) == (2, 2.0)


@pytest.mark.parametrize("answer", [_first_chunk, _completion])
def test_an_answer_to_a_call_granted_after_the_silence_began_ends_it(answer):
    state = _pool([["s1"], ["new"], ["s2"]])
    _silent_reap(state, "s1", 10.0)                    # the silence runs from 1
    answer(state, "new", 11.0)                         # granted at 2
    assert (state.silent_reaps, state.silent_from) == (0, None)
    # Counting starts again from nothing: one more silent reap is one, not two.
    _silent_reap(state, "s2", 12.0)
    assert (state.silent_reaps, state.silent_from) == (1, 3.0)


@pytest.mark.parametrize("answer", [_first_chunk, _completion])
def test_an_answer_to_a_call_granted_with_the_earliest_silent_one_ends_the_silence(answer):
    state = _pool([["s1", "twin"], ["s2"]])           # s1 and twin granted in one pass at 1
    _silent_reap(state, "s1", 10.0)
    assert (state.silent_reaps, state.silent_from) == (1, 1.0)
    answer(state, "twin", 11.0)
    assert (state.silent_reaps, state.silent_from) == (0, None)
    assert not {"silent_reaps", "silent_from"} & set(state.to_dict())

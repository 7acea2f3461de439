"""flat_dict is asdict for the pool state's flat records (the persisted read model and the
replay hashes depend on the exact dict)."""
from __future__ import annotations

from dataclasses import asdict

from hypothesis import given
from hypothesis import strategies as st

from app.domain.state import AgentState, RunState, TurnState, flat_dict

text = st.text(max_size=8)
num = st.floats(allow_nan=False, allow_infinity=False)
maybe_num = st.none() | num

turns = st.builds(TurnState, turn_id=text, agent_id=text, level=st.integers(0, 5), seq=st.integers(),
                  status=st.sampled_from(["QUEUED", "GRANTED"]), estimated_tokens=st.integers(0),
                  max_output_tokens=st.integers(0), requested_at=num, queued_at=num, granted_at=maybe_num,
                  lane=st.none() | st.integers(0, 9), lease_expires_at=maybe_num, reserved_tokens=st.integers(0),
                  granted_mark=num, grant_number=st.integers(0), streams=st.booleans(),
                  start_backoff=st.integers(0, 9), progressed=st.booleans(), run_id=st.none() | text)
agents = st.builds(AgentState, agent_id=text, name=text, priority_class=st.sampled_from(["INTERACTIVE", "BATCH"]),
                   level=st.integers(0, 5), used_seconds=num, completions=st.integers(0))
runs = st.builds(RunState, service_s=num, last_at=num, live=st.integers(0))


@given(st.one_of(turns, agents, runs))
def test_flat_dict_is_asdict(record):
    assert flat_dict(record) == asdict(record)
    assert list(flat_dict(record)) == list(asdict(record))   # same key order


@given(turns)
def test_a_turns_dict_leaves_out_an_absent_run_as_before(turn):
    d = turn.to_dict()
    assert ("run_id" in d) == (turn.run_id is not None)
    later = ("run_id", "holder", "model", "suspect_at", "suspected")   # absent at their defaults
    assert {k: v for k, v in asdict(turn).items() if k not in later or v not in (None, False)} == d

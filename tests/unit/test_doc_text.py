"""The periodic save's document text reads back as the standard encoder's does."""
import json

from hypothesis import given
from hypothesis import strategies as st

from app.domain import context as d
from app.eventstore.store import json_text
from app.projections.doc_text import doc_text

_scalars = st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | \
    st.floats(allow_nan=False, allow_infinity=False) | st.text()
_docs = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text() | st.integers(-5, 5), inner, max_size=4), max_leaves=20)


@given(_docs)
def test_reads_back_as_the_standard_encoders_text(doc):
    assert json.loads(doc_text(doc)) == json.loads(json_text(doc))


def test_integer_keys_and_tuples_as_json_has_them():
    doc = {"lanes": {0: "t1", 1: None}, "levels": (0, 1.5), "name": "pool-ü"}
    assert json.loads(doc_text(doc)) == {"lanes": {"0": "t1", "1": None}, "levels": [0, 1.5], "name": "pool-ü"}


def test_what_orjson_cannot_encode_goes_the_standard_way():
    doc = {"big": 2**70}
    assert doc_text(doc) == json_text(doc)


# An agent's context state, encoded as a dataclass by the periodic save, must give the
# very text its dict does: the read model loads it back with state_from_dict.
_text = st.text(max_size=30)
_ints = st.integers(0, 2**40)
_floats = st.floats(allow_nan=False, allow_infinity=False)
_messages = st.builds(d.ContextMessage, seq=_ints, role=st.sampled_from(["user", "assistant", "tool", "system"]),
                      content=_text, pinned=st.booleans(), tokens=_ints, at=_floats)
_contexts = st.builds(
    d.AgentContext, agent_id=_text, hot=st.lists(_messages, max_size=4).map(tuple),
    warm_segments=st.lists(st.builds(d.WarmSegment, segment_id=_text, from_seq=_ints, to_seq=_ints, summary=_text,
                                     summary_tokens=_ints, at=_floats), max_size=2).map(tuple),
    facts=st.lists(st.builds(d.KeyFact, fact_id=_text, kind=_text, text=_text, key=_text, source_seq=_ints,
                             superseded_by=st.none() | _text, tokens=_ints, role=_text, value=_text, shape=_text),
                   max_size=3).map(tuple),
    cold=st.builds(d.ColdArchive, messages=st.lists(_messages, max_size=3).map(tuple),
                   chunks=st.lists(st.builds(d.ColdChunk, chunk_id=_text, from_seq=_ints, to_seq=_ints, text=_text,
                                             tokens=_ints), max_size=2).map(tuple)),
    growth=st.builds(d.GrowthStats, window=st.lists(st.tuples(_floats, _ints), max_size=3).map(tuple)),
    last_seq=_ints, compactions=_ints, last_activity_at=_floats, hibernated=st.booleans(),
    resume_point=st.none() | st.builds(d.ResumePoint, last_seq=_ints, compactions=_ints, digest=_text,
                                       messages=_ints, tokens=_ints))


@given(_contexts)
def test_a_context_state_encodes_as_its_dict_does_and_reads_back_equal(state):
    text = doc_text(state)
    assert text == doc_text(d.state_to_dict(state))
    assert d.state_from_dict(json.loads(text)) == state


def test_a_context_state_that_orjson_cannot_encode_goes_the_standard_way():
    state = d.AgentContext(agent_id="a", last_seq=2**70)
    assert doc_text(state) == json_text(d.state_to_dict(state))


def test_every_state_of_a_recorded_context_stream_encodes_as_its_dict_does():
    """States the fold itself builds (appends, compactions with facts and chunks, a
    hibernation with its resume point, the wake): orjson encodes a dataclass from its
    instance dictionary, so an attribute the fold set outside the fields would show here."""
    from tests.golden import context_log
    states: list[d.AgentContext] = []
    context_log.fold(context_log.load(), each=states.append)
    assert any(s.hibernated for s in states) and any(s.cold.chunks for s in states)
    for state in states:
        assert doc_text(state) == doc_text(d.state_to_dict(state))

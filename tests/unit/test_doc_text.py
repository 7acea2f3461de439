"""The periodic save's document text reads back as the standard encoder's does."""
import json

from hypothesis import given
from hypothesis import strategies as st

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

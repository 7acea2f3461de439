"""EventStore's read_back gives what decoding the stored JSON gives, value and type, with
every object's keys in jsonb's order (shorter keys first, then by their UTF-8 bytes) and
large floats as integers, as a read of the table returns them (tests/integration/test_tail_cache_pg.py checks that order
against PostgreSQL itself)."""
from __future__ import annotations

import enum
import json
import math
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from app.eventstore.store import _dumps, read_back

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text().filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                      | st.dictionaries(st.text(max_size=6) | st.integers(), inner, max_size=4), max_leaves=20)


def stored(text: str):
    """json.loads(text), each object's keys in jsonb's order, a number written with an
    exponent of 16 or more as the integer jsonb writes it out as (no exponent: the decimal
    text's integer), and no negative zero (jsonb's numeric has none)."""
    def order(v):
        if isinstance(v, dict):
            return {k: order(v[k]) for k in sorted(v, key=lambda k: (len(k.encode()), k.encode()))}
        if isinstance(v, list):
            return [order(x) for x in v]
        if isinstance(v, float) and "e+" in repr(v):
            return int(Decimal(repr(v)))
        return 0.0 if isinstance(v, float) and v == 0 else v
    return order(json.loads(text))


def same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


@given(st.dictionaries(st.text(max_size=8), scalars, max_size=12))
def test_a_flat_event_reads_back_as_stored(data):
    text = _dumps(data)
    assert same(read_back(data, text), stored(text))
    assert read_back(data, text) is not data   # a copy: the caller's later changes stay its own


@given(st.dictionaries(st.text(max_size=6) | st.integers(), values, max_size=5))
def test_any_event_reads_back_as_stored(data):
    text = _dumps(data)
    assert same(read_back(data, text), stored(text))


# The (str, Enum) form user code has, whose str() is "Colour.RED"; StrEnum's is "red".
class Colour(str, enum.Enum):  # noqa: UP042
    RED = "red"


def test_subclasses_and_tuples_are_decoded():
    for data in ({"c": Colour.RED}, {"t": (1, 2)}, {1: "a"}, {"n": -0.0}, {"n": [-0.0, 1e23]}):
        text = _dumps(data)
        assert same(read_back(data, text), stored(text))

"""The log's JSON codec (app/eventstore/json_codec.py) reads what json.loads reads, value and
type, from any text, and writes text that holds the value json.dumps writes (or refuses what
it refuses): orjson's speed must never change a value in the log."""
from __future__ import annotations

import dataclasses
import enum
import json
import math
import uuid
from datetime import datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.eventstore.json_codec import dumps, loads


def same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return (a == b and math.copysign(1, a) == math.copysign(1, b)) or (a != a and b != b)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def as_json_loads(text: str):
    try:
        expected = json.loads(text)
    except (ValueError, RecursionError) as error:
        with pytest.raises(type(error)):
            loads(text)
        return error
    assert same(loads(text), expected), text
    return expected


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20)


def jsonb_text(value) -> str:
    """`value` as PostgreSQL prints a jsonb: numbers without an exponent."""
    if type(value) is dict:
        return "{" + ", ".join(f"{json.dumps(k)}: {jsonb_text(v)}" for k, v in value.items()) + "}"
    if type(value) is list:
        return "[" + ", ".join(jsonb_text(v) for v in value) + "]"
    if type(value) is float:
        return format(Decimal(repr(value)), "f")
    return json.dumps(value)


@given(values)
def test_any_value_decodes_as_json_loads_decodes_it(value):
    as_json_loads(json.dumps(value))


@given(values)
def test_jsonb_printed_numbers_decode_as_json_loads_decodes_them(value):
    """jsonb writes 1e19 as twenty digits: json.loads reads an int there, and so must the log."""
    as_json_loads(jsonb_text(value))


@given(st.from_regex(r"\A-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,25})?([eE][-+]?[0-9]{1,3})?\Z"))
def test_hand_written_numbers_round_as_json_loads_rounds_them(text):
    as_json_loads(text)
    as_json_loads(f'{{"n": [{text}]}}')


@pytest.mark.parametrize("text", [
    str(2 ** 63 - 1), str(2 ** 63), str(2 ** 64 - 1), str(2 ** 64), str(-2 ** 63), str(-2 ** 63 - 1),
    "10000000000000000000", "-10000000000000000000", "9223372036854775808.0",
    '{"a": {"b": [1, 2, 18446744073709551616]}}', "[[[[-1" + "0" * 30 + "]]]]",
    "1e400", "[1, -1e400]", "NaN", "[Infinity]", '"\\ud800"', '"\\udc00x"', "[" * 1030 + "]" * 1030,
    "", "{", "[1,]", "01", '{"a": 1, "a": 2}',
])
def test_edges_decode_or_fail_as_json_loads(text):
    as_json_loads(text)


def test_nesting_python_cannot_recurse_into_is_read_without_recursion():
    """json.loads gives up (RecursionError) at about a thousand levels, orjson past 1,024: in
    between, the decoder reads what json.loads could not, and looks for wide floats without
    recursing."""
    text = "[" * 1010 + "0.5" + "]" * 1010
    value = loads(text)
    for _ in range(1010):
        value = value[0]
    assert value == 0.5


# The (str, Enum) form user code has, whose str() is "Colour.RED"; StrEnum's is "red".
class Colour(str, enum.Enum):  # noqa: UP042
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int


def as_json_dumps(value):
    """dumps(value) is text json.loads reads as the value of json.dumps's text, or both raise
    the same error: PostgreSQL stores the value, not the spelling."""
    try:
        expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError, RecursionError) as error:
        with pytest.raises(type(error)):
            dumps(value)
        return
    assert same(json.loads(dumps(value)), json.loads(expected)), value


odd = st.sampled_from([Colour.RED, uuid.UUID(int=7), Point(1), datetime(2026, 1, 1), float("nan"),
                       float("inf"), -float("inf"), 2 ** 64, -2 ** 63 - 1, "\ud800", (1, "a")])
written = st.recursive(scalars | odd, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                       | st.dictionaries(st.text(max_size=6) | st.integers() | st.booleans() | st.none()
                                         | st.floats(allow_nan=False) | st.just(Colour.RED), inner, max_size=4),
                       max_leaves=20)


@given(written)
def test_any_value_is_written_as_json_dumps_writes_it_or_refused_as_it_refuses_it(value):
    as_json_dumps(value)


def nested(depth: int) -> list:
    value: list = [1.5]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value", [
    {"n": float("nan")}, [1, [2, [float("inf")]]], {"u": uuid.UUID(int=1)}, {"p": Point(2)},
    dict([(1, "a"), (True, "b")]),  # keys that collide: the dict is {1: "b"}
    {"c": Colour.RED}, {Colour.RED: 1}, {"big": 2 ** 64}, {"s": "\ud800"},
    {"t": (1, (2, 3))}, {"f": 1e16, "g": -0.0, "h": 5e-324}, {"é": "ü\u2028\x00"}, nested(253), nested(300),
])
def test_edges_are_written_or_refused_as_json_dumps(value):
    as_json_dumps(value)


def test_a_value_that_contains_itself_is_refused_as_json_dumps_refuses_it():
    """The plain-types walk gives up after a bounded number of containers, so such a value
    reaches json.dumps (ValueError: circular reference) instead of walking forever."""
    looped: dict = {}
    looped["self"] = looped
    listed: list = [1]
    listed.append(listed)
    for value in (looped, listed, {"a": [looped]}):
        as_json_dumps(value)

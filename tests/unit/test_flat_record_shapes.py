"""flat_dict on record types it has not seen before: one field, two, several.

test_flat_dict.py checks the pool state's own records, whose field lists flat_dict learns
once per process and keeps. Each test here defines its record type afresh, so it checks
how flat_dict learns a type's fields as well as the dict it gives: the same as asdict, in
the same key order, for one field (where one attribute read gives the value itself, not a
1-tuple), for two, and for many, and again on a second record of the same type."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from app.domain.state import flat_dict


def _same_as_asdict(record) -> None:
    assert flat_dict(record) == asdict(record)
    assert list(flat_dict(record)) == list(asdict(record))


def test_a_record_of_one_field_gives_its_value_whole():
    @dataclass
    class One:
        name: str

    # A string: read as if it were the tuple of values, it would give its first letter.
    _same_as_asdict(One("abc"))
    assert flat_dict(One("xyz")) == {"name": "xyz"}      # the learned type, a second record


def test_a_record_of_one_numeric_field():
    @dataclass
    class Count:
        n: int

    assert flat_dict(Count(7)) == {"n": 7}
    assert flat_dict(Count(0)) == {"n": 0}


def test_a_record_of_two_fields_gives_both():
    @dataclass
    class Pair:
        left: str
        right: float | None

    _same_as_asdict(Pair("a", 1.5))
    assert flat_dict(Pair("b", None)) == {"left": "b", "right": None}


def test_a_record_of_several_fields_gives_them_all_in_declaration_order():
    @dataclass
    class Row:
        z: int
        a: str
        m: float = 0.0
        flag: bool = False

    _same_as_asdict(Row(1, "x", 2.5, True))
    assert list(flat_dict(Row(2, "y"))) == ["z", "a", "m", "flag"]
    assert flat_dict(Row(2, "y")) == {"z": 2, "a": "y", "m": 0.0, "flag": False}

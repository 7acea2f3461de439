"""The log's JSON, both ways: the values `json.loads` gives and the text `json.dumps` would
send, at orjson's speed wherever that is the same thing.

Why: under load every worker decodes the data and metadata of every event it reads from the
log, and encodes those of every event it appends. With the standard library on both sides
that is a large share of a worker's CPU under load (the profile: the log's JSON in
docs/benchmarks/performance-history.md); orjson does either three to five times faster.

Reading (`loads`), where orjson's value differs from `json.loads`'s, and how each case is
kept exact:
- an integer outside 64 bits (below -2**63, above 2**64 - 1) comes back as a float, of
  magnitude 2**63 or more. So does a number jsonb prints as a long run of digits (jsonb
  writes numeric without an exponent: the float 1e19 is stored as 10000000000000000000, which
  `json.loads` reads as an int). A decoded value holding any float that large is decoded
  again by `json.loads`: a slower read, never a different one;
- text orjson refuses (NaN and Infinity literals, numbers beyond a double's range, lone
  surrogate escapes, nesting past 1,024 levels): jsonb prints none of these, and for any
  other text `json.loads` decides, error included;
- one difference is kept: nesting deeper than Python's recursion limit (about 1,000 levels)
  but within orjson's 1,024 is read, where `json.loads` raises RecursionError;
- every other number: integers within 64 bits are exact in both, and both round a decimal
  text to the nearest double (the property test compares the two on arbitrary values and on
  hand-written decimal texts).

Writing (`dumps`): PostgreSQL parses the text into jsonb, so spacing and the spelling of a
float (1e+16 or 1e16) do not matter, only the value. orjson writes the same values as
`json.dumps` for the plain JSON types: dicts with str keys, lists, tuples, str, int, float,
bool and None. Anything else goes to `json.dumps`, whose rules stay the log's rules:
- NaN and infinities, which orjson would write as null, are refused (jsonb has neither);
- other types (dataclasses, UUIDs, datetimes, which orjson would encode and `json.dumps`
  refuses; str and int subclasses such as enums; non-str keys, which `json.dumps` turns into
  strings by its own rules) are encoded or refused by `json.dumps`;
- values orjson refuses (integers past 64 bits, lone surrogates, nesting past 254 levels);
- a value of more than 10,000 containers, which is also how a value that contains itself
  reaches `json.dumps` and its refusal, instead of an endless walk.
"""
from __future__ import annotations

import json

import orjson

_WIDE = 2.0 ** 63   # a decoded float this large may stand for an integer orjson could not hold
_INF = float("inf")
_SCALARS = frozenset({str, int, bool, type(None)})   # floats are checked apart
_CONTAINERS = frozenset({dict, list, tuple})


def _narrow(value) -> bool:
    """No float in the decoded `value` that could be an integer past 64 bits."""
    stack = [value]   # a stack, not recursion: orjson reads nesting deeper than Python recurses
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            item = item.values()
        elif kind is not list:
            if kind is float and not -_WIDE < item < _WIDE:
                return False
            continue
        for inner in item:   # the scalars of a container here, saving a push and pop each
            kind = type(inner)
            if kind is float:
                if not -_WIDE < inner < _WIDE:
                    return False
            elif kind is dict or kind is list:
                stack.append(inner)
    return True


def loads(text: str):
    """`json.loads(text)`: orjson's value when it cannot differ, else json.loads's."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)   # it accepts a few texts orjson does not, or raises its own error
    return value if _narrow(value) else json.loads(text)


_CONTAINERS_CHECKED = 10_000   # past this many, json.dumps judges (a value may contain itself)


def _plain(value) -> bool:
    """Only the plain JSON types, str keys and finite floats in `value`, in at most
    _CONTAINERS_CHECKED containers: a value that contains itself would walk forever here,
    where json.dumps refuses it (ValueError: circular reference)."""
    stack = [value]
    budget = _CONTAINERS_CHECKED
    while stack:
        budget -= 1
        if budget < 0:
            return False
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            item = item.values()
        elif kind is not list and kind is not tuple:
            if kind is float:
                if not -_INF < item < _INF:
                    return False
            elif kind not in _SCALARS:
                return False
            continue
        for inner in item:
            kind = type(inner)
            if kind is float:
                if not -_INF < inner < _INF:
                    return False
            elif kind in _CONTAINERS:
                stack.append(inner)
            elif kind not in _SCALARS:
                return False
    return True


def dumps(value) -> str:
    """JSON text of `value` that PostgreSQL reads as the value `json.dumps(value)` (compact,
    not ASCII-escaped, NaN refused) gives; a ValueError or TypeError where that raises."""
    if _plain(value):
        try:
            return orjson.dumps(value).decode()
        except orjson.JSONEncodeError:
            pass   # an integer past 64 bits, a lone surrogate, deep nesting: json.dumps decides
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

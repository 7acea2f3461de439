"""JSON text read from PostgreSQL (jsonb columns, NOTIFY payloads), decoded to the very values
`json.loads` gives, at orjson's speed where that is the same thing.

Why: under load every worker decodes the data and metadata of every event it reads from the
log. With `json.loads` as asyncpg's jsonb decoder that was about 9% of a worker's CPU (py-spy,
a saturation phase of `bench load`). orjson decodes the same text three to five times faster.

Where orjson's value differs from `json.loads`'s, and how each case is kept exact:
- an integer outside 64 bits (below -2**63, above 2**64 - 1) comes back as a float, of
  magnitude 2**63 or more. So does a number jsonb prints as a long run of digits (jsonb
  writes numeric without an exponent: the float 1e19 is stored as 10000000000000000000, which
  `json.loads` reads as an int). A decoded value holding any float that large is decoded
  again by `json.loads`: a slower read, never a different one;
- text orjson refuses (NaN and Infinity literals, numbers beyond a double's range, lone
  surrogate escapes, nesting past 1024 levels): jsonb prints none of these, and for any
  other text `json.loads` decides, error included;
- every other number: integers within 64 bits are exact in both, and both round a decimal
  text to the nearest double (the property test compares the two on arbitrary values and on
  hand-written decimal texts).
"""
from __future__ import annotations

import json

import orjson

_WIDE = 2.0 ** 63   # a float this large may stand for an integer orjson could not hold


def _plain(value) -> bool:
    """No float in `value` that could be an integer past 64 bits."""
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
    return value if _plain(value) else json.loads(text)

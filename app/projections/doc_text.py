"""The JSON text of a read-model document, as the periodic save writes it.

The save encodes every dirty document in one synchronous pass, so that what it writes is
the model at one position; for a 1,000-agent pool under `bench load` that pass (the pool's
scheduler state, a few hundred turn and agent documents) holds the event loop once a
second, and every request in flight on that worker waits behind it: a share of the grant
latency's P99. orjson encodes the same documents three to four times faster than the
standard library's encoder (the measurements: docs/architecture/decisions/read-model-saves.md).

The text only has to be JSON that PostgreSQL casts to the same jsonb: key order, spacing
and float spelling do not matter. Two differences from `json_text` do: orjson refuses
non-str keys unless told to turn them into strings, as json does (OPT_NON_STR_KEYS), and it
writes NaN and infinities as null where `json_text` refuses them. A document is a fold of
logged events, whose values were refused at their append if they were not finite, and the
pool settings store their infinite allotments as null themselves; a value orjson cannot
encode at all (an integer past 64 bits) falls back to `json_text`, which keeps its own
rules.

A document may also be a dataclass (an agent's context state): orjson encodes it natively,
fields in their declared order and tuples as lists, the very text that encoding its
``dataclasses.asdict`` gives, without asdict's recursive deep copy. For an agent with 30k
tokens of history that copy takes 3-27 ms of the event loop at every save after the agent's
appends, against 0.1 ms for the encoding, and every append and view in flight on the worker
would wait behind it."""
from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Any, cast

import orjson

from app.eventstore.store import json_text

_OPTIONS = orjson.OPT_NON_STR_KEYS


def doc_text(doc) -> str:
    try:
        return orjson.dumps(doc, option=_OPTIONS).decode()
    except TypeError:
        # a dataclass instance here (a document is never a class)
        return json_text(asdict(cast(Any, doc)) if is_dataclass(doc) else doc)

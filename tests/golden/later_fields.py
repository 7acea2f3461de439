"""Fields a context state gained after the golden logs were recorded. A log from before
them folds with each at its default (what the check below asserts), and the recorded
hashes are of the state without them: that is how "an old log folds to the same state"
stays checkable byte for byte."""
from __future__ import annotations

import hashlib
from typing import Any

from app.domain import context as ctx

# append-time key facts: nothing pending, no extraction events, no message extracted
CONTEXT_DEFAULTS: dict[str, Any] = {"unextracted": [], "fact_events": 0, "facts_from": 0}


def as_recorded(doc: dict[str, Any]) -> dict[str, Any]:
    """A context document without the later fields, which must be at their defaults."""
    later = {k: list(doc[k]) if isinstance(doc[k], tuple) else doc[k] for k in CONTEXT_DEFAULTS if k in doc}
    assert later == {k: CONTEXT_DEFAULTS[k] for k in later}, f"an old log folded to non-default {later}"
    return {k: v for k, v in doc.items() if k not in CONTEXT_DEFAULTS}


def recorded_hash(state: ctx.AgentContext) -> str:
    """``ctx.state_hash`` of the state as it was recorded (without the later fields)."""
    return hashlib.sha256(ctx.canonical_json(as_recorded(ctx.state_to_dict(state))).encode("utf-8")).hexdigest()

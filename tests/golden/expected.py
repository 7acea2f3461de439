"""What the code computes from a recorded log: the state hash of every projection and
digests of what each reader of the log derives from it (verify, the rate oracle, explain,
what-if, the live check's turn fold). The golden test compares these with the values the
code computed when the log was recorded."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import datetime
from pathlib import Path

from app.audit import Record
from app.audit.explain import explain_turn
from app.audit.rate_oracle import first_violation
from app.audit.verify import verify
from app.audit.whatif import (
    counterfactual_settings,
    extract_workload,
    report_dict,
    what_if,
)
from app.domain import context as ctx
from app.domain import events as ev
from app.domain.streams import context_stream
from app.eventstore.model import RecordedEvent
from app.projections.core import CoreModel, canonical_hash

from .later_fields import as_recorded


def load(path: Path) -> list[RecordedEvent]:
    events = []
    for line in path.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            events.append(RecordedEvent(d["position"], d["stream"], d["version"], d["type"], d["data"],
                                        d["metadata"], datetime.fromisoformat(d["recorded_at"])))
    return events


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def core_hash(events: list[RecordedEvent]) -> str:
    model = CoreModel()
    for event in events:
        parked = model.parked_context_needed_by(event)
        if parked is not None:
            # a wake folds the hibernated agent's context back from its stream, as
            # app.projections.context_archive does from the database
            archived = ctx.new_context(parked)
            for e in events:
                if e.position < event.position and e.stream == context_stream(parked):
                    archived = ctx.apply(archived, e.type, e.data)
            model.restore_context(parked, archived)
        model.fold(event)
    # as the runner persists them (jsonb): through one JSON round trip
    docs = {k: json.loads(json.dumps(v)) for k, v in model.all_docs().items()}
    return canonical_hash({k: as_recorded(v) if k[0] == "context" else v for k, v in docs.items()})


def compute(path: Path, pool: str) -> dict:
    from agentrm_bench.live_check import WANTED, _fold_turns
    events = load(path)
    records = [Record(e.position, e.stream, e.version, e.type, e.data) for e in events]
    report = verify(records)
    stream = f"pool-{pool}"
    created = next(r.data for r in records if r.stream == stream and r.type == ev.POOL_CREATED)
    decisions = [(r.type, r.data) for r in records if r.stream == stream and r.type != ev.POOL_CREATED]
    turn_ids = sorted({r.data["turn_id"] for r in records if r.type == ev.TURN_REQUESTED})
    pool_records = [r for r in records if r.stream == stream]
    stories = {t: explain_turn(t, [r for r in records if r.stream == f"turn-{t}"], pool_records) for t in turn_ids}
    w = extract_workload(records, pool)
    whatifs = {}
    for name, changes in (("recorded", {}), ("more_lanes", {"lanes": w.settings.lanes + 1}),
                          ("fifo", {"policy": "fifo"})):
        r = what_if(w, counterfactual_settings(w.settings, **changes))
        whatifs[name] = {"report": digest(report_dict(r)), "grants": digest([r.actual_grants, r.whatif_grants]),
                         "same_grant_order": r.same_grant_order}
    live = [e for e in events if e.type in WANTED and (e.stream == stream or e.data.get("pool") == pool)]
    rows = {k: dataclasses.asdict(v) for k, v in _fold_turns(live).items()}
    return {
        "events": len(events),
        "core_hash": core_hash(events),
        "verify": {"ok": report.ok, "events_checked": report.events_checked,
                   "decisions_checked": report.decisions_checked, "first": str(report.first)},
        "rate_oracle": first_violation(created, decisions),
        "explain": digest(stories),
        "explain_sample": stories[turn_ids[0]],
        "whatif": whatifs,
        "live_turns": digest(rows),
    }

"""The resources read model: the live holders and waiters (the fold the manager keeps,
app.domain.resources), the access policy, and one document per lease with its story
(status, times, why it was refused)."""
from __future__ import annotations

from dataclasses import dataclass, field

from app.domain import resource_events as rev
from app.domain.resources import FOLDED, ResourceState, apply
from app.domain.streams import RESOURCE_DECISIONS_STREAM

# The documents it persists, as (projection, key): ("resources", "state") and ("leases", id).
STATE_KEY = ("resources", "state")

_STATUS_BY_DECISION = {rev.RESOURCE_WAITING: rev.WAITING, rev.RESOURCE_GRANTED: rev.HELD,
                       rev.RESOURCE_RELEASED: rev.RELEASED, rev.RESOURCE_REAPED: rev.REAPED,
                       rev.RESOURCE_REFUSED: rev.REFUSED}


def new_lease_doc(e: rev.ResourceAcquireRequested) -> dict:
    return {"lease_id": e.lease_id, "agent_id": e.agent_id, "resource": e.resource, "mode": e.mode,
            "level": e.level, "status": None, "requested_at": e.at, "granted_at": None,
            "lease_expires_at": None, "finished_at": None, "reason": None, "message": None,
            "rule": None, "cycle": None, "version": 0}


@dataclass
class ResourceModel:
    state: ResourceState = field(default_factory=ResourceState)
    leases: dict[str, dict] = field(default_factory=dict)
    # Whether any event reached the state: a log without resources has no state document
    # (so the documents, and their hash, of a log from before resources are unchanged).
    touched: bool = False

    def fold(self, stream: str, type_: str, data: dict, dirty: set) -> None:
        if type_ in FOLDED and (stream == RESOURCE_DECISIONS_STREAM or type_ not in rev.RESOURCE_DECISIONS):
            apply(self.state, type_, data)
            self.touched = True
            dirty.add(STATE_KEY)
        if type_ == rev.RESOURCE_ACQUIRE_REQUESTED:
            e = rev.ResourceAcquireRequested.from_dict(data)
            self.leases[e.lease_id] = new_lease_doc(e)
            dirty.add(("leases", e.lease_id))
            return
        if stream != RESOURCE_DECISIONS_STREAM or type_ not in rev.RESOURCE_DECISIONS:
            return
        doc = self.leases.get(data.get("lease_id"))  # type: ignore[arg-type]  # no id: None
        if doc is None:
            return
        doc["version"] += 1
        if "lease_expires_at" in data and type_ != rev.RESOURCE_REAPED:
            doc["lease_expires_at"] = data["lease_expires_at"]
        status = _STATUS_BY_DECISION.get(type_)
        if status is not None:
            doc["status"] = status
        if type_ == rev.RESOURCE_GRANTED:
            doc["granted_at"] = data["at"]
        elif type_ in (rev.RESOURCE_RELEASED, rev.RESOURCE_REAPED, rev.RESOURCE_REFUSED):
            doc["finished_at"] = data["at"]
            for key in ("reason", "message", "rule", "cycle"):
                if data.get(key) is not None:
                    doc[key] = data[key]
        dirty.add(("leases", doc["lease_id"]))

    def doc(self, projection: str, key: str) -> dict | None:
        if (projection, key) == STATE_KEY:
            return self.state.to_dict()
        return self.leases.get(key)

    def docs(self) -> dict[tuple[str, str], dict]:
        out = {STATE_KEY: self.state.to_dict()} if self.touched else {}
        out.update({("leases", k): v for k, v in self.leases.items()})
        return out

    def load(self, projection: str, key: str, doc: dict) -> None:
        if (projection, key) == STATE_KEY:
            self.state = ResourceState.from_dict(doc)
            self.touched = True
        else:
            self.leases[key] = doc

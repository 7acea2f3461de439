"""`agentrm audit access --agent ID`: what an agent could reach and what it did, from the
log alone: its grants and revocations, every acquire with the decision that answered it
(and the rule that allowed or refused it), and every turn refused by pool capability.
Pure over Records (position order), like the other audits."""
from __future__ import annotations

from collections.abc import Iterable

from app.domain import events as ev
from app.domain import pool_access
from app.domain import resource_events as rev
from app.domain.access import POOL_PREFIX, AccessPolicy
from app.domain.streams import RESOURCE_DECISIONS_STREAM, id_of

from . import Record
from .explain import when


def access_story(records: Iterable[Record], agent_id: str) -> dict:
    """{grants, policy, acquires, pool_refusals} for `agent_id`, as plain data."""
    policy = AccessPolicy()
    grants: list[dict] = []
    acquires: dict[str, dict] = {}
    pool_refusals: list[dict] = []
    for r in sorted(records, key=lambda r: r.position):
        d = r.data
        if r.type == rev.ACCESS_GRANTED:
            policy.grant(d["grant_id"], d["agent_id"], d["pattern"], d["modes"], d["at"])
            if d["agent_id"] == agent_id:
                grants.append({"grant_id": d["grant_id"], "pattern": d["pattern"], "modes": d["modes"],
                               "granted_at": d["at"], "position": r.position, "revoked_at": None})
        elif r.type == rev.ACCESS_REVOKED:
            policy.revoke(d["grant_id"], d["at"])
            for g in grants:
                if g["grant_id"] == d["grant_id"]:
                    g["revoked_at"] = d["at"]
        elif d.get("agent_id") != agent_id:
            continue
        elif r.type == rev.ACCESS_REFUSED:
            pool_refusals.append({"position": r.position, "at": d["at"], "target": d["target"],
                                  "rule": d["rule"], "reason": d["reason"]})
        elif r.type == ev.TURN_CANCELLED and d.get("rule") and pool_access.is_refused_reason(d.get("reason")):
            # Refused by the pool's scheduler, in log order (a request the API's check let through).
            pool_refusals.append({"position": r.position, "at": d["at"], "target": POOL_PREFIX + id_of(r.stream),
                                  "rule": d["rule"], "reason": d["reason"], "turn_id": d["turn_id"]})
        elif r.type == rev.RESOURCE_ACQUIRE_REQUESTED:
            acquires[d["lease_id"]] = {"lease_id": d["lease_id"], "position": r.position, "at": d["at"],
                                       "resource": d["resource"], "mode": d["mode"], "status": None,
                                       "rule": None, "reason": None, "decisions": []}
        elif r.stream == RESOURCE_DECISIONS_STREAM and d.get("lease_id") in acquires:
            story = acquires[d["lease_id"]]
            story["decisions"].append({"position": r.position, "type": r.type, "at": d["at"]})
            story["rule"] = d.get("rule") or story["rule"]
            story["status"] = {rev.RESOURCE_WAITING: rev.WAITING, rev.RESOURCE_GRANTED: rev.HELD,
                               rev.RESOURCE_RELEASED: rev.RELEASED, rev.RESOURCE_REAPED: rev.REAPED,
                               rev.RESOURCE_REFUSED: rev.REFUSED}.get(r.type, story["status"])
            if r.type == rev.RESOURCE_REFUSED:
                story["reason"] = d["message"]
    return {"agent_id": agent_id, "grants": grants,
            "resources_policy": "default deny" if policy.resources_enforced else "open (no resource grant yet)",
            "pools_policy": "default deny" if policy.pools_enforced else "open (no pool grant yet)",
            "acquires": sorted(acquires.values(), key=lambda a: a["position"]), "pool_refusals": pool_refusals}


def render_access(story: dict) -> str:
    rows = [f"agent {story['agent_id']}",
            f"  resources: {story['resources_policy']}; pools: {story['pools_policy']}",
            "  could reach (grants):"]
    for g in story["grants"]:
        state = f"revoked {when(g['revoked_at'])}" if g["revoked_at"] is not None else "live"
        rows.append(f"    #{g['position']} {when(g['granted_at'])}  grant {g['grant_id']}  {g['pattern']}  "
                    f"{'/'.join(g['modes'])}  ({state})")
    if not story["grants"]:
        rows.append("    (none)")
    rows.append("  did (acquires):")
    for a in story["acquires"]:
        steps = " -> ".join(d["type"][len("Resource"):] for d in a["decisions"]) or "unanswered"
        rows.append(f"    #{a['position']} {when(a['at'])}  {a['resource']} {a['mode']}: {steps}"
                    f"  [{a['status'] or '-'}; rule {a['rule'] or '-'}]")
        if a["reason"]:
            rows.append(f"        refused: {a['reason']}")
    if not story["acquires"]:
        rows.append("    (none)")
    rows.append("  turns refused by pool capability:")
    for p in story["pool_refusals"]:
        rows.append(f"    #{p['position']} {when(p['at'])}  {p['target']}  rule {p['rule']}: {p['reason']}")
    if not story["pool_refusals"]:
        rows.append("    (none)")
    return "\n".join(rows)

"""The access manager's policy: what each agent may reach, as a pure fold of grants and
revocations, and the check every acquire (and every turn request) goes through.

Rules, in the order the check applies them:
- Resources are open until the first resource grant is ever made; from then on they are
  default deny, for every agent, for good: revoking every grant leaves everything denied
  (a policy that silently opened again would be worse than none).
- An acquire is allowed when a live grant of the agent matches the resource name (glob
  patterns: `repo:*`, `env:staging`) and lists the mode asked for.
- Pools work the same way with patterns that start with `pool:`: turns are open until the
  first pool grant, then an agent draws turns only from pools its grants match. Pool and
  resource policies are switched on separately, so that granting `repo:*` to one agent
  cannot cut every agent off its pool.
A refusal names the rule that refused: the grant that matched but lacks the mode, the
revoked grant that would have matched, or the default deny.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from typing import Any

POOL_PREFIX = "pool:"
OPEN, DEFAULT_DENY = "open", "default-deny"


@dataclass
class Grant:
    grant_id: str
    agent_id: str
    pattern: str
    modes: list[str]
    granted_at: float
    revoked_at: float | None = None

    @property
    def is_pool(self) -> bool:
        return self.pattern.startswith(POOL_PREFIX)

    def describe(self) -> str:
        return f"grant {self.grant_id} ({self.pattern} {'/'.join(self.modes)})"


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    rule: str          # "open", "default-deny", or "grant:<id>"
    reason: str


@dataclass
class AccessPolicy:
    grants: dict[str, Grant] = field(default_factory=dict)
    resources_enforced: bool = False   # a resource grant has been made
    pools_enforced: bool = False       # a pool grant has been made

    def grant(self, grant_id: str, agent_id: str, pattern: str, modes: list[str], at: float) -> None:
        if grant_id in self.grants:
            return  # a replayed input after failover
        g = Grant(grant_id, agent_id, pattern, list(modes), at)
        self.grants[grant_id] = g
        if g.is_pool:
            self.pools_enforced = True
        else:
            self.resources_enforced = True

    def revoke(self, grant_id: str, at: float) -> None:
        g = self.grants.get(grant_id)
        if g is not None and g.revoked_at is None:
            g.revoked_at = at

    def of_agent(self, agent_id: str) -> list[Grant]:
        return sorted((g for g in self.grants.values() if g.agent_id == agent_id),
                      key=lambda g: (g.granted_at, g.grant_id))

    # -- the checks ---------------------------------------------------------------------
    def check_resource(self, agent_id: str, name: str, mode: str) -> Verdict:
        if not self.resources_enforced:
            return Verdict(True, OPEN, "no resource grant exists yet: resources are open")
        return self._check(agent_id, name, mode, pool=False)

    def check_pool(self, agent_id: str, pool: str) -> Verdict:
        if not self.pools_enforced:
            return Verdict(True, OPEN, "no pool grant exists yet: pools are open")
        return self._check(agent_id, POOL_PREFIX + pool, None, pool=True)

    def _check(self, agent_id: str, target: str, mode: str | None, *, pool: bool) -> Verdict:
        matching = [g for g in self.of_agent(agent_id) if g.is_pool == pool and fnmatchcase(target, g.pattern)]
        live = [g for g in matching if g.revoked_at is None]
        for g in live:
            if mode is None or mode in g.modes:
                return Verdict(True, f"grant:{g.grant_id}", f"allowed by {g.describe()}")
        what = target if mode is None else f"{target} in {mode} mode"
        if live:
            g = live[0]
            return Verdict(False, f"grant:{g.grant_id}",
                           f"{g.describe()} matches {target} but does not allow {mode}")
        if matching:
            g = matching[-1]
            return Verdict(False, f"grant:{g.grant_id}",
                           f"{g.describe()} would allow {what} but was revoked")
        return Verdict(False, DEFAULT_DENY, f"default deny: no grant of agent {agent_id} matches {what}")

    # -- serialisation --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"grants": {k: asdict(v) for k, v in sorted(self.grants.items())},
                "resources_enforced": self.resources_enforced, "pools_enforced": self.pools_enforced}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AccessPolicy:
        return cls(grants={k: Grant(**v) for k, v in d["grants"].items()},
                   resources_enforced=d["resources_enforced"], pools_enforced=d["pools_enforced"])


def valid_pattern(pattern: object) -> str | None:
    """Why `pattern` is not a usable grant pattern, or None."""
    if not isinstance(pattern, str) or not pattern.strip():
        return "pattern must be a non-empty string"
    if len(pattern) > 200 or "\x00" in pattern or pattern != pattern.strip():
        return "pattern must be at most 200 characters, without NUL or surrounding spaces"
    return None

"""The policies the scheduler benchmark compares, by name.

Each baseline models what a real system does, cited in its module next to each behaviour;
`agentrm*` runs the real core. A name may carry a variant after `@`
(`gateway-fifo@30s`, `fixed-lanes@16`); `--policies` and the JSON use these names.
"""
from __future__ import annotations

import importlib
from typing import Protocol, cast

from ..workload import AgentScript
from .base import Context, Cursor, Policy, sdk_backoff
from .clairvoyant import BOUND_NAME, ClairvoyantGateway, parse_order

# name -> (module, class) of the baselines; each class takes (ctx, agents=None, variant=None).
BASELINES: dict[str, tuple[str, str]] = {
    "openclaw-lanes": ("openclaw", "OpenClawLanes"),
    "aios": ("aios", "Aios"),
    "litellm-proxy": ("litellm", "LitellmProxy"),
    "litellm-proxy-priority": ("litellm", "LitellmProxyPriority"),
    "no-gateway": ("no_gateway", "NoGateway"),
    "gateway-fifo": ("gateway_fifo", "GatewayFifo"),
    "vtc": ("vtc", "Vtc"),
    "plas": ("plas", "Plas"),
    "las": ("las", "Las"),
}
AGENTRM_NAMES = ("agentrm", "agentrm-gateway", "agentrm-fifo", "agentrm-nodeadline")

# BOUND_NAME (clairvoyant.py) is a yardstick, not a baseline (bounds.py): a clairvoyant order
# that knows each call's true service time. Runnable by name, never in a default comparison.

# The first-chunk timeouts gateway-fifo is reported at (the issue fixes 10, 30 and 120 s).
GATEWAY_TIMEOUTS = ("10s", "30s", "120s")

# The default comparison, in report order: AgentRM (its client library, then its gateway) and
# its ablations, then every baseline once (gateway-fifo at each of its timeouts).
POLICY_NAMES: tuple[str, ...] = (
    "agentrm", "agentrm-gateway", "agentrm-fifo", "agentrm-nodeadline",
    *(f"gateway-fifo@{t}" for t in GATEWAY_TIMEOUTS),
    "openclaw-lanes", "aios", "litellm-proxy", "litellm-proxy-priority", "no-gateway", "vtc", "plas", "las",
)


def split_name(name: str) -> tuple[str, str | None]:
    base, _, variant = name.partition("@")
    return base, (variant or None)


def known(name: str) -> bool:
    base, variant = split_name(name)
    if base in AGENTRM_NAMES:
        return variant is None
    if base == "fixed-lanes":
        return variant is not None and variant.isdigit() and int(variant) > 0
    if base == "gateway-fifo":
        return variant is None or (variant.endswith("s") and _number(variant[:-1]))
    if base == BOUND_NAME:
        try:
            parse_order(variant)
        except ValueError:
            return False
        return True
    return base in BASELINES and variant is None


def _number(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


class _Baseline(Protocol):
    """A baseline's class, as BASELINES names it: called with (ctx, agents, variant)."""

    def __call__(self, ctx: Context, agents: tuple[AgentScript, ...] | None = None,
                 variant: str | None = None) -> Policy: ...


def _baseline_class(base: str) -> _Baseline:
    module, cls = BASELINES[base]
    return cast(_Baseline, getattr(importlib.import_module(f"{__name__}.{module}"), cls))


def make_policy(name: str, ctx: Context, agentrm_overrides: dict | None = None,
                agents: tuple[AgentScript, ...] | None = None) -> Policy:
    """The policy `name` over ctx (and only `agents`, when a replica serves a share)."""
    base, variant = split_name(name)
    if base in AGENTRM_NAMES:
        from .agentrm import AgentRM, make_agentrm
        from .agentrm_gateway import AgentRMGateway
        cls: type[AgentRM] = AgentRMGateway if base == "agentrm-gateway" else AgentRM
        return make_agentrm(base, ctx, agentrm_overrides, agents, cls)
    if base == "fixed-lanes":
        # The saturating-provider sweep: the plain gateway (30 s first-chunk timeout) at a
        # fixed number of lanes; the lane count is the variant.
        assert variant is not None  # the bench runs only names known() passes: fixed-lanes@N
        ctx.lanes = int(variant)
        policy = _baseline_class("gateway-fifo")(ctx, agents, "30s")
    elif base == BOUND_NAME:
        policy = ClairvoyantGateway(ctx, agents, variant)
    else:
        policy = _baseline_class(base)(ctx, agents, variant)
    policy.name = name
    return policy


class Replicated(Policy):
    """R replicas of a policy that keeps its counters in process memory, each serving a share
    of the agents (round robin, as a load balancer spreads clients) with lanes/R lanes and
    the WHOLE configured rate limit: every replica loads the same config and counts only what
    it sees itself (LiteLLM without Redis: BerriAI/litellm#40291, #8430). They share the one
    provider. AgentRM is never wrapped: one writer per pool serves every API worker."""

    def __init__(self, name: str, ctx: Context, replicas: int, agentrm_overrides: dict | None = None):
        super().__init__(ctx)
        self.name = name
        agents = [a for a in ctx.trace.agents if a.runs]
        self.replicas = []
        for r in range(replicas):
            sub = Context(sim=ctx.sim, provider=ctx.provider, recorder=ctx.recorder, link=ctx.link,
                          trace=ctx.trace, lanes=max(1, ctx.lanes // replicas), seed=ctx.seed * 1000 + r,
                          options=dict(ctx.options))
            self.replicas.append(make_policy(name, sub, agentrm_overrides, tuple(agents[r::replicas])))

    def start(self) -> None:
        for policy in self.replicas:
            policy.start()

    def finish(self) -> None:
        for policy in self.replicas:
            policy.finish()

    def call_ready(self, cur: Cursor) -> None:  # never called: the replicas own the cursors
        raise AssertionError("a replicated policy's replicas serve every call")


def build(name: str, ctx: Context, agentrm_overrides: dict | None = None, replicas: int = 1) -> Policy:
    base, _ = split_name(name)
    if replicas > 1 and base not in AGENTRM_NAMES:
        return Replicated(name, ctx, replicas, agentrm_overrides)
    return make_policy(name, ctx, agentrm_overrides)


__all__ = ["AGENTRM_NAMES", "BASELINES", "POLICY_NAMES", "Context", "Cursor", "Policy", "Replicated",
           "build", "known", "make_policy", "sdk_backoff", "split_name"]

"""`bound-clairvoyant@ORDER`: the central gateway of gateway-fifo@30s (central.py: the same
lanes, RPM/TPM buckets, refunds, timeout and retry) with an admission order that knows each
call's TRUE service time, which no scheduler knows before the call runs (or, for the
history-only orders, what the answered calls so far tell). A yardstick for bounds.py, never a
baseline: it is runnable by its `bound-` name and never part of a
scenario's comparison (POLICY_NAMES). The orders are described in bounds.py.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import cast

from ..sim import CallRecord
from ..workload import INTERACTIVE
from .central import AdmissionOrder, CentralGateway, Waiting, parse_timeout

BOUND_NAME = "bound-clairvoyant"


# Orders with a weight after their name, longest prefix first (`late-mean-edf` before `late-edf`).
ORDER_KINDS = ("late-mean-edf", "late-edf", "mean-edf", "prompt-edf", "agent-edf", "wsrpt-run")


def parse_order(variant: str | None) -> tuple[str, float]:
    """'sjf' -> ('sjf', 0); 'edf1' / 'edf0.5' -> ('edf', K); 'mean-edf1' -> ('mean-edf', K);
    'late-edf36' -> ('late-edf', T = 36 s); 'srpt-run' -> ('srpt-run', 1); 'wsrpt-run4' ->
    ('wsrpt-run', interactive weight 4). Anything else is refused."""
    text = (variant or "").strip()
    if text == "sjf":
        return "sjf", 0.0
    if text == "srpt-run":
        return "srpt-run", 1.0
    kind = next((k for k in ORDER_KINDS if text.startswith(k)), "edf")
    if text.startswith(kind):
        try:
            weight = float(text[len(kind):])
        except ValueError:
            weight = -1.0
        if weight > 0 and weight != float("inf"):
            return kind, weight
    raise ValueError(f"{BOUND_NAME}: the variant is the order, 'sjf', 'edfK', 'mean-edfK', 'prompt-edfK', "
                     f"'agent-edfK', 'late-edfT', 'srpt-run' or 'wsrpt-runW' with K, T, W > 0 (e.g. edf1); "
                     f"got {variant!r}")


class ClairvoyantOrder(AdmissionOrder):
    """A heap over a key that uses each call's true service time (the trace's provider
    latency): known to the simulator, never to a scheduler."""

    def __init__(self, kind: str, weight: float, sim=None) -> None:
        self.kind, self.weight, self.sim = kind, weight, sim
        self.heap: list[tuple[float, int, Waiting]] = []
        # late-edf: calls that can no longer answer within T of their request, served last
        self.late: deque[Waiting] = deque()
        # mean-edf: per class, (answered calls, their total service) seen so far
        self.seen: dict[str, list[float]] = {}
        # agent-edf: the same per agent
        self.seen_agent: dict[str, list[float]] = {}

    def expected_service(self, entry: Waiting) -> float:
        """What the order assumes of the call's service: the truth (clairvoyant); for
        mean-edf, the mean service of its class's calls answered so far (history only); for
        prompt-edf, the call's true time to first token plus its class's mean time after it."""
        record = cast(CallRecord, entry.cur.record)   # a waiting call has its record
        if self.kind not in ("mean-edf", "prompt-edf", "late-mean-edf", "agent-edf"):
            return record.call.provider_latency_s
        count, total, after_first = self.seen.get(record.priority_class, (0, 0.0, 0.0))
        if self.kind == "agent-edf":
            mine = self.seen_agent.get(record.agent_id)
            if mine and mine[0]:
                return mine[1] / mine[0]   # the agent's own mean, else its class's
            return total / count if count else 0.0
        if self.kind in ("mean-edf", "late-mean-edf"):
            return total / count if count else 0.0
        return record.call.first_chunk_s + (after_first / count if count else 0.0)

    def remaining_run_service(self, entry: Waiting) -> float:
        """The true service of the run's calls from the waiting one to its last (clairvoyant)."""
        cur = entry.cur
        return sum(c.provider_latency_s for c in cur.run.calls[cur.call_index:])

    def key(self, entry: Waiting) -> float:
        if self.kind == "sjf":
            return self.expected_service(entry)
        if self.kind in ("srpt-run", "wsrpt-run"):
            weight = self.weight if entry.cur.agent.priority_class == INTERACTIVE else 1.0
            return self.remaining_run_service(entry) / weight
        weight = 1.0 if self.kind.startswith("late-") else self.weight
        return cast(CallRecord, entry.cur.record).requested_at - weight * self.expected_service(entry)

    def _give_up_on_late(self) -> None:
        """late-edf (K = 1, so the key + T is the call's latest start for an answer within T):
        a call past that instant misses T whatever happens, so it yields to every call that
        can still make it. With T at the target, this spends the 5% a P95 may miss on calls
        that miss anyway, as an order that knew every answer's length could."""
        if not self.kind.startswith("late-"):
            return
        while self.heap and self.heap[0][0] + self.weight < self.sim.now:
            self.late.append(heapq.heappop(self.heap)[2])

    def succeeded(self, entry: Waiting, attempt, now: float) -> None:
        record = cast(CallRecord, entry.cur.record)   # a waiting call has its record
        seen = self.seen.setdefault(record.priority_class, [0, 0.0, 0.0])
        seen[0] += 1
        seen[1] += now - attempt.sent_at
        seen[2] += max(0.0, now - attempt.sent_at - record.call.first_chunk_s)
        mine = self.seen_agent.setdefault(record.agent_id, [0, 0.0])
        mine[0] += 1
        mine[1] += now - attempt.sent_at

    def push(self, entry: Waiting) -> None:
        heapq.heappush(self.heap, (self.key(entry), entry.seq, entry))

    def peek(self) -> Waiting | None:
        self._give_up_on_late()
        if self.heap:
            return self.heap[0][2]
        return self.late[0] if self.late else None

    def pop(self, now: float) -> Waiting:
        self._give_up_on_late()
        return heapq.heappop(self.heap)[2] if self.heap else self.late.popleft()


class ClairvoyantGateway(CentralGateway):
    """gateway-fifo@30s's admission with a clairvoyant order (a bound, not a baseline)."""
    name = BOUND_NAME

    def __init__(self, ctx, agents=None, variant: str | None = None):
        self.kind, self.weight = parse_order(variant)
        super().__init__(ctx, agents, None)

    def parse_variant(self, variant: str | None) -> float:
        return parse_timeout(None, self.name)

    def make_order(self) -> AdmissionOrder:
        return ClairvoyantOrder(self.kind, self.weight, self.sim)

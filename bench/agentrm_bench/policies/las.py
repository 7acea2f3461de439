"""`las`: least attained service over agent runs, as the admission order of the central gateway
(central.py: the same lanes, buckets, 30 s first-chunk timeout and retry as gateway-fifo@30s).

LAS (also foreground-background, FB) serves first the job that has received the least service
so far: Rai, Urvoy-Keller and Biersack, "Analysis of LAS scheduling for job size
distributions with high variance", SIGMETRICS 2003; Nuyens and Wierman, "The
Foreground-Background queue: a survey", Performance Evaluation 2008. For heavy-tailed job
sizes it comes close to SRPT without knowing any size. Autellix's PLAS (`plas`) is its
discretised form over agent programs; this is the exact order, the strongest LAS a gateway can
run:
- a job is an agent run (`cur.run_key`); its attained service is the lane-seconds its
  attempts have held so far, every attempt counted (answered, cut, or refused: a cut attempt
  took lane time too), from its send to its answer or cut;
- the waiting call of the run with the least attained service goes next; ties in arrival
  order. No queues, no quanta, no starvation promotion (LAS has none; `plas` adds them).

Preemption. LAS preempts the job in service the moment another has less attained service. A
gateway can do that only at call boundaries: each call of a run is a new admission, made on
the run's service so far, which is what this order does (as `plas`: with one call per agent at
a time, a run's waiting call never competes with its own call in flight). What it cannot do is
stop a provider call half-way and resume it later (Autellix pauses a request inside the
engine and keeps its KV cache; cancelling an HTTP call loses its work), so a long call, once
sent, holds its lane to its end.
"""
from __future__ import annotations

import heapq

from ..sim import Attempt
from .base import Cursor
from .central import AdmissionOrder, CentralGateway, Waiting


class LasOrder(AdmissionOrder):
    """A heap of waiting calls keyed by their run's attained lane-seconds."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Waiting]] = []
        self.attained: dict[str, float] = {}   # run -> lane-seconds its attempts have held

    def push(self, entry: Waiting) -> None:
        heapq.heappush(self.heap, (self.attained.get(entry.cur.run_key, 0.0), entry.seq, entry))

    def peek(self) -> Waiting | None:
        return self.heap[0][2] if self.heap else None

    def pop(self, now: float) -> Waiting:
        return heapq.heappop(self.heap)[2]

    def _charge(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        run = entry.cur.run_key
        self.attained[run] = self.attained.get(run, 0.0) + max(0.0, now - attempt.sent_at)

    def rejected(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        self._charge(entry, attempt, now)

    def succeeded(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        self._charge(entry, attempt, now)

    def cut(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        self._charge(entry, attempt, now)

    def run_done(self, cur: Cursor) -> None:
        self.attained.pop(cur.run_key, None)


class Las(CentralGateway):
    """The central gateway with the exact LAS order over runs."""
    name = "las"

    def make_order(self) -> AdmissionOrder:
        return LasOrder()

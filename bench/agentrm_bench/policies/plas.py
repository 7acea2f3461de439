"""`plas`: Autellix's program-level least-attained-service order (Luo et al., "Autellix: An
Efficient Serving Engine for LLM Agents as General Programs", arXiv 2502.13965, section 4),
used as the NON-preemptive admission order of the central gateway (central.py: the same
lanes, buckets, 30 s first-chunk timeout and retry as gateway-fifo@30s).

What PLAS does (the paper, as its published reimplementations agree: kungfu-team/autellix
vllm/v1/core/sched/autellix/{plas_scheduler.py,mlfq.py}; Crystalclear9/Autellix
autellix/core/schedulers.py; shaoxiawjc/AutellixReproduce src/autellix_reproduce/schedulers.py):
- a program is an agent run (`cur.run_key`); its attained service is the SUM of the service
  times of its completed calls (PLAS's sum rule; ATLAS, for multi-threaded programs, takes
  the critical path instead);
- discretised priority: K queues over attained service; a call enters the queue its
  program's attained service falls in (not always the top queue, as in plain MLFQ), and is
  served first come first served within a queue, higher queues first;
- anti-starvation: a waiting call whose program has waited too long relative to its service,
  (W_program + W_call) / T_program >= beta, is promoted to the top queue (at its tail);
- preemption: a running call that exhausts its queue's quantum is demoted. Left out here: the
  gateway cannot pause a provider call, so the order is non-preemptive (as the issue asks)
  and quanta do not apply.

Constants. The queue boundaries double (0, 2, 4, 8, 16, 32, 64, inf: K = 7), the boundary set
of kungfu-team/autellix `_THRESHOLDS` and Crystalclear9/Autellix
`DEFAULT_PRIORITY_BOUNDARIES`; beta = 8, their `_BETA` / `anti_starvation_beta`
(shaoxiawjc/AutellixReproduce uses 16). ASSUMPTION: those boundaries count decode steps or
10 ms slices inside an engine; a gateway measures a call's service as the seconds from sending
it to its last byte, so here the same boundaries are SECONDS. That spreads this workload's
programs across the queues (a chat answer is 1-4 calls of a few seconds each; a batch job
passes 64 s within a few calls); in decode steps every program would sit in the bottom queue
after its first call and PLAS would reduce to "first call of a run first".

Modelled details:
- service counts only completed calls (the sum over completed calls): an attempt that was cut
  or answered 429 adds nothing;
- waiting time counts the time each call of the program spent in the gateway's queue (all of
  it, including before a promotion); backoff before a retry is not queueing;
- a retried call re-enters at the queue of its program's current service;
- program state is dropped when its run ends (Autellix garbage-collects finished programs).
"""
from __future__ import annotations

import bisect
from collections import deque
from typing import cast

from ..sim import Attempt, Simulator
from .base import Cursor
from .central import AdmissionOrder, CentralGateway, Waiting

# Queue boundaries of attained service, in seconds (ASSUMPTION above): Q0 = [0, 2), Q1 = [2, 4),
# ..., Q6 = [64, inf).
BOUNDARIES_S: tuple[float, ...] = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
QUEUES = len(BOUNDARIES_S) + 1
BETA = 8.0   # promote when waited / attained service >= BETA


class PlasOrder(AdmissionOrder):
    """K FIFO queues over a program's attained service, with promotion of starving calls."""

    def __init__(self, sim: Simulator, on_promote) -> None:
        self.sim, self.on_promote = sim, on_promote
        self.queues: list[deque[Waiting]] = [deque() for _ in range(QUEUES)]
        self.service: dict[str, float] = {}   # program -> seconds of its completed calls
        self.waited: dict[str, float] = {}    # program -> seconds its calls waited in the queue
        self.promotions = 0

    @staticmethod
    def level(service_s: float) -> int:
        return bisect.bisect_right(BOUNDARIES_S, service_s)

    def push(self, entry: Waiting) -> None:
        program = entry.cur.run_key
        served = self.service.get(program, 0.0)
        level = self.level(served)
        entry.extra["queued"] = True
        if level > 0:
            # Starving once (W + waited so far) / T >= BETA: a known instant, one timer.
            starving_at = entry.enqueued_at + BETA * served - self.waited.get(program, 0.0)
            if starving_at <= self.sim.now:
                level = 0
                self.promotions += 1
            else:
                self.sim.at(starving_at, lambda: self._promote(entry))
        entry.extra["level"] = level
        self.queues[level].append(entry)

    def _promote(self, entry: Waiting) -> None:
        if not entry.extra.get("queued") or entry.extra["level"] == 0:
            return
        # The old place goes stale (skipped when it reaches the front); the call joins the
        # tail of the top queue.
        entry.extra["level"] = 0
        self.promotions += 1
        self.queues[0].append(entry)
        self.on_promote()

    def _front(self) -> deque[Waiting] | None:
        for level, queue in enumerate(self.queues):
            while queue and (not queue[0].extra.get("queued") or queue[0].extra["level"] != level):
                queue.popleft()   # stale: already admitted, or promoted out of this queue
            if queue:
                return queue
        return None

    def peek(self) -> Waiting | None:
        queue = self._front()
        return queue[0] if queue else None

    def pop(self, now: float) -> Waiting:
        entry = cast("deque[Waiting]", self._front()).popleft()   # pop follows a peek that found one
        entry.extra["queued"] = False
        program = entry.cur.run_key
        self.waited[program] = self.waited.get(program, 0.0) + (now - entry.enqueued_at)
        return entry

    def succeeded(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        program = entry.cur.run_key
        self.service[program] = self.service.get(program, 0.0) + (now - attempt.sent_at)

    def run_done(self, cur: Cursor) -> None:
        self.service.pop(cur.run_key, None)
        self.waited.pop(cur.run_key, None)


class Plas(CentralGateway):
    """The central gateway with Autellix's PLAS order, non-preemptive."""
    name = "plas"

    def make_order(self) -> AdmissionOrder:
        return PlasOrder(self.sim, self.pump)

    def finish(self) -> None:
        super().finish()
        promotions = cast(PlasOrder, self.order).promotions   # make_order made it
        self.recorder.notes["plas_promotions"] = self.recorder.notes.get("plas_promotions", 0) + promotions

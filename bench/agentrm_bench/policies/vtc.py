"""`vtc`: Virtual Token Counter fair queuing per agent (Sheng et al., "Fairness in Serving Large
Language Models", OSDI 2024, arXiv 2401.00588), as the admission order of the central gateway
(central.py: same lanes, buckets, 30 s first-chunk timeout and retry as gateway-fifo@30s).

What VTC does, checked against the paper's artifact (Ying1123/VTC-artifact,
slora/server/router/vtc_req_queue.py, `VTCReqQueue`, the `vtc_fair` scheduler):
- a client is an agent (`agent_id`); each has a counter of weighted service received,
  starting at 0 when the client is first seen (`self.served[req.adapter_dir] = 0`);
- counter lift: when a client's waiting queue goes from empty to non-empty, its counter is
  raised to the smallest counter among the OTHER clients that have requests waiting, if any
  (`append`: `served[c] = max(served[c], min(cnts))`, `cnts` over clients with
  `len(user_req_list[k]) > 0 and k != c`); with nobody else waiting it is left as it is;
- the next request admitted is the head of the waiting client with the smallest counter
  (`generate_new_batch`: `min(active_served, key=active_served.get)`; ties go to the client
  seen first, as `min` over a dict does), and if it does not fit, admission stops there
  (`else: break`): head of line, as in the gateway;
- charges: input tokens at admission, `input_price = 1` per token (`generate_new_batch`,
  cost_func "linear"), output tokens as they are produced, `output_price = 2` per token
  (`update_counter`, called once per decode step), all weights 1 (`fair_weights`), i.e.
  w_p = 1, w_q = 2.

Modelled here:
- The input charge is made when the gateway sends the attempt. ASSUMPTION: a 429 received no
  service, so its input charge is taken back when the 429 arrives (the artifact has no
  rejections to follow).
- The output charge is made when the client has seen the tokens: at the last byte for an
  answered call, and for a stream cut after a stall, the tokens it streamed before stalling
  (its decode rate times the seconds it flowed). Charging per chunk instead would make no
  difference: counters are compared only at admission, and an agent has at most one call
  outstanding, so an agent with a call in flight is never among the waiting clients whose
  counters are compared or used for the lift. A hung attempt produced no output.
- One call per agent at a time means an agent leaves the waiting set each time it is served
  and re-enters (and is lifted) with its next call: VTC then keeps heavy users' counters
  above the minimum, so they go after lighter agents that wait at the same time, but an
  agent cannot bank credit by being idle. This is what VTC does with such clients.

Left out: VTC's own continuous-batching memory check (`_can_add_new_req`): the lanes and
buckets are the capacity here; weighted and length-predicting variants.
"""
from __future__ import annotations

import heapq
from typing import cast

from ..sim import Attempt, CallRecord
from .central import AdmissionOrder, CentralGateway, Waiting

INPUT_PRICE = 1.0    # VTCReqQueue(input_price=1): w_p per prompt token
OUTPUT_PRICE = 2.0   # VTCReqQueue(output_price=2): w_q per generated token
FAIR_WEIGHT = 1.0    # fair_weights default 1 for every client


def streamed_output_tokens(attempt: Attempt) -> int:
    """Output tokens the client had received from an attempt that ended without its last
    byte: none before the first chunk; for a stream that stalled, what flowed until the
    stall at the call's own decode rate."""
    if attempt.first_chunk_at is None:
        return 0
    call = attempt.record.call
    stream_s = call.provider_latency_s - call.first_chunk_s
    if stream_s <= 0:
        return call.output_tokens
    until = attempt.stalls_at if attempt.stalls_at is not None else attempt.ended_at
    flowed = max(0.0, (until or attempt.first_chunk_at) - attempt.first_chunk_at)
    return min(call.output_tokens, int(call.output_tokens * flowed / stream_s))


class VtcOrder(AdmissionOrder):
    """Per-client FIFO queues; the backlogged client with the smallest counter goes next."""

    def __init__(self) -> None:
        self.counter: dict[str, float] = {}
        self.first_seen: dict[str, int] = {}
        self.waiting: dict[str, list[Waiting]] = {}   # client -> its waiting calls, in order
        self._heap: list[tuple[float, int, str]] = []
        self._key: dict[str, tuple[float, int]] = {}  # the live heap key of each backlogged client
        self.lifts = 0

    @staticmethod
    def client(entry: Waiting) -> str:
        return entry.cur.agent.agent_id

    def _index(self, client: str) -> None:
        heapq.heappush(self._heap, (self.counter[client], self.first_seen[client], client))
        self._key[client] = (self.counter[client], self.first_seen[client])

    def _min_backlogged(self) -> float | None:
        self._clean()
        return self._heap[0][0] if self._heap else None

    def _clean(self) -> None:
        heap = self._heap
        while heap and self._key.get(heap[0][2]) != heap[0][:2]:
            heapq.heappop(heap)   # a stale key: the client was served or re-charged

    def push(self, entry: Waiting) -> None:
        c = self.client(entry)
        if c not in self.counter:
            self.counter[c] = 0.0
            self.first_seen[c] = len(self.first_seen)
        queue = self.waiting.setdefault(c, [])
        if not queue:
            # Counter lift (VTCReqQueue.append): over the other waiting clients; c is not
            # among them, its queue being empty.
            lowest = self._min_backlogged()
            if lowest is not None and lowest > self.counter[c]:
                self.counter[c] = lowest
                self.lifts += 1
            queue.append(entry)
            self._index(c)
        else:
            queue.append(entry)

    def peek(self) -> Waiting | None:
        self._clean()
        if not self._heap:
            return None
        return self.waiting[self._heap[0][2]][0]

    def pop(self, now: float) -> Waiting:
        self._clean()
        c = heapq.heappop(self._heap)[2]
        del self._key[c]
        queue = self.waiting[c]
        entry = queue.pop(0)
        if queue:
            self._index(c)
        return entry

    def _charge(self, c: str, amount: float) -> None:
        self.counter[c] += amount / FAIR_WEIGHT
        if c in self._key:
            self._index(c)   # re-key a waiting client; the old key goes stale

    def admitted(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        self._charge(self.client(entry), INPUT_PRICE * cast(CallRecord, entry.cur.record).call.prompt_tokens)

    def rejected(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        self._charge(self.client(entry), -INPUT_PRICE * cast(CallRecord, entry.cur.record).call.prompt_tokens)

    def succeeded(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        self._charge(self.client(entry), OUTPUT_PRICE * cast(CallRecord, entry.cur.record).call.output_tokens)

    def cut(self, entry: Waiting, attempt: Attempt, now: float) -> None:
        self._charge(self.client(entry), OUTPUT_PRICE * streamed_output_tokens(attempt))


class Vtc(CentralGateway):
    """The central gateway with VTC's admission order, per agent."""
    name = "vtc"

    def make_order(self) -> AdmissionOrder:
        return VtcOrder()

    def finish(self) -> None:
        super().finish()
        self.recorder.notes["vtc_lifts"] = self.recorder.notes.get("vtc_lifts", 0) + cast(VtcOrder, self.order).lifts

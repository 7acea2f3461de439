"""`gateway-fifo`: the strongest simple design, the baseline every later target is set against.

It is the per-call gateway a team writes in an afternoon with httpx and asyncio: one FIFO
queue in front of the provider, a lane semaphore held only while an attempt is in flight,
shared RPM/TPM token buckets, a first-chunk (read) timeout and one retry. Every rule and its
source is in `central.py`; this module only fixes the order (FIFO, retries first) and reads
the timeout from the variant: `gateway-fifo@10s`, `@30s`, `@120s` (any positive "<number>s";
30 s without a variant).
"""
from __future__ import annotations

from .central import AdmissionOrder, CentralGateway, FifoOrder, parse_timeout


class GatewayFifo(CentralGateway):
    """Central per-call FIFO gateway; the variant is the first-chunk timeout."""
    name = "gateway-fifo"

    def parse_variant(self, variant: str | None) -> float:
        return parse_timeout(variant, self.name)

    def make_order(self) -> AdmissionOrder:
        return FifoOrder()

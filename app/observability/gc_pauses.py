"""How long the cyclic garbage collector holds the process, per generation.

A collection stops the worker's event loop: every request in flight waits it out, so long
pauses show in the grant latency's tail without showing in any other metric (the young
generation's threshold that keeps them short: app/serving_gc.py and
docs/architecture/decisions/gc-tuning.md). This exports them as the histogram
`agentrm_gc_pause_seconds{generation}` (wall time, which is what a waiting request sees),
per process like the gateway's metrics.

The recorder runs inside `gc.callbacks`, that is, at whatever allocation triggered the
collection, possibly while this very thread holds a lock of prometheus_client. So it takes
no lock and calls no metric: it adds to plain lists, and a collector turns them into the
histogram at scrape time. (A torn read of a bucket while a collection is being counted is
at worst one pause early or late in one scrape.)
"""
from __future__ import annotations

import bisect
import gc
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import HistogramMetricFamily

# Upper bounds, seconds. A young collection should stay in the first few; a full
# collection of a large heap reaches the last ones.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
GENERATIONS = 3   # CPython's


class GcPauses:
    """Counts each collection's duration into per-generation buckets."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._started: float | None = None
        # per generation: counts per bucket (the last one: above every bound), total seconds
        self.counts = [[0] * (len(BUCKETS) + 1) for _ in range(GENERATIONS)]
        self.sums = [0.0] * GENERATIONS

    def callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        started, self._started = self._started, None
        generation = info.get("generation")
        if started is None or not isinstance(generation, int) or not 0 <= generation < GENERATIONS:
            return   # a stop without its start (installed mid-collection)
        seconds = max(0.0, self._clock() - started)
        self.counts[generation][bisect.bisect_left(BUCKETS, seconds)] += 1
        self.sums[generation] += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "agentrm_gc_pause_seconds",
            "Collections of Python's cyclic garbage collector in this process, by generation, "
            "and how long each held the process (its event loop waits them out).",
            labels=["generation"])
        for generation in range(GENERATIONS):
            counts = list(self.counts[generation])
            cumulative, buckets = 0, []
            for bound, n in zip(BUCKETS, counts):
                cumulative += n
                buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", cumulative + counts[-1]))
            family.add_metric([str(generation)], buckets, self.sums[generation])
        yield family


PAUSES = GcPauses()


def install() -> None:
    """Record this process's collections (once, however many apps it runs)."""
    if PAUSES.callback not in gc.callbacks:
        gc.callbacks.append(PAUSES.callback)

"""The garbage collector's settings for a serving worker.

A profile of a worker under load (1,000 agents, py-spy) put 29% of its CPU in CPython's
cyclic collector. Every request allocates thousands of container objects (GraphQL
execution contexts, coroutines, futures, dicts), so a young collection ran every 700
allocations, and each one traversed every young object still alive: with a thousand
requests in flight, mostly the same long-waiting ones again and again. Almost all of that
memory is freed by reference counting anyway; the collector only exists for cycles.

So, once a worker has loaded its state:
- `gc.freeze()` moves everything alive (the read model, the schema, imported modules) out
  of the collector's sight: it is never traversed again, and never collected (none of it
  is garbage);
- the young generation's threshold is raised to YOUNG_THRESHOLD allocations, so young
  collections are rarer. Cycles still get collected, a little later; what that costs in
  memory is bounded by the threshold, and `bench load` reports RSS against turns so a leak
  would show.

How far to raise it is a trade between the collector's CPU and its pauses: a collection
stops the worker's event loop, and its length grows with the young generation (about 1 us
of CPU per object, mostly cache misses: at saturation a young generation holds ~60k
objects, the coroutines of the requests in flight, the log's tail, the turns not saved
yet, ~400k references between them). Measured with `gc.callbacks` in both workers under
`bench load` (CPU time of each collection, saturation and half rate):

| young threshold | young pause, mean (worst) | generation 1 pause | collector CPU |
|---|---|---|---|
| 50,000 (before) | 53-59 ms (82) | 167 ms | under 1% |
| 10,000 | 12-16 ms (48) | 59-90 ms | under 1% |
| 5,000 (now) | 5-7 ms (33) | 47-50 ms (70) | about 1% |

At 50,000 every few seconds a collection held a worker for 50-80 ms of CPU (100-350 ms
of wall time on a loaded machine), and every request in flight waited that long. (These
figures are from a machine shared with other work; the effect on the grant latency's P99
was seen there, 369 -> 288 ms at 150 turns/s, but not yet measured on a quiet machine.) The older generations'
thresholds stay: a generation-1 collection every 20 young ones, a full one after 10 of
those (and, CPython's rule, only once the objects promoted since the last one are a
quarter of what it found then).
"""
from __future__ import annotations

import gc

YOUNG_THRESHOLD = 5_000
OLDER_THRESHOLDS = (20, 10)


def tune_for_serving() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)

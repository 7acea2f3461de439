"""The garbage collector's settings for a serving worker.

Under load CPython's cyclic collector is a large share of a worker's CPU. Every request
allocates thousands of container objects (GraphQL execution contexts, coroutines, futures,
dicts), so at CPython's default a young collection runs every 700 allocations, and each
one traverses every young object still alive: with a thousand requests in flight, mostly
the same long-waiting ones again and again. Almost all of that memory is freed by
reference counting anyway; the collector only exists for cycles.

So, once a worker has loaded its state:
- `gc.freeze()` moves everything alive (the read model, the schema, imported modules) out
  of the collector's sight: it is never traversed again, and never collected (none of it
  is garbage);
- the young generation's threshold is raised to YOUNG_THRESHOLD allocations, so young
  collections are rarer. Cycles still get collected, a little later; what that costs in
  memory is bounded by the threshold, and `bench load` reports RSS against turns so a leak
  would show.

How far to raise it is a trade between the collector's CPU and its pauses: a collection
stops the worker's event loop, every request in flight waits it out, and its length grows
with the young generation (at saturation: the requests in flight's coroutines, the log's
tail and the turns not saved yet). YOUNG_THRESHOLD keeps both the collector's CPU and its
pauses small; the measurements behind the value are in
docs/architecture/decisions/gc-tuning.md, and `agentrm_gc_pause_seconds` shows the pauses
in production. The older generations' thresholds are OLDER_THRESHOLDS (20 and 10).
"""
from __future__ import annotations

import gc

YOUNG_THRESHOLD = 5_000
OLDER_THRESHOLDS = (20, 10)


def tune_for_serving() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)

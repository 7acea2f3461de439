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
stops the worker's event loop, every request in flight waits it out, and its length grows
with the young generation (about 1 us of CPU per object, mostly cache misses: at saturation
the requests in flight's coroutines, the log's tail and the turns not saved yet). At 50,000
a young collection held a worker for 53-59 ms of CPU every few seconds; at 5,000 it takes
5-7 ms, generation-1 collections (every 20 young ones) about 50 ms, and the collector's CPU
stays about 1% (measured under `bench load` on a machine shared with other work:
docs/performance-history.md, "Tenth round"; `agentrm_gc_pause_seconds` shows the pauses in
production). The older generations' thresholds, 20 and 10, were not changed.
"""
from __future__ import annotations

import gc

YOUNG_THRESHOLD = 5_000
OLDER_THRESHOLDS = (20, 10)


def tune_for_serving() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)

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
  collections are ~70x rarer. Cycles still get collected, a little later; what that costs
  in memory is bounded by the threshold (tens of thousands of small objects: a few MB),
  and `bench load` reports RSS against turns so a leak would show.
"""
from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
OLDER_THRESHOLDS = (20, 10)


def tune_for_serving() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)

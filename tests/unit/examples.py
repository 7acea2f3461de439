"""How many examples a property test draws.

The full count in `make test`. Under `make mutate` (mutmut sets MUTANT_UNDER_TEST for
every mutant it runs) a tenth of it, at least 10: a mutant is run against every property
that covers it, a surviving one against all of their examples, and at the full count the
run would take hours on two cores. What a mutant survives there still faces the full
count in `make test`."""
from __future__ import annotations

import os


def examples(n: int) -> int:
    return max(10, n // 10) if os.environ.get("MUTANT_UNDER_TEST") else n

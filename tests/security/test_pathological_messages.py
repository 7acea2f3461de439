"""Threat-model row: key-fact extraction had patterns whose work grew with the square of a
message's length (a run of `1,` or `a.` starts a match at every character and each scans to
the end), so one agent's 20k-character message took 12.5 s of the one background process
every agent's compaction shares. Each pattern now starts only at the beginning of a token
and never backtracks into it, so the work is linear in the message.

Checked as a growth rate, not a time: four times the input may cost at most eight times
as much (linear is four, the quadratic patterns were sixteen), each the fastest of three
runs, so a noisy machine does not decide the verdict."""
from __future__ import annotations

import time

import pytest

from app.context import facts

HOSTILE_RUNS = ["1,", "1.", "a.", "a-", "a/", "a1-", "Europe/A", "@a.", "x:1"]


def _fastest_of_three(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        facts.extract_facts(text, 1, "user")
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("run", HOSTILE_RUNS)
def test_fact_extraction_work_grows_linearly_with_a_hostile_message(run):
    small, large = run * (10_000 // len(run)), run * (40_000 // len(run))
    ratio = _fastest_of_three(large) / max(_fastest_of_three(small), 1e-4)
    assert ratio < 8, f"{run!r}: 4x the text cost {ratio:.1f}x the work"

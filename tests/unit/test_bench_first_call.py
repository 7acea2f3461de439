"""bench/agentrm_bench/first_call.py: its quantiles and its report (the run itself starts a
real server: `agentrm bench first-call`)."""
from __future__ import annotations

from agentrm_bench.first_call import TARGET_P50_S, quantile, to_markdown


def test_quantiles_are_nearest_rank():
    values = [0.1 * n for n in range(20, 0, -1)]
    assert quantile(values, 0.5) == values[10]          # the 10th of 20 smallest
    assert quantile(values, 0.9) == values[2]           # the 18th
    assert quantile([3.0], 0.9) == 3.0


def test_the_report_names_every_round_and_the_verdict():
    rounds = [{"at_s": 240.0 + 30 * i, "p50_s": 0.08, "p90_s": 0.1, "max_s": 0.3, "errors": 0,
               "fleet_pools": ["demo"], "fleet_turns_during": 4,
               "rate_factor_after": {"default": 1.0, "demo": 0.25}} for i in range(3)]
    result = {"calls": 20, "repeat": 3, "warmup_s": 240.0, "gap_s": 30.0, "target_p50_s": TARGET_P50_S,
              "runs": rounds, "p50_s": 0.08, "p50_spread_s": [0.08, 0.08], "p90_s": 0.1, "max_s": 0.3,
              "errors": 0, "target_met": True}
    page = to_markdown(result)
    assert page.count("| demo | 4 | default 1.00, demo 0.25 |") == 3
    assert "p50 80 ms (rounds 80 ms to 80 ms), p90 100 ms, max 300 ms, errors 0: target met." in page
    assert "target missed" in to_markdown({**result, "target_met": False})

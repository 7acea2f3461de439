"""The live check's seeds and repeats: which runs are asked for, and how their verdicts
and spread are summed up (the runs themselves: tests/integration/test_live_scenarios.py)."""
from __future__ import annotations

import asyncio

import pytest

from agentrm_bench import live_seeds
from agentrm_bench.live_scenarios import ScenarioSettings


@pytest.mark.parametrize("text,seeds", [("1-5", [1, 2, 3, 4, 5]), ("3", [3]), ("1,3,11-13", [1, 3, 11, 12, 13]),
                                        (" 2 , 2, 1-2 ", [2, 1]), ("0-1", [0, 1])])
def test_seeds_are_numbers_and_ranges_each_once_in_order(text, seeds):
    assert live_seeds.parse_seeds(text) == seeds


@pytest.mark.parametrize("text,message", [("", "no seeds"), ("5-1", "is empty"), ("a", "whole numbers"),
                                          ("1-2-3", "whole numbers"), ("-1", "whole numbers"),
                                          ("1.5", "whole numbers")])
def test_bad_seeds_are_refused_with_the_reason(text, message):
    with pytest.raises(ValueError, match=message):
        live_seeds.parse_seeds(text)


def _result(rows: dict) -> dict:
    return {"comparison": {k: {"live": a, "sim": b, "within": w} for k, (a, b, w) in rows.items()},
            "all_within": all(w for _, _, w in rows.values()), "elapsed_s": 10.0,
            "diagnostics": {"client_delay_p50_s": 0.020, "client_delay_p95_s": 0.055,
                            "report_delay_p50_s": 0.034, "report_delay_p95_s": 0.134}}


def test_every_seed_runs_repeat_times_in_order_and_the_summary_keeps_each_verdict_and_the_spread():
    asked = []
    results = {1: [_result({"p95": (110.0, 100.0, True), "cut": (0, 0, True)}),
                   _result({"p95": (90.0, 100.0, True), "cut": (1, 0, True)})],
               2: [_result({"p95": (130.0, 100.0, False), "cut": (0, 2, True)}),
                   _result({"p95": (100.0, 100.0, True), "cut": (0, 0, True)})]}

    async def one(seed):
        asked.append(seed)
        return results[seed][asked.count(seed) - 1]

    runs = asyncio.run(live_seeds.run_seeds(one, [2, 1], 2))
    assert asked == [2, 2, 1, 1] and [(r["seed"], r["repeat"]) for r in runs] == [(2, 1), (2, 2), (1, 1), (1, 2)]
    summary = live_seeds.summarize(runs)
    p95 = summary["metrics"]["p95"]
    assert [(r["seed"], r["repeat"], r["live"], r["ratio"], r["within"]) for r in p95["runs"]] == \
        [(2, 1, 130.0, 1.3, False), (2, 2, 100.0, 1.0, True), (1, 1, 110.0, 1.1, True), (1, 2, 90.0, 0.9, True)]
    assert p95["passed"] == 3 and p95["failed_runs"] == [(2, 1)]
    assert (p95["live"]["min"], p95["live"]["max"], p95["live"]["mean"]) == (90.0, 130.0, 107.5)
    assert p95["live"]["stdev"] == pytest.approx(17.078, abs=1e-3)
    assert (p95["ratio"]["min"], p95["ratio"]["max"]) == (0.9, 1.3)
    cut = summary["metrics"]["cut"]   # a sim of 0 has no ratio; the verdict (a floor) still counts
    assert [r["ratio"] for r in cut["runs"]] == [0.0, None, None, None] and cut["passed"] == 4
    assert summary["all_within"] is False
    text = live_seeds.to_markdown("Live `x`", summary)
    assert "| p95 | 130.0 / 100.0 (1.30) FAIL | 100.0 / 100.0 (1.00) |" in text
    assert "| 3/4 | 90.0-130.0 (107.5 ± 17.1) | 0.90-1.30 |" in text and "s2#1, s2#2, s1#1, s1#2" in text
    assert "| s1#2 | 20 / 55 | 34 / 134 |" in text      # each run's measured delays: how loaded it was


def test_repeat_must_be_at_least_one():
    with pytest.raises(ValueError, match="repeat"):
        asyncio.run(live_seeds.run_seeds(None, [1], 0))


def test_the_live_pool_runs_the_rules_durations_compressed_with_the_stall_deadline_floored():
    s = ScenarioSettings("mixed-lanes", compression=10.0).pool_settings()
    assert s["class_slack_seconds"] == [0.0, 0.6, 1.2]          # 0/6/12 s over 10
    assert s["run_forget_seconds"] == 60.0 and s["run_slack_cap_seconds"] == 12.0
    assert s["size_slack_cap_seconds"] == 3.0 and s["size_slack_per_ktoken"] == 0.0
    assert s["output_credit_per_ktoken"] == pytest.approx(0.3) and s["output_credit_cap_seconds"] == 3.0
    assert s["stall_timeout_seconds"] == 1.0                     # 6 s over 10 is under the 1 s wall floor
    assert ScenarioSettings("hangs", compression=4.0).pool_settings()["stall_timeout_seconds"] == 1.5

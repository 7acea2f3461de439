"""bench/agentrm_bench/abuse_bench.py: its ratios, verdicts and report (the run itself starts a
real server: tests/integration/test_bench_abuse.py)."""
from __future__ import annotations

from agentrm_bench.abuse_bench import summarise, to_markdown
from agentrm_bench.abusers import junk_message


def _phase(grant_p95: float | None, view_p95: float | None, abusers: dict | None = None) -> dict:
    return {"grant_ms": {"n": 10, "p50": 1.0, "p95": grant_p95, "max": 9.0},
            "view_ms": {"n": 0 if view_p95 is None else 5, "p50": view_p95, "p95": view_p95, "max": view_p95},
            "append_ms": {"n": 5, "p50": 1.0, "p95": 2.0, "max": 3.0}, "not_granted_in_wait": 0, "turns": 10,
            "errors": {}, "pauses": {}, "cpu_s": {"server": 1.0, "postgres": 0.5, "driver": 0.1},
            "load_average_1m": [1.0, 1.0], "settle": {"seconds": 0.0, "turns_left": 0, "index_backlog_left": 0},
            "abusers": abusers}


ABUSERS = {"flooder": {"requests": 100, "refused LIMIT_EXCEEDED": 60}, "junk": {"appended": 4, "append_p50_ms": 5.0},
           "subscriber": {"attempted": 200, "accepted": 200}, "claimant": {"granted": 1}, "cpu_s": 1.5}
MEMORY = {"requests": 1000, "per_kind": 200, "warmup_per_kind": 20, "seconds": 5.0,
          "answers": {"invalid token": {"HTTP 200 UNAUTHENTICATED": 200}},
          "rss_before_mb": {"server": 100.0, "children": 50.0}, "rss_after_mb": {"server": 103.0, "children": 50.0},
          "rss_after_second_round_mb": {"server": 103.5, "children": 50.0},
          "growth_mb": 3.0, "second_round_growth_mb": 0.5}
SETTINGS = {"agents": 8, "seconds": 30.0, "repeat": 3, "seed": 1, "pool": {"lanes": 4, "rpm": 600, "tpm": 400_000},
            "flood_rate_per_s": 76.9, "subscriptions_attempted": 200, "hostile_per_kind": 200}


def test_the_verdict_is_on_the_median_of_the_pairs_ratios():
    runs = [{"clean": _phase(10.0, 20.0), "abuse": _phase(a, 22.0, ABUSERS)} for a in (11.0, 12.0, 30.0)]
    result = summarise(runs, MEMORY, SETTINGS, {})
    assert result["grant_p95_ratio"] == {"median": 1.2, "min": 1.1, "max": 3.0, "runs": [1.1, 1.2, 3.0]}
    assert result["verdicts"] == {"grant_p95_within_1.2x": True, "view_p95_within_1.2x": True,
                                  "rss_growth_under_5_mb": True, "all_met": True}
    assert result["abusers"]["flooder"] == {"requests": 300, "refused LIMIT_EXCEEDED": 180}
    assert "append_p50_ms" not in result["abusers"]["junk"]


def test_a_phase_without_views_has_no_ratio_and_misses_the_target():
    runs = [{"clean": _phase(10.0, None), "abuse": _phase(10.0, None, ABUSERS)}]
    result = summarise(runs, {**MEMORY, "growth_mb": 5.0}, SETTINGS, {})
    assert result["view_p95_ratio"]["median"] is None
    assert not result["verdicts"]["view_p95_within_1.2x"] and not result["verdicts"]["rss_growth_under_5_mb"]
    page = to_markdown(result)
    assert "| view P95 ratio abuse/clean | none | none | at most 1.2: **missed** |" in page
    assert "targets missed: view_p95_within_1.2x, rss_growth_under_5_mb." in page


def test_a_junk_message_is_its_run_repeated_to_the_length():
    assert junk_message("a1-", 7) == "a1-a1-a"
    assert len(junk_message("Europe/A", 100_000)) == 100_000

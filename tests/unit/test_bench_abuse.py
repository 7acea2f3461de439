"""bench/agentrm_bench/abuse_bench.py: its ratios, verdicts and report (the run itself starts a
real server: tests/integration/test_bench_abuse.py)."""
from __future__ import annotations

from agentrm_bench.abuse_bench import summarise, to_markdown
from agentrm_bench.abusers import junk_message
from agentrm_bench.hostile_requests import summarise_series


def _phase(grant_p95: float | None, view_p95: float | None, abusers: dict | None = None) -> dict:
    return {"grant_ms": {"n": 10, "p50": 1.0, "p95": grant_p95, "max": 9.0},
            "view_ms": {"n": 0 if view_p95 is None else 5, "p50": view_p95, "p95": view_p95, "max": view_p95},
            "append_ms": {"n": 5, "p50": 1.0, "p95": 2.0, "max": 3.0}, "not_granted_in_wait": 0, "turns": 10,
            "errors": {}, "pauses": {}, "cpu_s": {"server": 1.0, "postgres": 0.5, "driver": 0.1},
            "load_average_1m": [1.0, 1.0], "settle": {"seconds": 0.0, "turns_left": 0, "index_backlog_left": 0},
            "abusers": abusers}


ABUSERS = {"flooder": {"requests": 100, "refused LIMIT_EXCEEDED": 60}, "junk": {"appended": 4, "append_p50_ms": 5.0},
           "subscriber": {"attempted": 200, "accepted": 200}, "claimant": {"granted": 1}, "cpu_s": 1.5}
def _series(*server_mb: float) -> list[dict]:
    return [{"server": mb, "children": 50.0} for mb in server_mb]


MEMORY = summarise_series(_series(100.0, 130.0, 104.0, 106.0, 105.5, 107.0), 200,
                          {"invalid token": {"HTTP 200 UNAUTHENTICATED": 200}}, [5.0] * 5)
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
    leaking = summarise_series(_series(100.0, 101.0, 102.0, 108.0, 113.0, 118.0), 200, {}, [5.0] * 5)
    result = summarise(runs, leaking, SETTINGS, {})
    assert result["view_p95_ratio"]["median"] is None
    assert not result["verdicts"]["view_p95_within_1.2x"] and not result["verdicts"]["rss_growth_under_5_mb"]
    page = to_markdown(result)
    assert "| view P95 ratio abuse/clean | none | none | at most 1.2: **missed** |" in page
    assert "targets missed: view_p95_within_1.2x, rss_growth_under_5_mb." in page


def test_memory_is_judged_on_the_last_passes_not_on_the_first_swing():
    # The first pass rose 30 MB (a peak the allocator kept) and the next fell back: the last
    # three passes grew 2, -0.5 and 1.5 MB, each under the target.
    assert MEMORY["growth_per_pass_mb"] == [30.0, -26.0, 2.0, -0.5, 1.5]
    assert (MEMORY["growth_mb"], MEMORY["late_growth_mb"], MEMORY["late_growth_max_mb"]) == (30.0, 3.0, 2.0)
    runs = [{"clean": _phase(10.0, 20.0), "abuse": _phase(10.0, 20.0, ABUSERS)}]
    page = to_markdown(summarise(runs, MEMORY, SETTINGS, {}))
    assert "100 -> 130 -> 104 -> 106 -> 105.5 -> 107; the first pass +30, the last 3 +3 in all." in page


def test_a_junk_message_is_its_run_repeated_to_the_length():
    assert junk_message("a1-", 7) == "a1-a1-a"
    assert len(junk_message("Europe/A", 100_000)) == 100_000

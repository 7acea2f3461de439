"""The faults and priority workloads' arithmetic: what a run's calls become in the report."""
from __future__ import annotations

from agentrm_bench.peers_faults import FAULT_CALLS, fault_row, summarise_faults, summarise_priority, to_markdown


def _call(kind: str, stream: bool, outcome: str, held: float) -> dict:
    return {"kind": kind, "stream": stream, "tag": f"{kind}-{'stream' if stream else 'whole'}",
            "outcome": outcome, "held_s": held}


def _run(peer: str, hang_s: float, slow_outcome: str) -> dict:
    return {"peer": peer, "calls": [
        _call("hang", True, "client_timeout", hang_s), _call("hang", True, "504", hang_s + 2),
        _call("hang", False, "client_timeout", 130.0),
        _call("stall", True, "cut", 8.0),
        _call("slow", True, slow_outcome, 22.0), _call("slow", False, "ok", 45.0),
        _call("outage", False, "503", 0.1), _call("outage", False, "ok", 4.0),
        _call("normal", True, "ok", 1.0), _call("normal", False, "ok", 1.0)],
        "provider_calls": {"hang-stream": 2, "hang-whole": 1, "stall-stream": 1, "slow-stream": 1,
                           "slow-whole": 1, "outage-whole": 6, "normal": 2}}


def test_a_run_counts_cut_live_calls_hold_times_and_provider_calls_per_user_call():
    row = fault_row(_run("x", 10.0, "408"))
    assert row["user_calls"] == 10 and row["completed"] == 4
    assert row["live_calls"] == 4 and row["live_cut"] == 1 and row["slow_cut"] == 1
    assert row["outage_completed"] == 1 and row["outage_calls"] == 2
    assert row["hang_stream_held_s"] == {"p50": 11.0, "max": 12.0}
    assert row["hang_whole_held_s"] == {"p50": 130.0, "max": 130.0}
    assert row["provider_per_user_call"] == 14 / 10 and row["outage_provider_per_user_call"] == 3.0
    assert row["outcomes"]["hang-stream"] == {"client_timeout": 1, "504": 1}


def test_the_summary_gives_median_and_spread_over_runs_and_the_markdown_shows_them():
    runs = [{**fault_row(_run("agentrm", h, "ok")), "run": r} for r, h in enumerate((10.0, 20.0, 30.0))]
    [row] = summarise_faults(runs)
    assert row["runs"] == 3 and row["live_cut"] == {"median": 0, "min": 0, "max": 0}
    assert row["hang_stream_held_s_p50"] == {"median": 21.0, "min": 11.0, "max": 31.0}
    prio = summarise_priority([{"peer": "agentrm", "contention": "rate", "interactive_p95_wait_s": w,
                                "interactive_p50_wait_s": 0.1, "batch_p95_wait_s": 9.0, "interactive_calls": 12,
                                "batch_calls": 30, "provider_429": 0} for w in (0.2, 0.4, 0.3)])
    assert prio[0]["interactive_p95_wait_s"] == {"median": 0.3, "min": 0.2, "max": 0.4}
    section = {"settings": {"repeat": 3, "cores": 2, "outage_s": 5.0, "normal_clients": 2, "normal_seconds": 40.0,
                            "client_timeout_s": 130.0, "batch_clients": 8, "interactive_clients": 2,
                            "think_s": 2.0, "priority_seconds": 45.0, "priority_call_s": 1.0,
                            "priority_rpm": 60, "priority_lanes": 2},
               "load_average": {"start": [3.0, 2.0, 1.0], "end": [4.0, 2.0, 1.0]},
               "peers": {"agentrm": {"status": "ok", "reason": "", "version": "1", "config": {}},
                         "portkey": {"status": "skipped", "reason": "not installed", "version": "", "config": {}}},
               "faults": [row], "priority": prio}
    text = to_markdown(section)
    assert "## Faults" in text and "## Priority under contention" in text
    assert "| portkey | skipped: not installed | - |" in text
    assert "| agentrm | 5 of 10 | 0 (4) | 0 |" in text
    assert "21.0 (11.0 to 31.0) / 22.0 (12.0 to 32.0)" in text
    assert "| rate | agentrm | 0.30 (0.20 to 0.40) |" in text


def test_the_workload_is_the_one_fixed_before_the_results():
    tags = [c.tag for c in FAULT_CALLS]
    assert {t: tags.count(t) for t in tags} == {"hang-stream": 2, "hang-whole": 2, "stall-stream": 2,
                                                "slow-whole": 2, "slow-stream": 2, "outage-whole": 4,
                                                "outage-stream": 2}

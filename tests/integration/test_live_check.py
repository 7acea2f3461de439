"""The live check, small and short: the scheduler benchmark's workload through the real
service (PostgreSQL, GraphQL over HTTP, a fake provider on loopback), metrics computed from
the event log and set beside the simulation's.

Agreement within 15% is a benchmark result (`agentrm bench live`), measured, not asserted
here: a 9-second run of a dozen agents is too small for a stable p95, and no speed is
asserted (not even a throughput floor). What is asserted is that the whole pipeline runs,
that the log yields every metric, that the service itself reaped the hung calls (the
harness only cancels what is left after the run), and that the log the service wrote
keeps the scheduler's invariants."""
from __future__ import annotations

from collections import Counter

from agentrm_bench.live_check import COMPARED, run_async
from app.audit import load_records
from app.audit.verify import verify
from app.domain import events as ev
from app.eventstore.store import EventStore, create_pool


async def test_live_check_runs_end_to_end_and_reports_every_metric(fresh_database, tmp_path):
    # 12 agents, 3 simulated minutes at 20x: 9 s of wall time. A high hang rate so that
    # leases lapse and the reaper has work in so short a run.
    result = await run_async(fresh_database, tmp_path, agents=12, minutes=3.0, compression=20.0,
                             seed=3, hang_rate=0.08)

    live, diagnostics = result["live"], result["diagnostics"]
    assert diagnostics["client_errors"] == []
    assert live["calls_completed"] > 0
    assert live["events_read"] > 0
    for key in ("p50_latency_s", "p95_latency_s", "throughput_per_min", "lane_waste"):
        assert live[key] is not None and live[key] >= 0
    assert 0.0 <= live["lane_waste"] < 1.0
    assert live["slot_seconds_productive"] <= live["slot_seconds_held"]

    # Hung calls were reaped by the service, none is left behind as a zombie.
    assert diagnostics["provider"]["hung"] >= 1
    assert live["reaps"] >= 1
    assert live["zombies"] == 0

    # The service's own record, read back from the database: the invariants hold (no lane
    # double-booked, grants within the budget, reaps only after the lease), every granted
    # turn ended exactly once, and the scheduler reaped some of them.
    db = await create_pool(fresh_database, min_size=1, max_size=2)
    try:
        records = await load_records(EventStore(db))
    finally:
        await db.close()
    pool = result["settings"]["pool"]
    report = verify(records)
    assert report.ok, report.first
    decisions = [r for r in records if r.stream == f"pool-{pool}"]
    granted = {r.data["turn_id"] for r in decisions if r.type == ev.TURN_GRANTED}
    ends = Counter(r.data["turn_id"] for r in decisions
                   if r.type in (ev.TURN_COMPLETED, ev.TURN_REAPED, ev.TURN_CANCELLED))
    assert granted and all(ends[t] == 1 for t in granted)
    reaped = {r.data["turn_id"] for r in decisions if r.type == ev.TURN_REAPED}
    assert reaped and reaped <= granted

    # The comparison has every metric, each with both sides and a verdict.
    assert set(result["comparison"]) == set(COMPARED)
    for row in result["comparison"].values():
        assert {"live", "sim", "abs_diff", "rel_diff", "criterion", "within", "without_report_path"} <= set(row)
        assert row["live"] is not None and row["sim"] is not None
        assert isinstance(row["within"], bool)
    assert isinstance(result["all_within"], bool)

    report = (tmp_path / "live_check.md").read_text()
    assert "| p50_latency_s |" in report and "| lane_waste |" in report
    assert (tmp_path / "live_check.json").exists()

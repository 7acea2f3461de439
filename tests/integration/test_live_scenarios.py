"""`agentrm bench live --scenario`, small and short: the `hangs` scenario (hangs before the
first chunk, mid-stream stalls, slow calls and an outage window in the fake provider)
through the real service, its metrics computed from the event log.

Agreement with the simulation within 15% is a benchmark result (bench/results/live_*.md),
not asserted here: no timing is. What is asserted: the pipeline runs end to end with the
scenario's provider behaviour, the comparison has every headline metric with both sides,
and what the log says happened agrees, turn by turn, with what the clients and the provider
themselves saw."""
from __future__ import annotations

from agentrm_bench import live_seeds
from agentrm_bench.live_scenarios import HEADLINES, run_async
from app.audit import load_records
from app.audit.verify import verify
from app.domain import events as ev
from app.eventstore.store import EventStore, create_pool


async def test_hangs_scenario_runs_live_and_the_log_agrees_with_the_clients(fresh_database, tmp_path):
    # 12 agents, 3 simulated minutes at 20x: 9 s of wall time. Seed 3's trace has hangs,
    # stalls and slow calls among its first calls, and the outage window covers the end.
    result = await run_async(fresh_database, tmp_path, scenario="hangs", agents=12, minutes=3.0,
                             compression=20.0, seed=3)
    live, diagnostics, seen = result["live"], result["diagnostics"], result["client_turns"]
    assert diagnostics["client_errors"] == []
    assert live["calls_completed"] > 0

    # The provider played the scenario: calls hung (before the first chunk, or in the outage)
    # and the hung calls held lanes until the service reaped them.
    assert diagnostics["provider"]["hung"] >= 1
    assert live["hung_lane_seconds"] > 0
    assert live["reaps"] >= 1

    db = await create_pool(fresh_database, min_size=1, max_size=2)
    try:
        records = await load_records(EventStore(db))
    finally:
        await db.close()
    report = verify(records)
    assert report.ok, report.first
    pool = result["settings"]["pool"]
    decisions = [r for r in records if r.stream == f"pool-{pool}"]

    def turns(kind: str, outcome: str | None = None) -> set[str]:
        return {r.data["turn_id"] for r in decisions
                if r.type == kind and (outcome is None or r.data.get("outcome") == outcome)}

    # Every answer a client saw accepted is in the log as that outcome, and nothing else is.
    assert seen["ok"] and turns(ev.TURN_COMPLETED, ev.OK) == seen["ok"]
    assert turns(ev.TURN_COMPLETED, ev.RATE_LIMITED) == seen["rate_limited"]
    # Every reap a client noticed was the service's; the log may hold more (a reap after the
    # run's end, whose client had already stopped).
    assert seen["reaped"] and seen["reaped"] <= turns(ev.TURN_REAPED)
    # A report that reached the service after the reap lost to it, and the client knew.
    assert seen["late"] <= turns(ev.TURN_REAPED) | turns(ev.TURN_CANCELLED)
    # The provider's own log: every hung call was under a turn the service reaped or that was
    # still open at the end (and cancelled by the sweep), never one it completed.
    hung = {e.request_id for e in result["provider_access_log"] if e.hung}
    assert hung and hung <= turns(ev.TURN_REAPED) | turns(ev.TURN_CANCELLED)
    # The log-derived counts are bounded by what the clients counted.
    assert live["calls_completed"] <= len(seen["ok"])
    assert live["rate_limited_count"] <= len(seen["rate_limited"])

    # The comparison has the scenario's headline metrics, each with both sides and a verdict.
    assert set(result["comparison"]) == set(HEADLINES["hangs"])
    for row in result["comparison"].values():
        assert row["live"] is not None and row["sim"] is not None
        assert isinstance(row["within"], bool)
    assert result["stored_settings"]["lease_seconds"] == 1.0   # the 20 s lease, compressed 20x
    # The scheduling rules went through createPool compressed too: class slack 0/6/12 s over
    # 20, and the stall deadline at its 1 s wall floor.
    assert result["stored_settings"]["class_slack_seconds"] == [0.0, 0.3, 0.6]
    assert result["stored_settings"]["stall_timeout_seconds"] == 1.0
    text = (tmp_path / "live_hangs.md").read_text()
    assert "| hung_lane_seconds |" in text and (tmp_path / "live_hangs.json").exists()


async def test_two_seeds_run_one_after_the_other_and_each_run_is_summed_up_with_its_own_verdict(fresh_database):
    # 12 agents, 2 simulated minutes at 20x: 6 s of wall time per run.
    results = {}

    async def one(seed: int) -> dict:
        results[seed] = await run_async(fresh_database, None, scenario="mixed-lanes", agents=12, minutes=2.0,
                                        compression=20.0, seed=seed)
        return results[seed]

    summary = live_seeds.summarize(await live_seeds.run_seeds(one, [4, 5], 1))
    assert [(r["seed"], r["repeat"]) for r in summary["runs"]] == [(4, 1), (5, 1)]
    assert results[4]["settings"]["pool"] != results[5]["settings"]["pool"]
    assert set(summary["metrics"]) == set(HEADLINES["mixed-lanes"])
    for key, entry in summary["metrics"].items():
        assert [(r["live"], r["sim"], r["within"]) for r in entry["runs"]] == \
            [(results[seed]["comparison"][key]["live"], results[seed]["comparison"][key]["sim"],
              results[seed]["comparison"][key]["within"]) for seed in (4, 5)]
    assert summary["all_within"] == (results[4]["all_within"] and results[5]["all_within"])

"""The target checker reads results and judges each target against the same run's baseline."""
import json

from agentrm_bench import targets


def _policy(**per_seed):
    return {"per_seed": per_seed, "calls_completed": 1000, "per_class": {}}


def test_hangs_targets_hold_or_fail_by_the_numbers(tmp_path):
    data = {"policies": {
        "agentrm": _policy(hung_lane_seconds=[10, 30], live_calls_cut=[4, 6], jain=[{"A": 0.99}, {"A": 0.97}],
                           max_service_gap=[1, 1], calls_completed=[1000, 1000]),
        "gateway-fifo@30s": _policy(hung_lane_seconds=[100, 100]),
        "gateway-fifo@10s": _policy(live_calls_cut=[50, 60]),
        "vtc": _policy(max_service_gap=[1, 0.4])}}
    (tmp_path / "scheduler_hangs.json").write_text(json.dumps(data))
    checks = {c.what: c for c in targets.check_all(tmp_path) if c.scenario == "hangs"}
    hung = checks["hung lane-seconds <= 0.25x gateway-fifo@30s"]
    assert not hung.holds and hung.detail == "0.10/0.30"          # seed 2 is over
    cut = checks["live calls cut <= 0.5% of calls"]
    assert not cut.holds and "0.6%" in cut.detail and "50/60" in cut.detail
    assert checks["Jain >= 0.95 within each class"].holds
    assert not checks["largest service gap <= 2x vtc's"].holds     # 1 / 0.4 = 2.5x
    missing = [c for c in targets.check_all(tmp_path) if c.scenario == "runs"]
    assert len(missing) == 1 and not missing[0].holds and "missing" in missing[0].detail


def test_persistent_slowness_targets_judge_the_gateway_and_the_client_library_per_seed(tmp_path):
    data = {"policies": {
        "agentrm-gateway": _policy(quarantined_agents=[0, 0], stuck_agents=[0, 0], throughput_per_min=[300, 250],
                                   hung_lane_seconds=[40, 60], jain=[{"A": 0.99}, {"A": 0.99}]),
        "agentrm": _policy(quarantined_agents=[70, 80], stuck_agents=[70, 80], throughput_per_min=[290, 290],
                           hung_lane_seconds=[10, 10], jain=[{"A": 0.99}, {"A": 0.99}], max_service_gap=[1, 1]),
        "gateway-fifo@120s": _policy(throughput_per_min=[250, 260]),
        "gateway-fifo@30s": _policy(hung_lane_seconds=[100, 100])}}
    (tmp_path / "scheduler_hangs-persist.json").write_text(json.dumps(data))
    checks = {c.what: c for c in targets.check_all(tmp_path) if c.scenario == "hangs-persist"}
    assert checks["agentrm-gateway: 0 agents quarantined"].holds
    good = checks["agentrm-gateway: goodput >= 0.98x gateway-fifo@120s"]
    assert not good.holds and good.detail == "1.20/0.96"            # seed 2 is under
    hung = checks["agentrm-gateway: hung lane-seconds <= 0.5x gateway-fifo@30s"]
    assert not hung.holds and hung.detail == "0.40/0.60"
    quarantine = checks["agentrm: 0 agents quarantined"]
    assert not quarantine.holds and quarantine.detail == "70.00/80.00 (stuck 70.00/80.00)"
    assert checks["agentrm: hung lane-seconds <= 0.5x gateway-fifo@30s"].holds


def test_live_cuts_are_each_seeds_cuts_over_that_seeds_calls(tmp_path):
    # Seed 1 cuts 4 of its 400 calls (1%), seed 2 6 of 2000 (0.3%): over the mean of 1200 calls
    # both would pass 0.5%.
    data = {"policies": {
        "agentrm": {"per_seed": {"hung_lane_seconds": [1, 1], "live_calls_cut": [4, 6],
                                 "calls_completed": [400, 2000], "jain": [{"A": 1.0}, {"A": 1.0}]},
                    "calls_completed": 1200, "per_class": {}},
        "gateway-fifo@30s": _policy(hung_lane_seconds=[100, 100]),
        "gateway-fifo@10s": _policy(live_calls_cut=[50, 60])}}
    (tmp_path / "scheduler_hangs.json").write_text(json.dumps(data))
    cut = {c.what: c for c in targets.check_all(tmp_path) if c.scenario == "hangs"}["live calls cut <= 0.5% of calls"]
    assert not cut.holds and cut.detail.startswith("1.0%/0.3%")


def test_mixed_lanes_judges_each_seed_and_names_the_bound(tmp_path):
    def pol(waits, runs, good):
        return {"per_seed": {"p95_wait_s": [{"INTERACTIVE": w} for w in waits], "throughput_per_min": good,
                             "fraction_of_limit": [0.99, 0.99], "jain": [{"A": 1.0}, {"A": 1.0}],
                             "per_class": [{"INTERACTIVE": {"p95_wait_s": w}, "BATCH": {"run_completion_mean_s": r}}
                                           for w, r in zip(waits, runs)]},
                "per_class": {"INTERACTIVE": {"p95_wait_s": sum(waits) / 2},
                              "BATCH": {"run_completion_mean_s": sum(runs) / 2}}}
    data = {"policies": {"agentrm": pol([2.0, 8.0], [100.0, 130.0], [200, 200]),
                         "gateway-fifo@30s": pol([40.0, 40.0], [100.0, 100.0], [200, 200])}}
    (tmp_path / "scheduler_mixed-lanes.json").write_text(json.dumps(data))
    checks = {c.what: c for c in targets.check_all(tmp_path) if c.scenario == "mixed-lanes"}
    wait = checks["interactive P95 wait <= 0.10x best gateway-fifo"]
    assert not wait.holds and wait.detail.startswith("0.05/0.20") and "Little" in wait.bound   # mean 0.125x
    runs = checks["batch run completion mean <= 1.1x gateway-fifo@30s"]
    assert not runs.holds and runs.detail == "1.00/1.30"

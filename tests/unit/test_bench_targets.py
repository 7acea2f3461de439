"""The target checker reads results and judges each target against the same run's baseline."""
import json

from agentrm_bench import targets


def _policy(**per_seed):
    return {"per_seed": per_seed, "calls_completed": 1000, "per_class": {}}


def test_hangs_targets_hold_or_fail_by_the_numbers(tmp_path):
    data = {"policies": {
        "agentrm": _policy(hung_lane_seconds=[10, 30], live_calls_cut=[4, 6], jain=[{"A": 0.99}, {"A": 0.97}],
                           max_service_gap=[1, 1]),
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

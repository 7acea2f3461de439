"""Results run one process a seed and joined are the result one run over all those seeds gives,
and parts of two different experiments are never joined."""
from __future__ import annotations

import json

import pytest

from agentrm_bench.join_seeds import join, main
from agentrm_bench.scheduler_bench import run

SMALL = {"agents": 20, "minutes": 2.0}
POLICIES = ("agentrm", "gateway-fifo@30s", "vtc")


def _without_timing(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("elapsed_s", "merged_from")}


def _close(a, b) -> bool:
    """Equal, up to the rounding of a mean computed in another order."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, (int, float)):
        return b == pytest.approx(a, rel=1e-12, abs=1e-12)
    return a == b


def test_joining_one_run_per_seed_gives_the_run_over_all_seeds():
    together = run("hangs", (1, 2, 3), POLICIES, SMALL)
    parts = [run("hangs", (3,), POLICIES, SMALL), run("hangs", (1, 2), POLICIES, SMALL)]
    joined = json.loads(json.dumps(join(parts)))
    assert joined["workload"]["seeds"] == [1, 2, 3]
    assert _close(_without_timing(joined), _without_timing(json.loads(json.dumps(together))))
    assert joined["merged_from"].startswith("one run per part (seeds 1,2: agentrm bench scheduler --scenario hangs")


def test_one_seed_parts_are_named_as_one_run_per_seed(tmp_path):
    paths = []
    for seed in (2, 1):
        path = tmp_path / f"seed{seed}.json"
        path.write_text(json.dumps(run("hangs", (seed,), ("agentrm",), SMALL)))
        paths.append(path)
    assert main([str(tmp_path / "joined.json"), *map(str, paths)]) == 0
    joined = json.loads((tmp_path / "joined.json").read_text())
    assert joined["workload"]["seeds"] == [1, 2]
    assert joined["merged_from"] == ("one run per seed (agentrm bench scheduler --scenario hangs --seed N --json), "
                                     "joined")


def test_parts_of_different_experiments_or_the_same_seed_are_refused():
    a = run("hangs", (1,), ("agentrm",), SMALL)
    with pytest.raises(ValueError, match="workload"):
        join([a, run("hangs", (2,), ("agentrm",), {**SMALL, "agents": 21})])
    with pytest.raises(ValueError, match="policies"):
        join([a, run("hangs", (2,), ("vtc",), SMALL)])
    with pytest.raises(ValueError, match="share seeds"):
        join([a, a])


def test_a_part_that_predates_a_parameter_is_joined_on_the_others_and_named():
    old, new = run("hangs", (1,), ("agentrm",), SMALL), run("hangs", (2,), ("agentrm",), SMALL)
    del old["workload"]["prefix_cache_blocks"]
    joined = join([new, old])
    assert joined["workload"]["prefix_cache_blocks"] == new["workload"]["prefix_cache_blocks"]
    assert joined["merged_from"].endswith("joined; seed 1 ran before the parameters prefix_cache_blocks")
    old["workload"]["agents"] += 1
    with pytest.raises(ValueError, match="workload"):
        join([new, old])

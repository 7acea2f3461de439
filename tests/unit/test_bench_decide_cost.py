"""The decide-cost tool times the core against its reference (a scan per grant and per
request) on the same batch: both must make the same decisions, the reference must be put
back whatever happens, and bad arguments are refused before anything runs."""
from __future__ import annotations

import pytest

from agentrm_bench import decide_cost
from app.domain import ordering
from app.domain.decide import decide_many
from app.domain.state import PoolState


def test_the_reference_is_wired_in_and_decides_the_timed_batch_the_same_way():
    # (Equal deadlines here: the order is by arrival. That the orders agree in general is
    # tests/unit/test_grant_order.py's; this checks the tool's switch.)
    base = decide_cost._pool()
    inputs = decide_cost._batch(60, decide_cost.AGENTS)
    ours = decide_many(base.copy(), inputs, 1.0)
    with decide_cost._reference():
        reference = decide_many(base.copy(), inputs, 1.0)
    assert ours == reference
    assert sum(1 for type_, _ in ours if type_ == "TurnGranted") == 60


def test_the_reference_is_put_back_even_when_the_timed_code_fails():
    order, queued_of = ordering.GrantOrder, PoolState.queued_of
    with pytest.raises(RuntimeError), decide_cost._reference():
        assert ordering.GrantOrder is not order
        raise RuntimeError("boom")
    assert ordering.GrantOrder is order and PoolState.queued_of is queued_of


def test_the_busy_scenario_grants_from_the_long_queue_as_lanes_free():
    base, batch_of = decide_cost._setup("busy")
    assert base.busy_lanes() == decide_cost.BUSY_LANES
    assert base.queued_count() == decide_cost.BUSY_QUEUED
    decisions = decide_many(base.copy(), batch_of(20), 1.0)
    assert [t for t, _ in decisions].count("TurnCompleted") == 20
    granted = [d["turn_id"] for t, d in decisions if t == "TurnGranted"]
    first_queued = decide_cost.BUSY_LANES   # the queue, in arrival order: t200, t201, ...
    assert granted == [f"t{i}" for i in range(first_queued, first_queued + 20)]


@pytest.mark.parametrize("scenario", ["idle", "busy"])
def test_a_run_reports_each_batch_with_its_spread(scenario):
    rows = decide_cost.run([10, 30], repeat=2, scenario=scenario)
    assert [r["batch"] for r in rows] == [10, 30]
    for r in rows:
        assert 0 < r["ms"]["min"] <= r["ms"]["median"] <= r["ms"]["max"]
        assert r["reference_over_ours"]["min"] > 0
    assert "| 30 |" in decide_cost.to_markdown(rows)


@pytest.mark.parametrize("argv", [["--batches", "10,x"], ["--batches", "0"], ["--batches", "1001"],
                                  ["--repeat", "0"], ["--scenario", "busy", "--batches", "201"],
                                  ["--scenario", "nope"]])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        decide_cost.main(argv)
    assert exit_.value.code == 2
    assert "error" in capsys.readouterr().err

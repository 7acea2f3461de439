"""`bench load`'s driver runs no cyclic collection while a phase is measured (a full one of
its connections took 53-82 ms, counted against the server), and gives the collector back
afterwards, also when the phase fails."""
from __future__ import annotations

import gc

import pytest

from agentrm_bench.load_bench import quiet_collector


def test_the_collector_is_off_and_the_live_heap_frozen_during_a_phase_and_back_after():
    assert gc.isenabled()
    with quiet_collector():
        assert not gc.isenabled()
        assert gc.get_freeze_count() > 0
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_failing_phase_still_gives_the_collector_back():
    with pytest.raises(RuntimeError):
        with quiet_collector():
            raise RuntimeError("the phase failed")
    assert gc.isenabled() and gc.get_freeze_count() == 0

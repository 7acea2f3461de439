"""What folding a TurnReaped does to the pool (app/domain/apply.py, _turn_reaped), rule by
rule, on states built by the core itself: the silent-reap count and its start, failed
probes during a suspected outage, which reaps count towards quarantine, and which reaps
are taken as censored start-time samples (and whether they move the spread)."""
from __future__ import annotations

import pytest

from app.domain import events as ev
from app.domain.apply import apply, new_pool
from app.domain.decide import decide_many
from app.domain.settings import PoolSettings


def _pool(outage_after: int = 3, turns: int = 3):
    """A pool with one agent and `turns` streaming turns granted at t = 1, 2, 3, ..."""
    s = PoolSettings(lanes=8, rpm=6000, tpm=10_000_000, lease_seconds=60.0,
                     outage_after_silent_reaps=outage_after)
    state = new_pool({"settings": s.to_dict(), "at": 0.0})
    decide_many(state, [(ev.AGENT_REGISTERED, {"agent_id": "a", "name": "a", "priority_class": ev.BATCH}, None)],
                0.0)
    for i in range(turns):
        decide_many(state, [(ev.TURN_REQUESTED, {"turn_id": f"t{i}", "agent_id": "a", "estimated_tokens": 10,
                                                 "max_output_tokens": 0, "streams": True, "at": 1.0 + i}, None)],
                    1.0 + i)
        assert state.turns[f"t{i}"].status == ev.GRANTED
    return state


def _reap(state, turn_id: str, at: float, **flags) -> None:
    turn = state.turns[turn_id]
    apply(state, ev.TURN_REAPED, {"turn_id": turn_id, "agent_id": turn.agent_id, "lane": turn.lane,
                                  "lease_expires_at": turn.lease_expires_at, "granted_at": turn.granted_at,
                                  "at": at, **flags})


def test_silent_reaps_count_from_the_earliest_silent_grant():
    state = _pool()
    _reap(state, "t2", 10.0, no_first_chunk=True, full_lease=False)
    assert (state.silent_reaps, state.silent_from) == (1, 3.0)
    _reap(state, "t0", 11.0, no_first_chunk=True, full_lease=False)   # granted earlier
    assert (state.silent_reaps, state.silent_from) == (2, 1.0)
    _reap(state, "t1", 12.0, no_first_chunk=True, full_lease=False)
    assert (state.silent_reaps, state.silent_from) == (3, 1.0)


def test_a_reap_after_a_first_chunk_or_with_detection_off_is_no_silence():
    state = _pool()
    _reap(state, "t0", 70.0)                       # a whole lease after its first chunk
    assert (state.silent_reaps, state.silent_from) == (0, None)
    off = _pool(outage_after=0)
    _reap(off, "t0", 10.0, no_first_chunk=True, full_lease=False)
    assert (off.silent_reaps, off.silent_from) == (0, None)


def test_each_silent_probe_granted_since_the_outage_began_is_a_failed_probe():
    state = _pool(turns=4)
    state.outage_since = 2.0          # suspected at t = 2: t0 (granted at 1) was not a probe
    _reap(state, "t0", 10.0, no_first_chunk=True, full_lease=False)
    assert state.failed_probes == 0
    _reap(state, "t1", 11.0, no_first_chunk=True, full_lease=False)   # granted at exactly 2
    assert state.failed_probes == 1
    _reap(state, "t2", 12.0, no_first_chunk=True, full_lease=False)
    _reap(state, "t3", 13.0, no_first_chunk=True, full_lease=False)
    assert state.failed_probes == 3


@pytest.mark.parametrize("flags, counts", [
    ({"no_first_chunk": True, "full_lease": False}, False),   # a start deadline: maybe too short
    ({"no_first_chunk": True, "full_lease": True}, True),     # a whole lease of silence: a zombie
    ({"no_first_chunk": True}, True),                          # logged before full_lease: a lease
    ({"stalled": True}, False),                                # went silent mid-stream
    ({}, True),                                                # held a lease and never completed
])
def test_only_a_reap_after_a_whole_lease_counts_towards_quarantine(flags, counts):
    state = _pool(outage_after=0)
    _reap(state, "t0", 70.0, **flags)
    agent = state.agents["a"]
    assert agent.consecutive_reaps == (1 if counts else 0) and agent.reaps == 1
    assert agent.start_misses == (1 if flags.get("no_first_chunk") else 0)


def _start(state):
    return state.start.samples, state.start.srtt, state.start.rttvar


def test_a_start_deadline_reap_is_a_censored_sample_that_moves_the_spread_only_without_detection():
    for outage_after, spread_moves in ((0, True), (3, False)):
        state = _pool(outage_after=outage_after)
        state.start.observe(1.0, 10)
        state.start.observe(1.2, 10)
        before = _start(state)
        _reap(state, "t0", 10.0, no_first_chunk=True, full_lease=False)
        after = _start(state)
        assert after[0] == before[0] + 1 and after[1] > before[1]       # the mean rises
        assert (after[2] != before[2]) == spread_moves, outage_after


@pytest.mark.parametrize("outage_after", [1, 3])
def test_a_silent_pool_takes_no_censored_samples(outage_after):
    state = _pool(outage_after=outage_after)
    state.silent_reaps = 1            # a silent reap already counted (below the threshold or not)
    before = _start(state)
    _reap(state, "t0", 10.0, no_first_chunk=True, full_lease=False)
    assert _start(state) == before
    quiet = _pool(outage_after=outage_after)
    quiet.outage_since = 0.5          # or an outage already suspected
    before = _start(quiet)
    _reap(quiet, "t0", 10.0, no_first_chunk=True, full_lease=False)
    assert _start(quiet) == before

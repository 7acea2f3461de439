"""Hung lane-seconds are seconds a SLOT is held by an attempt that will never answer: when the
slot is released while the attempt stays open (the caller let go of it, or AgentRM freed a
suspect's lane while the gateway keeps the call open), the slot's hung, in-flight and
productive seconds stop there, and a released slot is no zombie at the end."""
from __future__ import annotations

import pytest

from agentrm_bench.metrics import summarize
from agentrm_bench.sim import CallRecord, Provider, ProviderLink, Recorder, Simulator
from agentrm_bench.workload import BATCH, CallSpec


def _setup(fault: str | None = None, **extra):
    sim, provider = Simulator(), Provider(600, 1_000_000)
    recorder = Recorder(duration_s=100.0)
    link = ProviderLink(sim, provider, recorder)
    call = CallSpec(call_id="c0", prompt_tokens=1000, max_output_tokens=100, output_tokens=50,
                    provider_latency_s=5.0, first_chunk_s=0.5, tool_after_s=0.0, fault=fault, **extra)
    return sim, recorder, link, CallRecord(call, "a", BATCH, 0.0)


def test_a_hung_attempt_stops_costing_its_slot_when_the_slot_is_released():
    sim, recorder, link, record = _setup("hang")
    hold = recorder.hold(0.0, "lane")
    attempt = link.send(record, lambda a: None, hold=hold)
    sim.run(10.0)
    recorder.release(sim.now, hold)          # the lane is freed; the call stays open
    sim.run(50.0)
    attempt.abandon(sim.now)                 # closed 40 s later, off the lane
    assert hold.hung_s == pytest.approx(10.0) and hold.inflight_s == pytest.approx(10.0)


def test_a_hung_attempt_left_open_to_the_end_counts_up_to_the_release_and_is_no_zombie():
    sim, recorder, link, record = _setup("hang")
    hold = recorder.hold(0.0, "lane")
    link.send(record, lambda a: None, hold=hold)
    sim.run(10.0)
    recorder.release(sim.now, hold)
    sim.run(100.0)
    recorder.close(100.0)
    assert hold.hung_s == pytest.approx(10.0) and recorder.zombies == 0
    metrics = summarize(recorder, {BATCH: ["a"]})
    assert metrics["hung_lane_seconds"] == pytest.approx(10.0) and metrics["lane_waste"] == pytest.approx(0.0)


def test_a_slow_answer_after_its_slot_was_released_is_productive_only_while_held():
    sim, recorder, link, record = _setup("slow", slow_extra_s=30.0)
    hold = recorder.hold(0.0, "lane")
    link.send(record, lambda a: None, hold=hold)
    sim.run(5.0)
    recorder.release(sim.now, hold)
    sim.run(100.0)
    assert record.completed_at == pytest.approx(35.0)
    assert hold.productive_s == pytest.approx(5.0) and hold.inflight_s == pytest.approx(5.0)
    assert summarize(recorder, {BATCH: ["a"]})["lane_waste"] == pytest.approx(0.0)


def test_a_slot_held_to_the_end_by_a_hung_attempt_still_counts_whole_and_is_a_zombie():
    sim, recorder, link, record = _setup("hang")
    hold = recorder.hold(0.0, "lane")
    link.send(record, lambda a: None, hold=hold)
    sim.run(100.0)
    recorder.close(100.0)
    assert hold.hung_s == pytest.approx(100.0) and recorder.zombies == 1

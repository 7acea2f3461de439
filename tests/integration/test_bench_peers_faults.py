"""The faults and priority phases end to end against the real fake providers, with the client
going straight to them (no peer to install), the workload shrunk to seconds: every fault
reaches the provider tagged, the hung calls are released by the client's own timeout, the
outage answers 503 and then recovers, and the priority phase counts both classes."""
from __future__ import annotations

from agentrm_bench import peers_faults as pf


async def test_the_fault_phase_tags_every_call_and_counts_what_the_client_saw(monkeypatch):
    monkeypatch.setattr(pf, "CLIENT_TIMEOUT_S", 2.0)
    monkeypatch.setattr(pf, "NORMAL_SECONDS", 1.0)
    monkeypatch.setattr(pf, "WARMUP_CALLS", 2)
    monkeypatch.setattr(pf, "OUTAGE_S", 1.0)
    monkeypatch.setattr(pf, "FAULT_CALLS", (
        pf.FaultCall("hang", True, 0.0, {"fault": "hang"}),
        pf.FaultCall("stall", True, 0.0, {"first_chunk_s": 0.0, "latency_s": 9.0, "fault": "stall",
                                          "stall_after_s": 0.2}),
        pf.FaultCall("slow", False, 0.0, {"latency_s": 0.5}),
        pf.FaultCall("outage", False, 0.0, pf.NORMAL, "outage"),
        pf.FaultCall("outage", False, 1.5, pf.NORMAL, "outage")))
    providers = await pf.Providers.start()
    try:
        peer = pf.direct(providers)
        run = await pf.faults_phase(peer, peer.routes["faults"], peer.routes["outage"], providers.faults,
                                    providers.outage)
    finally:
        await providers.stop()
    row = pf.fault_row(run)
    assert row["outcomes"]["hang-stream"] == {"client_timeout": 1}
    assert row["outcomes"]["stall-stream"] == {"client_timeout": 1}
    assert row["outcomes"]["slow-whole"] == {"ok": 1}
    assert row["outcomes"]["outage-whole"] == {"503": 1, "ok": 1}
    assert row["live_cut"] == 0 and row["outage_completed"] == 1
    assert 2.0 <= row["hang_stream_held_s"]["max"] < 4.0
    assert row["provider_per_user_call"] == 1.0 and "warmup" not in run["provider_calls"]


async def test_the_priority_phase_counts_both_classes_and_the_calls_still_waiting(monkeypatch):
    monkeypatch.setattr(pf, "PRIORITY_SECONDS", 4.0)
    monkeypatch.setattr(pf, "PRIORITY_CALL_S", 0.2)
    providers = await pf.Providers.start()
    try:
        peer = pf.direct(providers)
        routes = {k: peer.routes[f"lanes/{k}"] for k in pf.LITELLM_PRIORITY}
        result = await pf.priority_phase(peer, "lanes", routes, providers.priority["lanes"])
    finally:
        await providers.stop()
    assert result["batch_calls"] > 0
    # Direct, interactive calls may all still be retrying at the end: they count as waits.
    assert result["interactive_calls"] + result["unfinished_at_end"]["interactive"] > 0
    assert result["provider_429"] > 0   # 10 clients, 2 lanes, nobody in between
    assert set(result["outcomes"]) <= {"ok", "429"}
    assert len(result["interactive_waits_s"]) >= result["interactive_calls"]

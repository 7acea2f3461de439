"""The replicas and validate workloads of `agentrm bench peers`: their summaries, verdicts and
markdown on hand-made runs, and the simulator's side of the validation workload."""
from __future__ import annotations

from agentrm_bench.peers_replicas import acceptance, replicas_markdown, summarise_replicas, with_best_share
from agentrm_bench.peers_validate import AGENTS, CALLS, compare, headline, simulate, validate_markdown


def phase(peer: str, admitted: int, n: int = 3, p429: int = 0, limiter: str = "token_bucket", run: int = 0) -> dict:
    return {"peer": peer, "limiter": limiter, "run": run, "instances": n, "provider_429": p429,
            "client_429": 0, "provider_admitted": admitted, "client_ok": admitted, "client_other": {},
            "unfinished_at_end": 0, "cpu_s": 1.0, "load_average": 2.0}


def test_direct_sets_the_best_for_one_and_three_instances():
    runs = with_best_share([phase("direct", 160, n=1), phase("agentrm", 120, n=3), phase("litellm", 80, n=3)])
    shares = {(r["peer"], r["instances"]): r["best_share"] for r in runs}
    assert shares == {("direct", 1): 1.0, ("agentrm", 3): 0.75, ("litellm", 3): 0.5}


def test_the_best_is_taken_within_a_run_and_limiter():
    runs = with_best_share([phase("a", 100, run=0), phase("b", 50, run=0), phase("a", 10, run=1),
                            phase("b", 20, run=1), phase("b", 40, limiter="fixed_window")])
    assert [r["best_share"] for r in runs] == [1.0, 0.5, 0.5, 1.0, 1.0]


def test_acceptance_needs_no_429_and_the_share_everywhere():
    ok = summarise_replicas([phase("agentrm", 120, n=1), phase("agentrm", 120, n=3), phase("portkey", 124, n=3)])
    assert acceptance(ok)["passed"] is True
    with_429 = summarise_replicas([phase("agentrm", 120, n=1), phase("agentrm", 120, n=3, p429=1)])
    verdict = acceptance(with_429)
    assert verdict["passed"] is False and "3 instance(s): the provider served up to 1 429s" in verdict["failures"][0]
    low = summarise_replicas([phase("agentrm", 120, n=3), phase("direct", 160, n=1)])
    assert acceptance(low)["failures"] == ["token_bucket, 3 instance(s): admitted 0.75 of the best peer's calls"]
    assert acceptance(low, ("nobody",))["passed"] is None


def test_acceptance_takes_each_rows_first_configuration():
    summary = summarise_replicas([phase("direct", 160, n=1), phase("agentrm", 120, n=1),
                                  phase("agentrm-token-bucket", 158, n=1),
                                  phase("agentrm", 120, n=1, limiter="fixed_window"),
                                  phase("direct", 120, n=1, limiter="fixed_window")])
    assert acceptance(summary)["passed"] is False
    assert acceptance(summary, ("agentrm-token-bucket", "agentrm"))["passed"] is True


def test_the_markdown_has_a_row_per_peer_limiter_and_count_and_the_verdict():
    runs = [phase("direct", 160, n=1), phase("agentrm", 120, n=1), phase("agentrm", 120, n=3)]
    result = {"settings": {"instances": (1, 3), "rpm": 120, "clients": 8, "seconds": 20.0, "call_s": 0.5,
                           "repeat": 1}, "load_average": {"start": (3.0, 0, 0), "end": (4.0, 0, 0)},
              "peers": {"direct": {"status": "ok", "reason": "", "version": "-"},
                        "agentrm": {"status": "ok", "reason": "", "version": "0.1"}},
              "summary": summarise_replicas(runs), "runs": runs}
    text = replicas_markdown(result)
    assert text.startswith("## Replicas: 3 instances")
    assert "| token_bucket | 3 | agentrm | 0 | 0 | 120 | 0.75 | 120 | 1.0 | 2.0 |" in text
    assert "the default limiter): **not met**: token_bucket, 1 instance(s): admitted 0.75" in text


def test_headline_and_compare():
    h = headline([(0.0, 2.0), (0.0, 12.0)], [1.0, 59.0, 61.0], 1, 2, 2)
    assert h["completion_s"] == 12.0 and h["p50_wait_s"] == 5.0 and h["admitted_first_minute"] == 2
    assert headline([(0.0, 2.0)], [], 0, 0, 2)["completion_s"] is None   # not every call answered
    rows = {r["metric"]: r for r in compare([{**h, "completion_s": 13.0, "agent_errors": 2}],
                                            [{**h, "agent_errors": 0}])}
    assert rows["completion_s"]["within"] and round(rows["completion_s"]["relative_difference"], 3) == 0.083
    assert rows["agent_errors"]["relative_difference"] == 2.0 and not rows["agent_errors"]["within"]
    assert rows["provider_429"]["relative_difference"] == 0.0


def test_the_simulated_validation_workload_finishes_every_call():
    first, again = simulate(1), simulate(1)
    assert first == again   # seeded
    assert first["calls_done"] == AGENTS * CALLS and first["completion_s"] is not None
    assert first["provider_admitted"] >= AGENTS * CALLS


def test_a_skipped_validation_says_why():
    result = {"settings": {"agents": 6, "calls_per_agent": 6, "call_s": 2.0, "tool_s": 1.0, "rpm": 20,
                           "lanes (max_parallel_requests)": 3, "num_retries": 2, "agent_retry_s": 1.0,
                           "sim_seeds": 10, "repeat": 1}, "status": "skipped", "reason": "litellm not among --peers"}
    assert validate_markdown(result).endswith("Not run: litellm not among --peers\n")


async def test_a_phase_starts_once_the_provider_is_quiet():
    import time
    from types import SimpleNamespace

    from agentrm_bench.peers_replicas import until_quiet

    quiet = SimpleNamespace(access_log=[SimpleNamespace(received_at=time.time() - 10)])
    assert await until_quiet(quiet, quiet_s=0.5) < 0.2
    busy = SimpleNamespace(access_log=[SimpleNamespace(received_at=time.time())])
    waited = await until_quiet(busy, quiet_s=0.6, limit_s=5)
    assert 0.5 <= waited < 2
    never = SimpleNamespace(access_log=[SimpleNamespace(received_at=time.time() + 60)])
    assert 0.5 <= await until_quiet(never, quiet_s=0.5, limit_s=0.5) < 1.5

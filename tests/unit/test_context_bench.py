"""The retention benchmark runs end to end in quick mode and reports honestly."""
import json

from agentrm_bench import context_bench as bench
from app.context.tokens import count_message


def test_session_generator_is_seeded_and_plants_findable_facts():
    params = bench.SessionParameters(turns=120)
    a, b = bench.generate_session(3, params), bench.generate_session(3, params)
    assert a.messages == b.messages and [f.answer for f in a.facts] == [f.answer for f in b.facts]
    assert bench.generate_session(4, params).messages != a.messages
    text = "\n".join(c for _, c, _, _ in a.messages)
    for fact in a.facts:
        assert fact.answer in text and fact.question
        if fact.stale is not None:
            assert fact.stale in text and fact.stale_turn < fact.turn
    assert sum(count_message(r, c) for r, c, _, _ in a.messages) == a.tokens


def test_quick_run_writes_table_plot_and_reports_agentrm_at_4k(tmp_path):
    results = bench.run(tmp_path, sessions=1, seed=11, quick=True)
    table = (tmp_path / "context.md").read_text()
    assert "| agentrm | 4000 |" in table and "| truncation | 2000 |" in table and "| running-summary | 8000 |" in table
    png = (tmp_path / "context.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    json.dumps(results)
    rows = {(r["strategy"], r["budget"]): r for r in results["rows"]}
    assert set(rows) == {(s, b) for s in bench.STRATEGIES for b in bench.BUDGETS}
    for (strategy, budget), row in rows.items():
        assert row["max_view_tokens"] <= budget
        assert 0.0 <= row["fact_retention"] <= 1.0 and 0.0 <= row["probe_answerability"] <= 1.0
    # The retention result itself, on this small seeded session (deterministic: seeded
    # generator, extractive summarizer, exact token counts). AgentRM keeps every planted
    # fact and answers every probe at every budget; the baselines lose facts once the
    # session outgrows the budget, and AgentRM's margin is widest where the budget is
    # tightest.
    for budget in bench.BUDGETS:
        assert rows[("agentrm", budget)]["fact_retention"] == 1.0, budget
        assert rows[("agentrm", budget)]["probe_answerability"] >= 0.95, budget
    for baseline in ("truncation", "running-summary"):
        assert rows[(baseline, 2000)]["fact_retention"] <= 0.6
        assert rows[("agentrm", 2000)]["fact_retention"] - rows[(baseline, 2000)]["fact_retention"] >= 0.4
        assert rows[(baseline, 4000)]["fact_retention"] < rows[("agentrm", 4000)]["fact_retention"]
    assert rows[("truncation", 2000)]["fact_retention"] < rows[("truncation", 4000)]["fact_retention"] \
        <= rows[("truncation", 8000)]["fact_retention"]
    target = results["target"]
    assert target["agentrm_fact_retention_4k"] == rows[("agentrm", 4000)]["fact_retention"]
    assert target["met"] is True
    assert rows[("truncation", 4000)]["compactions"] == 0 and rows[("agentrm", 4000)]["compactions"] > 0

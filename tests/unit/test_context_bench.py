"""The retention benchmark runs end to end in quick mode and reports honestly."""
import json

import pytest

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


def test_sessions_come_in_several_styles_and_facts_in_paraphrase():
    params = bench.SessionParameters(turns=120)
    sessions = [bench.generate_session(seed, params) for seed in range(3)]
    assert {s.session_id.split("-")[1] for s in sessions} == set(bench.STYLES)
    plain = bench.generate_session(0, bench.SessionParameters(turns=120, paraphrase=False))
    templated = {f.question for f in plain.facts}
    for s in sessions:
        assert any(f.question not in templated for f in s.facts)       # probes reworded
        text = "\n".join(c for _, c, _, _ in s.messages)
        assert all(f.answer in text for f in s.facts)                  # answers still exact


def test_held_out_styles_word_every_fact_their_own_way():
    seen = {st.format(a="") for wordings, _ in bench.PARAPHRASES.values()
            for group in (wordings if isinstance(wordings, tuple) else (wordings,)) for st in group}
    for style in bench.HELDOUT_STYLES:
        session = bench.generate_session(5, bench.SessionParameters(turns=120, style=style))
        assert session.session_id == f"s5-{style}"
        planted = {f.turn for f in session.facts} | {f.stale_turn for f in session.facts if f.stale_turn is not None}
        statements = [session.messages[t + 1][1] for t in planted]
        text = "\n".join(c for _, c, _, _ in session.messages)
        assert all(f.answer in text for f in session.facts)
        # no planted statement is one of the seen styles' wordings (the tool's error line is no wording)
        assert not any(st.replace(f.answer, "") in seen for f in session.facts for st in statements
                       if f.answer in st)
    assert set(bench.UNSEEN_STYLES) <= set(bench.HELDOUT_STYLES)
    assert not set(bench.HELDOUT_STYLES) & set(bench.STYLES)   # never in the mixed sessions
    with pytest.raises(ValueError, match="unknown session style"):
        bench.generate_session(1, bench.SessionParameters(turns=120, style="haiku"))


@pytest.mark.timeout(1200)  # a safety net for a loaded machine, not a speed check
def test_quick_run_writes_table_plot_and_reports_honestly(tmp_path):
    strategies = ("truncation", "agentrm")
    results = bench.run(tmp_path, sessions=1, seed=11, quick=True, strategies=strategies)
    table = (tmp_path / "context.md").read_text()
    assert "| agentrm | 4000 |" in table and "| truncation | 2000 |" in table and "| truncation | 8000 |" in table
    png = (tmp_path / "context.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    json.dumps(results)
    rows = {(r["strategy"], r["budget"]): r for r in results["rows"]}
    assert set(rows) == {(s, b) for s in strategies for b in bench.BUDGETS}
    for (_strategy, budget), row in rows.items():
        assert row["max_view_tokens"] <= budget
        assert 0.0 <= row["fact_retention"] <= 1.0 and 0.0 <= row["probe_answerability"] <= 1.0
    # With the probe as its query, AgentRM's view answers at least as many probes as the
    # baselines (which ignore it) at the tightest budget, and keeps no fewer facts.
    for baseline in ("truncation",):
        assert rows[("agentrm", 2000)]["probe_answerability"] >= rows[(baseline, 2000)]["probe_answerability"]
        assert rows[("agentrm", 2000)]["fact_retention"] >= rows[(baseline, 2000)]["fact_retention"]
    target = results["target"]
    assert target["agentrm_fact_retention_4k"] == rows[("agentrm", 4000)]["fact_retention"]
    assert target["agentrm_probe_answerability_2k"] == rows[("agentrm", 2000)]["probe_answerability"]
    assert target["met"] == (target["agentrm_fact_retention_4k"] >= 1.0
                             and target["agentrm_probe_answerability_2k"] >= 0.95)
    assert ("met" if target["met"] else "NOT met") in table
    assert rows[("truncation", 4000)]["compactions"] == 0 and rows[("agentrm", 2000)]["compactions"] > 0
    # The per-style table: in quick mode one seed of the last held-out style.
    (style,) = results["styles"]["summary"]
    assert style["style"] == bench.HELDOUT_STYLES[-1] and style["held_out"] and len(style["seeds"]) == 1
    (row,) = results["styles"]["rows"]
    assert style["fact_retention_4k"] == row["retained_4k"] / row["planted_4k"]
    assert 0.0 <= style["probe_answerability_2k"] <= 1.0 and row["probes_2k"] == 17
    # each ranking ablation answers the same probes on the same fold
    assert set(style["ablation_answerability_2k"]) == set(bench.STYLE_ABLATIONS)
    for ablation, rate in style["ablation_answerability_2k"].items():
        assert rate == row["ablation_answered_2k"][ablation] / row["probes_2k"]
        assert f"at 2k, {ablation} |" in table
    assert f"| {style['style']} (held out, then used) | 1 | {style['fact_retention_4k']:.1%}" in table


def test_the_facts_block_alone_keeps_every_planted_fact_of_a_seen_style():
    # The extractor and the view's fact selection, no model: a regression in either shows here.
    rates = bench.facts_block_retention("worklog", [100, 101])
    assert rates == [1.0, 1.0]
    assert all(0.0 <= r <= 1.0 for r in bench.facts_block_retention("meeting", [100]))

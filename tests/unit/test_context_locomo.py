"""The LoCoMo-format reader and evidence-recall runner, on a tiny conversation written for
this test in that format (tests/data/locomo_tiny; no LoCoMo data is in this repository)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrm_bench import locomo

TINY = Path(__file__).resolve().parents[1] / "data" / "locomo_tiny"


def test_the_reader_maps_speakers_to_roles_times_and_captions_and_drops_category_5():
    (conv,) = locomo.load_dir(TINY)
    assert len(conv.turns) == 10
    first, third = conv.turns[0], conv.turns[2]
    assert first.role == "user" and conv.turns[1].role == "assistant"
    assert first.content == "Ada: " + first.text
    assert third.content.endswith("[shares a photo of a grey dog on a sandy beach]")
    assert conv.turns[1].at - first.at == 30.0
    assert first.at == 1709456700.0  # 9:05 am on 3 March 2024, UTC
    assert [q.category for q in conv.questions] == [4, 2, 1, 3]
    assert conv.questions[3].evidence == ("D2:5",)  # an evidence id naming no turn is dropped


def test_bad_directories_and_files_get_clear_errors(tmp_path):
    with pytest.raises(locomo.LoCoMoFormatError, match="not a directory"):
        locomo.load_dir(tmp_path / "missing")
    with pytest.raises(locomo.LoCoMoFormatError, match="no LoCoMo conversation"):
        locomo.load_dir(tmp_path)
    (tmp_path / "x.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(locomo.LoCoMoFormatError, match="needs speaker_a and qa"):
        locomo.load_dir(tmp_path)
    bad = json.loads((TINY / "tiny.json").read_text())
    bad["session_1_date_time"] = "yesterday"
    (tmp_path / "x.json").write_text(json.dumps(bad))
    with pytest.raises(locomo.LoCoMoFormatError, match="yesterday"):
        locomo.load_dir(tmp_path)


def test_a_run_scores_every_strategy_and_budget_within_budget(tmp_path):
    results = locomo.run(TINY, variants={"agentrm": {}})
    rows = {(r["strategy"], r["budget"]): r for r in results["rows"]}
    assert set(rows) == {(s, b) for s in (*locomo.BASELINES, *locomo.REFERENCES, "agentrm") for b in locomo.BUDGETS}
    for (_strategy, budget), row in rows.items():
        assert row["mean_tokens"] <= budget
    # the whole conversation fits 1k tokens: every strategy that reads it all recalls all
    assert rows[("recency", 1000)]["recall"] == 1.0 and rows[("agentrm", 1000)]["recall"] == 1.0
    assert results["questions"] == {1: 1, 2: 1, 3: 1, 4: 1}
    assert rows[("agentrm", 1000)]["recall_by_conversation"] == {"tiny": 1.0}
    report = locomo.render_markdown(results)
    assert "| agentrm | 1000 | 100.0% |" in report and "| agentrm | 1000 | 100.0% | 100.0% |" in report
    # the fairness check is reported apart from the plain baselines' target
    assert results["target"]["reference"][1000] == rows[("hybrid -question words", 1000)]["recall"]
    assert "Against the fairness check (hybrid -question words" in report

"""Key-fact extraction measured on a held-out labelled set (tests/data/facts_heldout.jsonl).

The set was written and committed before the extractor was improved, in phrasings of its
own (paraphrased rules, work-log narration, chat idioms, tool output). The extractor was
then improved by looking at what it got wrong there, so its scores on that set are
optimistic. A second, smaller set (facts_fresh.jsonl) was written after the improvement
and never used to change the extractor: its lower scores are the honest estimate of how
the extractor does on text it was not written for.

Scoring, per message: the extractor's facts are matched one to one against the labelled
facts, a match needing a kind the label accepts. A fact with no label is a false positive
(precision); a label with no fact is a miss (recall). A supersession pair is scored
through the compactor's own rule: the second message, compacted after the first, must
supersede one of its facts exactly when the label says so.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from app.context.compactor import facts_of_span
from app.context.facts import extract_facts
from app.context.tokens import count_text
from app.domain.context import ContextMessage, KeyFact

DATA = Path(__file__).resolve().parents[1] / "data" / "facts_heldout.jsonl"
FRESH = DATA.with_name("facts_fresh.jsonl")

# Set after improving the extractor, at what it reaches (rounded down): a change that
# loses ground fails here. Reached: held-out 1.00 / 0.986, supersession 1.00 / 0.667;
# fresh 0.882 / 0.750.
MIN_PRECISION = 0.95
MIN_RECALL = 0.95
MIN_SUPERSESSION_PRECISION = 0.95
MIN_SUPERSESSION_RECALL = 0.65
MIN_FRESH_PRECISION = 0.85
MIN_FRESH_RECALL = 0.70


def load(path: Path = DATA) -> tuple[list[dict], list[dict]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if "text" in r], [r for r in rows if "before" in r]


def match(predicted: list[str], expected: list[list[str]]) -> int:
    """Largest one-to-one matching of predicted kinds to labels (tiny bipartite sets)."""
    best = 0

    def search(i: int, used: frozenset[int], matched: int) -> None:
        nonlocal best
        if i == len(predicted):
            best = max(best, matched)
            return
        search(i + 1, used, matched)
        for j, accepted in enumerate(expected):
            if j not in used and predicted[i] in accepted:
                search(i + 1, used | {j}, matched + 1)

    search(0, frozenset(), 0)
    return best


def score_messages(rows: list[dict]) -> dict:
    tp = fp = fn = 0
    wrong: list[str] = []
    for row in rows:
        kinds = [f.kind for f in extract_facts(row["text"], 1, row["role"])]
        hit = match(kinds, row["expect"])
        tp, fp, fn = tp + hit, fp + len(kinds) - hit, fn + len(row["expect"]) - hit
        if hit != len(kinds) or hit != len(row["expect"]):
            wrong.append(f"{row['id']}: got {kinds}, want {row['expect']}")
    return {"tp": tp, "fp": fp, "fn": fn, "precision": tp / max(tp + fp, 1),
            "recall": tp / max(tp + fn, 1), "wrong": wrong}


def _message(seq: int, text: str) -> ContextMessage:
    return ContextMessage(seq=seq, role="user", content=text, pinned=False, tokens=0, at=float(seq))


def supersedes(before: str, after: str) -> bool:
    """Compact ``before`` alone, then ``after``: does the second compaction supersede?"""
    first, _ = facts_of_span((), [_message(1, before)], count_text)
    live = [KeyFact(**{k: f[k] for k in ("fact_id", "kind", "text", "key", "source_seq", "tokens",
                                          "role", "value", "shape")}) for f in first]
    _, superseded = facts_of_span(live, [_message(2, after)], count_text)
    return bool(superseded)


def score_pairs(rows: list[dict]) -> dict:
    outcome = Counter()
    wrong: list[str] = []
    for row in rows:
        got = supersedes(row["before"], row["after"])
        outcome[(got, row["supersedes"])] += 1
        if got != row["supersedes"]:
            wrong.append(f"{row['id']}: got {got}, want {row['supersedes']}")
    tp, fp, fn = outcome[(True, True)], outcome[(True, False)], outcome[(False, True)]
    return {"tp": tp, "fp": fp, "fn": fn, "precision": tp / max(tp + fp, 1),
            "recall": tp / max(tp + fn, 1), "wrong": wrong}


def report(name: str, s: dict) -> str:
    return (f"{name}: precision {s['precision']:.3f} recall {s['recall']:.3f} "
            f"(tp {s['tp']}, fp {s['fp']}, fn {s['fn']})\n  " + "\n  ".join(s["wrong"]))


def test_the_labelled_set_is_big_enough_and_well_formed():
    messages, pairs = load()
    assert len(messages) >= 80 and len(pairs) >= 20
    assert len({r["id"] for r in messages + pairs}) == len(messages) + len(pairs)
    assert {r["style"] for r in messages} >= {"instruction", "chat", "worklog", "tool"}
    negatives = [r for r in messages if not r["expect"]]
    assert len(negatives) >= 25 and sum(not r["supersedes"] for r in pairs) >= 8
    for row in messages:
        for accepted in row["expect"]:
            assert accepted and set(accepted) <= {"instruction", "decision", "error", "todo", "identifier",
                                                  "path", "url", "quantity", "entity"}, row["id"]


def test_extraction_precision_and_recall_on_held_out_phrasings():
    messages, _ = load()
    s = score_messages(messages)
    print(report("facts", s))
    assert s["precision"] >= MIN_PRECISION and s["recall"] >= MIN_RECALL, report("facts", s)


def test_supersession_precision_and_recall_on_held_out_pairs():
    _, pairs = load()
    s = score_pairs(pairs)
    print(report("supersession", s))
    assert s["precision"] >= MIN_SUPERSESSION_PRECISION and s["recall"] >= MIN_SUPERSESSION_RECALL, \
        report("supersession", s)


def test_extraction_on_the_fresh_set_never_used_for_tuning():
    messages, pairs = load(FRESH)
    s = score_messages(messages)
    print(report("fresh facts", s))
    assert s["precision"] >= MIN_FRESH_PRECISION and s["recall"] >= MIN_FRESH_RECALL, report("fresh facts", s)
    assert sum(supersedes(r["before"], r["after"]) == r["supersedes"] for r in pairs) >= len(pairs) - 1


@pytest.mark.parametrize("text, role", [
    ("I need to check the logs.", "assistant"),
    ("I never said you could delete the backups.", "user"),
])
def test_known_false_positives_are_gone(text, role):
    assert extract_facts(text, 1, role) == []


@pytest.mark.parametrize("text", ["Please avoid touching prod.", "Use Postgres, not MySQL."])
def test_known_misses_are_rules_now(text):
    assert [f.kind for f in extract_facts(text, 1, "user")] == ["instruction"]


def test_actually_make_it_supersedes_the_old_value():
    assert supersedes("The timeout is 30 seconds.", "Actually make it 60 seconds instead of 30.")

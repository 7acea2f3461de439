"""The managed-context benchmark's own parts, without a server: the scenario it plays, the
client's last-N truncation it compares with, and how seeds become the reported spread."""
from __future__ import annotations

from agentrm_bench.locomo import Conversation, Question, Turn
from agentrm_bench.managed_context_bench import last_n, script_of, summarise
from app.gateway.wire import OPENAI


def conversation(n: int = 200) -> Conversation:
    turns = tuple(Turn(f"D{i}", "user" if i % 2 == 0 else "assistant", f"Ann: line {i} about topic {i % 7}",
                       f"line {i} about topic {i % 7}", 1_683_500_000.0 + 30 * i) for i in range(n))
    return Conversation("c", turns, (Question("what about topic 3?", ("D3", "D10"), 4),))


def test_a_script_plants_its_facts_and_asks_them():
    script = script_of(conversation(), seed=1, facts=5)
    assert len(script.planted) == 5 and len(script.fact_questions) == 5
    text = "\n".join(m["content"] for m in script.messages)
    assert all(p.code in text for p in script.planted)
    assert script.call_after == sorted(script.call_after) and script.call_after[-1] <= len(script.messages)
    assert script.questions == [("what about topic 3?", ["line 3 about topic 3", "line 10 about topic 3"])]
    assert script_of(conversation(), seed=1, facts=5) == script   # a seed is a fixed scenario
    assert script_of(conversation(), seed=2, facts=5).planted != script.planted


def test_last_n_keeps_the_latest_messages_within_the_budget():
    messages = [{"role": "system", "content": "s"}] + [{"role": "user", "content": f"message {i} " * 20}
                                                      for i in range(100)]
    kept = last_n(messages, 1000)
    assert kept[0] == messages[0] and kept[-1] == messages[-1]
    assert OPENAI.count_prompt({"messages": kept}, "cl100k_base") <= 1000
    assert len(kept) < len(messages)


def test_the_summary_reports_the_spread_over_seeds():
    def strategy(recall: float, held: int) -> dict:
        return {"calls": 10, "completed": 10, "evidence_recall": recall, "questions": 4, "planted": 2,
                "planted_held": held, "prompt_tokens_mean": 900.0, "prompt_tokens_max": 1000}
    runs = [{"seed": s, "conversation": "c", "strategies": {"managed": strategy(0.8 + s / 100, 2),
                                                            "last-n": strategy(0.3, 0), "none": strategy(0.0, 0)}}
            for s in (1, 2)]
    result = summarise(runs, window=1256, budget=1000, facts=2, seeds=[1, 2], history_tokens={"c": 5000})
    gain = result["targets"]["recall_gain_points"]
    assert (gain["min"], gain["max"]) == (51.0, 52.0)
    assert result["targets"]["recall_gain_met"] and result["targets"]["planted_held_met"]
    assert result["strategies"]["managed"]["evidence_recall"]["n"] == 2

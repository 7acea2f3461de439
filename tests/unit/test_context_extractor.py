"""The key-fact extractor's phrasings beyond the first patterns, its determinism, and the
fixed split that `agentrm bench extractor` measures it on."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentrm_bench import extractor_bench as bench
from agentrm_bench import extractor_data as data
from app.context import facts as f

ROOT = Path(__file__).resolve().parents[2]


def kinds(text, role="user"):
    return [x.kind for x in f.extract_facts(text, 1, role)]


@pytest.mark.parametrize("text, role, kind", [
    # a host with its port
    ("The staging database is pg-staging-03.internal.lan on port 6543.", "user", f.IDENTIFIER),
    ("The build host is ci-runner-12.build.lan:2222 if you need to ssh in.", "user", f.IDENTIFIER),
    ("The replica is pg-replica-7.prod.internal, listening on 5433.", "user", f.IDENTIFIER),
    # a chat channel
    ("The ledger team is reachable in channel #ledger-oncall.", "user", f.IDENTIFIER),
    ("Ping me in #payments-review before merging.", "user", f.IDENTIFIER),
    # a to-do with its deadline, a time and a zone
    ("Rotate the TLS certificates before Friday 14:00 UTC.", "user", f.TODO),
    ("Send it to the finance list by end of day Thursday, Berlin time.", "user", f.TODO),
    ("Someone still has to backfill December 1 to 5 before the quarterly close.", "user", f.TODO),
    ("Follow up with the analytics team next sprint about their export job.", "user", f.TODO),
    # a preference about the form of the work
    ("Export the report as CSV with semicolon separators, not Excel.", "user", f.INSTRUCTION),
    ("For the monthly report I'd like a plain TSV file, no spreadsheets please.", "user", f.INSTRUCTION),
    ("Dates in ISO format, always.", "user", f.INSTRUCTION),
    ("She prefers written updates over meetings.", "user", f.INSTRUCTION),
    # a directive by its verb
    ("Then skip the ACL step entirely.", "user", f.INSTRUCTION),
    # a root cause, and a broken state said in words
    ("The timestamps were parsed as Europe/Lisbon instead of UTC.", "assistant", f.ERROR),
    ("Setting the ACL failed: the bucket enforces owner-only ownership, so ACL calls are rejected.",
     "assistant", f.ERROR),
    ("The tail comes from a sequential scan because the trigram index was never created.", "assistant", f.ERROR),
    ("CI has been red since yesterday on test_checkout_totals.", "user", f.ERROR),
    ("The nightly ETL produced zero rows for APAC last night.", "user", f.ERROR),
    # a change being made
    ("We're replacing moment with date-fns across the app.", "user", f.DECISION),
    # a measured result, a source of truth
    ("The backfill completed in 212 seconds.", "assistant", f.QUANTITY),
    ("I ran the load test with 200 concurrent users for five minutes.", "assistant", f.QUANTITY),
    ("The runbook at https://wiki.example.com/runbooks/ledger is the source of truth.", "user", f.URL),
    # the facts of a conversation: dated events, what happened, what someone likes
    ("Yesterday I took the kids to the museum.", "assistant", f.QUANTITY),
    ("Caroline: I started playing acoustic guitar about five years ago.", "user", f.QUANTITY),
    ("I just launched an ad campaign for my clothing store.", "assistant", f.ENTITY),
    ("I love camping trips with my family.", "assistant", f.ENTITY),
])
def test_new_phrasings_are_facts_of_their_kind(text, role, kind):
    assert kinds(text, role) == [kind]


@pytest.mark.parametrize("text, role", [
    ("Keep it up!", "user"),
    ("Keep going and never give up!", "assistant"),
    ("Must be awesome to see your stuff on display.", "user"),
    ("Wow, you must be so excited!", "assistant"),
    ("I love that!", "user"),
    ("I'd like to go hiking sometime.", "user"),
])
def test_chat_that_reads_like_a_rule_is_not_a_fact(text, role):
    assert kinds(text, role) == []


def test_a_file_and_line_is_not_a_host():
    assert kinds("app/webhooks/x.py:74:    result = flush(rows, limit=30)", "tool") != [f.IDENTIFIER]


def test_a_contrast_of_names_is_no_preference():
    assert f.INSTRUCTION not in kinds("That's Jon, not Gina.")


@pytest.mark.parametrize("text", [
    "Reminder: commits without a clean `make lint` run get rejected by the hook, so run it first.",
    "Everything in vendor/gen/ is produced by the codegen step, so leave those files alone.",
])
def test_a_cause_given_for_a_rule_is_no_error(text):
    assert kinds(text) and f.ERROR not in kinds(text)


def test_a_conditional_need_is_not_a_todo():
    assert f.TODO not in kinds("The docs are on the wiki if you need to read them.")


# -- determinism ------------------------------------------------------------------------------

def _all_facts() -> list:
    return [(m.message, [(x.kind, x.text, x.key, x.value, x.replaces) for x in f.extract_facts(m.content, 1, m.role)])
            for m in data.load_agent_set()]


def test_the_extractor_is_deterministic_and_versioned():
    assert f.EXTRACTOR_VERSION and f.EXTRACTOR_VERSION == f.EXTRACTOR_VERSION.strip()
    assert _all_facts() == _all_facts()
    # and across processes whatever their hash seed: the same input, the same facts, the same version
    script = ("import json; from app.context import facts as f; from agentrm_bench import extractor_data as d; "
              "print(json.dumps([f.EXTRACTOR_VERSION] + [[m.message, [[x.kind, x.text, x.key, x.value] "
              "for x in f.extract_facts(m.content, 1, m.role)]] for m in d.load_agent_set()]))")
    outputs = {subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, capture_output=True, text=True,
                              env={"PYTHONPATH": ".:bench:clients/python", "PYTHONHASHSEED": seed}).stdout
               for seed in ("1", "2")}
    assert len(outputs) == 1
    assert json.loads(outputs.pop())[0] == f.EXTRACTOR_VERSION


# -- the held-out split -----------------------------------------------------------------------

def test_the_held_out_split_is_the_committed_one():
    committed = data.load_split()
    threads = sorted({m.group for m in data.load_agent_set()})
    sessions = {conv: sorted(int(s[1:]) for s in parts["held_out"] + parts["dev"])
                for conv, parts in committed["locomo"].items()}
    assert data.make_split(threads, sessions) == committed
    assert committed["seed"] == data.SPLIT_SEED
    # half of each held out, nothing in both parts
    assert set(committed["agent"]["held_out"]).isdisjoint(committed["agent"]["dev"])
    assert len(committed["agent"]["held_out"]) == (len(threads) + 1) // 2
    assert set(committed["locomo"]) == {"26", "30"}


def test_the_agent_set_is_well_formed():
    messages = data.load_agent_set()
    units = [u for m in messages for u in m.units]
    assert len(messages) >= 100 and sum(u.positive for u in units) >= 80 and sum(not u.positive for u in units) >= 40
    assert {u.label for u in units if u.positive} == set(data.LABEL_KINDS)


def test_locomo_labels_follow_the_documented_procedure(tmp_path):
    conv = {
        "speaker_a": "Ada", "speaker_b": "Ben",
        "session_1_date_time": "9:05 am on 3 March, 2024",
        "session_1": [
            {"speaker": "Ada", "dia_id": "D1:1", "text": "Wow! I adopted a greyhound from the shelter on Saturday."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "No way. I'm planning a trip to Lisbon next month."},
            {"speaker": "Ada", "dia_id": "D1:3", "text": "Wow!"},
        ],
        "session_1_observation": {
            "Ada": [["Ada adopted a greyhound from a shelter.", "D1:1"], ["Ada was surprised.", "D1:3"]],
            "Ben": [["Ben is planning a trip to Lisbon.", "D1:2"]],
        },
        "qa": [{"question": "Where is Ben going?", "answer": "Lisbon", "evidence": ["D1:2"], "category": 4},
               {"question": "Adversarial?", "evidence": ["D1:3"], "category": 5}],
    }
    path = tmp_path / "7.json"
    path.write_text(json.dumps(conv))
    messages = {m.message: m for m in data.load_locomo(path)}
    first = messages["7:D1:1"]
    assert [u.text for u in first.units] == ["Ada: Wow!", "I adopted a greyhound from the shelter on Saturday."]
    assert [u.label for u in first.units] == ["", "event"]   # the observation's words decide: no time phrase
    assert [u.label for u in messages["7:D1:2"].units] == ["", "plan"]
    assert [u.label for u in messages["7:D1:3"].units] == [""]         # shares no word: labels nothing
    assert {m.role for m in messages.values()} == {"user", "assistant"}
    assert data.part_of("7:S1", "locomo", data.load_split()) == ""   # not a conversation the split knows


# -- the benchmark ----------------------------------------------------------------------------

def test_the_benchmark_scores_before_and_after_on_the_held_out_part():
    result = bench.run(None)
    assert result["extractor_version"]["after"] == f.EXTRACTOR_VERSION
    held = result["parts"]["held_out"]["agent"]
    assert held["groups"] == len(data.load_split()["agent"]["held_out"])
    for who in ("before", "after"):
        s = held[who]
        assert 0 <= s["detect"]["precision"] <= 1 and 0 <= s["detect"]["recall"] <= 1
        assert s["interval"]["recall"][0] <= s["detect"]["recall"] <= s["interval"]["recall"][1]
    assert "Held-out part" in bench.render_markdown(result)


def test_scoring_counts_a_wrong_kind_as_detected_but_not_right():
    unit = data.Unit("agent", "t", "m", 0, "user", "Rotate the key by Friday.", "todo")
    miss = data.Unit("agent", "t", "m", 1, "user", "Never log secrets.", "instruction")
    noise = data.Unit("agent", "t", "m", 2, "user", "Thanks!", "")
    message = data.Message("agent", "t", "m", "user", "", (unit, miss, noise))
    s = bench.score([message], {"m": {0: "quantity", 2: "entity"}}, kinds=True)
    assert s["detect"] == {"tp": 1, "fp": 1, "fn": 1, "precision": 0.5, "recall": 0.5, "f1": 0.5}
    assert s["kind"] == {"tp": 0, "precision": 0.0, "recall": 0.0}
    assert s["by_label"]["todo"] == {"n": 1, "recall": 1.0, "kind_recall": 0.0}

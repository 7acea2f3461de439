"""Salience on hand-written messages: facts in wordings no kind pattern was written for are
kept, chatter is not, and a speaker's name does not make one line supersede another."""
from __future__ import annotations

import pytest

from app.context import salience
from app.context.compactor import facts_of_span
from app.context.facts import extract_facts
from app.context.tokens import count_text
from app.domain.context import ContextMessage, KeyFact


def kinds(text: str, role: str = "user") -> list[str]:
    return [f.kind for f in extract_facts(text, 1, role)]


@pytest.mark.parametrize("text, value", [
    ("Deploys for the EU go through eu-central-2 only.", "eu-central-2"),
    ("Grafana creds are in /opt/secrets/grafana/, don't copy them anywhere.", "/opt/secrets/grafana/"),
    ("Contract renewal lands on Thursday 14 March.", "Thursday 14 March"),
    ("Alerts route to oncall-payments@acme.test from today.", "oncall-payments@acme.test"),
    ("Search index: Typesense.", "Typesense"),
    ("log level -> debug", "debug"),
    ("Nina: the cut-off for refunds is 17:30 CET, after that they wait a day", "17:30 CET"),
    ("Run `tox -e lint` before pushing anything.", "tox -e lint"),
    ("Our Postgres runs on port 6543 behind pgbouncer.", "6543"),
    # a condition on what others do, a polite request, a retraction: spoken, binding
    ("Mia: CI will refuse the merge unless npm run typecheck passes locally", "npm run typecheck"),
    ("before anyone pushes, please just run pytest -m smoke, takes a minute", "pytest -m smoke"),
    ("Omar: we changed our minds about the queue, it's SQS", "SQS"),
])
def test_facts_in_unfamiliar_wordings_are_kept_with_their_value(text, value):
    facts = extract_facts(text, 1, "user")
    assert facts, f"no fact in {text!r}"
    assert any(value in f.text for f in facts)


@pytest.mark.parametrize("text, role", [
    ("Could we maybe move the retro to eu-central-2 time?", "user"),   # a question
    ("Should we switch the index to Typesense, okay?", "user"),          # a question, with a tag
    ("Let me open the Grafana board and have a look.", "assistant"),   # narration
    ("Honestly that went better than I expected.", "user"),            # chatter, no value
    ("Status changed: In Review -> Done", "tool"),                     # a bot's bulk line
    ("I think it might be the cache, not sure though.", "user"),       # a hedge, no value
    ("Rosa: Congrats Tim!", "user"),                                   # a speaker, then a name addressed
    ("Thanks a lot, Tim!", "user"),
    ("Glad everyone could make it.", "user"),                          # "make" the verb, not the tool
])
def test_chatter_questions_and_narration_are_not_facts(text, role):
    assert extract_facts(text, 1, role) == []


@pytest.mark.parametrize("text, role, value", [
    # a bound on a quantity is a constraint, whatever it counts
    ("An export can hold no more than 40 files, the SFTP side chokes beyond that.", "user", "40 files"),
    ("Each tenant gets up to 3 sandboxes.", "user", "3 sandboxes"),
    # a rule binds without any value to copy
    ("No one merges into main without a green nightly run.", "user", "without a green nightly run"),
    # pinning a version is a decision; a bare file name is a value like a path
    ("I pinned grpcio to 1.62.1 in constraints.txt because 1.63 leaks threads.", "assistant", "1.62.1"),
])
def test_limits_rules_and_pins_are_kept(text, role, value):
    facts = extract_facts(text, 1, role)
    assert any(value in f.text for f in facts), facts


@pytest.mark.parametrize("output", [
    "An error occurred (ThrottlingException) when calling the DescribeStacks operation: Rate exceeded",
    'Error from server (Forbidden): pods is forbidden: User "ci-bot" cannot list resource "pods"',
    "deploy failed: image pull backoff for registry.example.net/web:4.1 on node-3",
    "User: svc-export is not authorized to perform: storage.objects.create on bucket nightly-dumps",
])
def test_how_command_line_tools_word_a_failure_is_an_error(output):
    """Tool errors rank with the assistant's conclusions in the facts block; read as mere
    identifiers they fall to the bulk of tool output and out of a tight view."""
    assert [f.kind for f in extract_facts(output, 1, "tool")] == ["error"]


@pytest.mark.parametrize("text", [
    "Schema changes to the billing tables require approval from the data team before release.",
    "Every change under infra/dns needs a second reviewer's sign-off before the deploy.",
])
def test_a_required_approval_is_kept_as_binding(text):
    assert [f.kind for f in extract_facts(text, 1, "user")] in (["instruction"], ["todo"])


def test_a_clipped_fact_is_cut_at_whole_words():
    sentence = "word " * 80 + "Error: the export bucket refused the upload " + "tail " * 80
    (fact,) = extract_facts(sentence, 1, "tool")
    assert len(fact.text) <= 300 and "Error: the export bucket refused" in fact.text
    assert all(w in ("word", "tail") or w in sentence.split() for w in fact.text.split())


def test_a_traceback_keeps_its_exception_line_whatever_the_class_is_called():
    output = ("$ ./manage.py settle\nTraceback (most recent call last):\n"
              '  File "settle.py", line 9, in <module>\n    run()\n'
              "asyncpg.exceptions.DeadlockDetected: deadlock detected\nexit status 1")
    texts = [f.text for f in extract_facts(output, 1, "tool")]
    assert any("DeadlockDetected: deadlock detected" in t for t in texts), texts
    assert not any("settle.py" in t for t in texts)   # the frames stay out


def test_output_after_a_traceback_cut_short_is_read():
    output = 'Traceback (most recent call last):\n  File "a.py", line 1\nThe cache lives in /var/cache/ledger/ now.'
    assert any("/var/cache/ledger/" in f.text for f in extract_facts(output, 1, "user"))


def test_a_value_needs_a_binding_word_or_a_speaker_who_states_it():
    # The same sentence from the user (who states requirements) is a fact; narrated by the
    # assistant, with a hedge, it is not.
    assert salience.score("The staging bucket is s3-stage-7.", "user").is_fact
    assert not salience.score("Maybe the staging bucket is s3-stage-7.", "assistant").is_fact


def test_binding_words_decide_the_kind():
    assert kinds("Nobody merges into release-4 without a second review.") == ["instruction"]
    assert kinds("Queue backend will be Kafka from next sprint.") == ["decision"]
    setting = extract_facts("Search index: Typesense.", 1, "user")
    assert [(f.key, f.value) for f in setting] == [("search index", "typesense")]  # a label, then its value


def _fold(lines: list[str]) -> tuple[list[dict], list[dict]]:
    """Compacts each line alone, in order, as the compactor does: (facts, supersessions)."""
    live: list[KeyFact] = []
    all_facts: list[dict] = []
    all_superseded: list[dict] = []
    for seq, line in enumerate(lines, start=1):
        message = ContextMessage(seq=seq, role="user", content=line, pinned=False, tokens=0, at=float(seq))
        facts, superseded = facts_of_span(live, [message], count_text)
        gone = {s["fact_id"] for s in superseded}
        live = [f for f in live if f.fact_id not in gone] + [
            KeyFact(**{k: f[k] for k in ("fact_id", "kind", "text", "key", "source_seq", "tokens", "role",
                                         "value", "shape")}) for f in facts]
        all_facts += facts
        all_superseded += superseded
    return all_facts, all_superseded


def test_one_speakers_lines_do_not_supersede_each_other():
    facts, superseded = _fold(["Nina: the cut-off for refunds is 17:30 CET, after that they wait a day",
                               "Nina: and the sandbox tenant is t-0042, use that one"])
    assert len(facts) == 2 and superseded == []


def test_a_restated_value_still_supersedes_behind_a_speaker_label():
    facts, superseded = _fold(["Nina: the refund cut-off is 17:30 CET", "Nina: the refund cut-off is 16:00 CET"])
    assert len(facts) == 2
    assert superseded == [{"fact_id": facts[0]["fact_id"], "by": facts[1]["fact_id"]}]

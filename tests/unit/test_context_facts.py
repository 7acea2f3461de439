"""Key-fact extraction on realistic agent-session snippets."""
import pytest

from app.context import facts as f


def kinds(text, role="user"):
    return [x.kind for x in f.extract_facts(text, 1, role)]


@pytest.mark.parametrize("text, kind", [
    ("Never push directly to main; always open the PR against release-7.", f.INSTRUCTION),
    ("You must not log customer emails.", f.INSTRUCTION),
    ("Please don't touch the vendored code.", f.INSTRUCTION),
    ("Decision: we will use Redis for the session cache.", f.DECISION),
    ("We decided to ship the CSV export first.", f.DECISION),
    ("ValueError: invalid literal for int() with base 10: 'abc'", f.ERROR),
    ("The gateway returned HTTP 502 twice in a row.", f.ERROR),
    ("TODO: add retries to the webhook sender.", f.TODO),
    ("We still need to backfill the March invoices.", f.TODO),
    ("The customer order id is ORD-48213.", f.IDENTIFIER),
    ("Staging tenant 3f2b8c1e-9d4a-4b7e-8f00-1a2b3c4d5e6f is the one to use.", f.IDENTIFIER),
    ("The fix landed in commit 3f9a2c1e.", f.IDENTIFIER),
    ("Config lives in /etc/payments/prod/settings.yaml on the host.", f.PATH),
    ("Edit app/context/tokens.py next.", f.PATH),
    (r"The installer writes C:\Program Files\Acme\agent.log on Windows.", f.PATH),
    ("The spec is at https://docs.example.com/api/v2/refunds.", f.URL),
    ("The worker pods get 512 MiB each.", f.QUANTITY),
    ("Finance approved $12,400 for the OCR vendor.", f.QUANTITY),
    ("The deadline is Friday 14 March.", f.QUANTITY),
    ("We met Maria Gonzalez from Northwind Traders yesterday.", f.ENTITY),
])
def test_each_kind_is_recognised(text, kind):
    assert kinds(text) == [kind]


def test_plain_narration_is_not_a_fact():
    assert kinds("Let me read the file first and then think about it.") == []


def test_fact_keeps_the_whole_sentence_and_its_source():
    (fact,) = f.extract_facts("Thanks. The customer order id is ORD-48213. Go ahead.", 42)
    assert fact.text == "The customer order id is ORD-48213."
    assert fact.source_seq == 42


def test_traceback_collapses_to_the_exception_line():
    tb = ("Traceback (most recent call last):\n"
          '  File "/usr/lib/python3.11/site-packages/psycopg/connection.py", line 728, in connect\n'
          "    raise last_ex.with_traceback(None)\n"
          'psycopg.OperationalError: connection to server at "db-primary-4" failed: Connection refused')
    (fact,) = f.extract_facts(tb, 3, "tool")
    assert fact.kind == f.ERROR
    assert fact.text.startswith("psycopg.OperationalError")


@pytest.mark.parametrize("first, second, key", [
    ("Set the request timeout to 30 s.", "Set the request timeout to 45 s.", "request timeout"),
    ("Decision: we will use Redis for the session cache.",
     "Change of plan: we will use Memcached for the session cache instead.", "use for session cache"),
    ("The deadline is Friday 14 March.", "Heads up: the deadline is now Monday 17 March.", "deadline"),
    ("max_retries = 5", "max_retries = 8", "max_retries"),
    ("The order id is ORD-1.", "The order id is ORD-2.", "order id"),
])
def test_contradicting_statements_share_a_key_with_different_values(first, second, key):
    (a,) = f.extract_facts(first, 1)
    (b,) = f.extract_facts(second, 2)
    assert a.key == b.key == key
    assert a.value != b.value


def test_opposite_rules_share_a_key():
    (a,) = f.extract_facts("Always run the linter before committing.", 1)
    (b,) = f.extract_facts("Never run the linter before committing.", 2)
    assert a.key == b.key and a.value != b.value


def test_unrelated_facts_do_not_share_keys():
    a = f.extract_facts("The order id is ORD-1.", 1)[0]
    b = f.extract_facts("The ticket id is OPS-77.", 2)[0]
    assert a.key != b.key


def test_errors_never_supersede_each_other():
    a = f.extract_facts("ValueError: bad row 3", 1)[0]
    b = f.extract_facts("ValueError: bad row 9", 2)[0]
    assert a.key != b.key


def test_tool_output_contributes_only_its_most_important_facts():
    listing = "\n".join(f"app/billing/module_{i}.py" for i in range(12)) + "\nerror: disk quota exceeded"
    extracted = f.extract_facts(listing, 5, "tool")
    assert len(extracted) == f.MAX_FACTS_PER_TOOL_MESSAGE
    assert extracted[-1].kind == f.ERROR  # errors outrank paths, order of appearance kept
    assert len(f.extract_facts(listing, 5, "user")) == 13


def test_fact_shape_groups_errors_by_class_and_masks_numbers():
    assert f.fact_shape(f.ERROR, "AssertionError: assert 3 == 4") == f.fact_shape(f.ERROR, "AssertionError: x")
    assert f.fact_shape(f.ERROR, "upstream returned HTTP 502") == f.fact_shape(f.ERROR, "got HTTP 503 back")
    assert f.fact_shape(f.QUANTITY, "took 30 ms") == f.fact_shape(f.QUANTITY, "took 45 ms")


def test_extraction_is_deterministic():
    text = ("Decision: we will use Kafka as the broker. Never log tokens. "
            "See /srv/app/config.yaml and https://x.example.com/a. TODO: benchmark at 200 req/s.")
    assert f.extract_facts(text, 9) == f.extract_facts(text, 9)
    assert [x.kind for x in f.extract_facts(text, 9)] == [f.DECISION, f.INSTRUCTION, f.PATH, f.TODO]

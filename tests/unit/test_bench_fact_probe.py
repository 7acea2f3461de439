"""The planted-facts sets of `agentrm bench fact-lag`: a fact whose value is not in its own
message could never be found, and would count as a miss of the extractor."""
import pytest

from agentrm_bench.fact_probe import FACT_SETS, planted_facts


@pytest.mark.parametrize("name", sorted(FACT_SETS))
def test_every_planted_fact_carries_the_values_it_is_checked_by(name):
    facts = planted_facts(FACT_SETS[name])
    assert [f.id for f in facts] == list(range(1, 23))
    for fact in facts:
        assert fact.role in ("user", "assistant", "tool")
        assert fact.present_if and all(value in fact.message for value in fact.present_if), fact.id


def test_the_held_out_set_shares_no_message_with_a_development_set():
    held = {f.message for f in planted_facts(FACT_SETS["heldout"])}
    for name in ("dev", "dev2"):
        assert held.isdisjoint(f.message for f in planted_facts(FACT_SETS[name]))

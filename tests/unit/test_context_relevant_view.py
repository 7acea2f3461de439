"""The relevance-first view (assemble_view with a ranking) and the ranking helpers.

Properties on random states and rankings: within budget by tiktoken's own count, pinned
first, deterministic, messages chronological and each stamped with its time (HH:MM) under a header
naming its day; and greedy in ranking order: a ranked message left out did not fit when
its turn came. Worked examples pin the shares and the fusion arithmetic."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from app.context.tokens import count_message
from app.domain import context as d
from app.domain.context.ranking import ranked, reciprocal_rank_fusion, with_neighbours
from tests.unit.test_context_view import context, fact, msg, states

DAY = 86_400.0


def relevant(state, budget, ranking, s=d.ViewSettings()):
    return d.assemble_view(state, budget, None, count_message, 0.0, s, ranking=ranking)


def stamp(at):
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%H:%M ")


@st.composite
def ranked_states(draw):
    state = draw(states())
    seqs = [m.seq for m in state.hot + state.cold.messages]
    ranking = draw(st.permutations(seqs)) if seqs else []
    extra = draw(st.lists(st.integers(100, 120), max_size=3))  # seqs the state does not hold
    return state, list(ranking)[:draw(st.integers(0, len(seqs)))] + extra


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=ranked_states(), budget=st.integers(d.MIN_BUDGET_TOKENS, 2500),
       recent=st.sampled_from([0.0, 0.1, 0.3]), facts=st.sampled_from([0.0, 0.1]))
def test_relevant_views_keep_every_promise(case, budget, recent, facts):
    state, ranking = case
    s = d.ViewSettings(query_recent_share=recent, query_facts_share=facts)
    v = relevant(state, budget, ranking, s)
    # within budget by tiktoken's own count
    recount = sum(count_message(i.role, i.content) for i in v.items)
    assert v.tokens == (recount + 3 if v.items else 0) <= budget
    assert all(i.tokens == count_message(i.role, i.content) for i in v.items)
    # deterministic
    assert relevant(state, budget, ranking, s).canonical_bytes() == v.canonical_bytes()
    # pinned first, then at most one facts block, then days and messages
    kinds = [i.kind for i in v.items]
    n_pinned = kinds.count("pinned")
    assert kinds[:n_pinned] == ["pinned"] * n_pinned
    rest = kinds[n_pinned:]
    if "facts" in rest:
        assert rest.index("facts") == 0 and rest.count("facts") == 1
        assert facts > 0
    by_seq = {m.seq: m for m in state.hot + state.cold.messages}
    shown = [i for i in v.items if i.kind == "message"]
    # chronological, stamped, under the header of their day, each day once
    assert [int(i.ref) for i in shown] == sorted(int(i.ref) for i in shown)
    day = None
    for item in v.items[n_pinned:]:
        if item.kind == "date":
            assert item.ref != day
            day = item.ref
        elif item.kind == "message":
            m = by_seq[int(item.ref)]
            assert item.content == stamp(m.at) + m.content and item.role == m.role
            assert item.tier == ("hot" if m in state.hot else "cold") and not m.pinned
            assert day == datetime.fromtimestamp(m.at, tz=timezone.utc).strftime("%a %d %b %Y")
    headers = [i.ref for i in v.items if i.kind == "date"]
    assert len(headers) == len(set(headers))
    # greedy in ranking order, with no recent window: a ranked message left out did not fit
    if recent == 0.0 and "facts" not in rest:
        left = budget - 3 - sum(i.tokens for i in v.items if i.kind == "pinned")
        days = set()
        shown_seqs = {int(i.ref) for i in shown}
        for seq in ranking:
            if seq not in by_seq or by_seq[seq].pinned:
                continue
            m = by_seq[seq]
            day_of = datetime.fromtimestamp(m.at, tz=timezone.utc).strftime("%a %d %b %Y")
            cost = count_message(m.role, stamp(m.at) + m.content) + (
                0 if day_of in days else count_message("system", f"{day_of} (UTC):"))
            if seq in shown_seqs:
                left -= cost
                days.add(day_of)
            else:
                assert cost > left, seq
        assert shown_seqs <= set(ranking)


def test_an_empty_ranking_shows_pinned_only_and_unknown_seqs_are_ignored():
    state = context(hot=[msg(1, "system", "Be brief.", pinned=True), msg(2, "user", "hello")])
    v = relevant(state, 500, [])
    assert [i.kind for i in v.items] == ["pinned"]
    assert relevant(state, 500, [99, 7]).canonical_bytes() == v.canonical_bytes()


def test_messages_of_every_tier_compete_and_are_shown_in_time_order():
    old = msg(1, "user", "The vault-sync job rotates passwords every Tuesday.", at=DAY)
    noise = [msg(i, "assistant", f"Unrelated chatter number {i} about fonts.", at=3 * DAY + i) for i in range(2, 40)]
    state = context(hot=noise, cold_messages=[old])
    v = relevant(state, 256, [1, 39, 2])
    assert [i.ref for i in v.items if i.kind == "message"] == ["1", "2", "39"]
    assert [i.kind for i in v.items] == ["date", "message", "date", "message", "message"]
    assert v.items[0].content == "Fri 02 Jan 1970 (UTC):" and v.items[1].tier == "cold"
    assert v.items[1].content == "00:00 The vault-sync job rotates passwords every Tuesday."


def test_the_recent_window_takes_its_share_before_the_ranking():
    hot = [msg(i, "user", f"Message {i} with a few words of padding.", at=1000.0 + i) for i in range(1, 30)]
    state = context(hot=hot)
    each = count_message("user", stamp(1001.0) + hot[0].content)
    header = count_message("system", "Thu 01 Jan 1970 (UTC):")
    budget = 1000
    share = (header + 3 * each) / budget + 1e-9
    v = relevant(state, budget, [1], d.ViewSettings(query_recent_share=share))
    assert [i.ref for i in v.items if i.kind == "message"] == ["1", "27", "28", "29"]


def test_key_facts_come_in_the_order_of_their_source_messages_rank_within_their_share():
    hot = [msg(i, "user", f"note {i}", at=10.0 + i) for i in range(1, 6)]
    facts = [fact("f1", 1), fact("f3", 3), fact("f5", 5)]
    state = context(hot=hot, facts=facts)
    v = relevant(state, 1000, [5, 1], d.ViewSettings(query_facts_share=0.5))
    block = v.items[0]
    assert block.kind == "facts" and block.ref == "f1,f5"  # f3's source is not ranked
    from app.domain.context.view import _facts_block
    only_f5 = count_message("system", _facts_block([facts[2]]))
    assert count_message("system", _facts_block([facts[0], facts[2]])) > only_f5
    tight = relevant(state, 1000, [5, 1], d.ViewSettings(query_facts_share=only_f5 / 1000))
    assert [i.ref for i in tight.items if i.kind == "facts"] == ["f5"]
    tighter = relevant(state, 1000, [5, 1], d.ViewSettings(query_facts_share=(only_f5 - 1) / 1000))
    assert [i.kind for i in tighter.items if i.kind == "facts"] == []
    assert relevant(state, 1000, [5, 1]).items[0].kind == "date"  # share 0: no facts block


def test_reciprocal_rank_fusion_spelled_out():
    assert reciprocal_rank_fusion([[1, 2, 3], [3, 1]], k=1) == [1, 3, 2]  # 1/2+1/3, 1/4+1/2, 1/3
    assert reciprocal_rank_fusion([[1], [2]]) == [2, 1]                    # a tie: the newer first
    assert reciprocal_rank_fusion([[1, 2], [2]], weights=[3.0, 0.0]) == [1, 2]
    assert reciprocal_rank_fusion([]) == []
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([[1]], weights=[1.0, 2.0])


def test_neighbours_lift_a_reply_by_the_question_next_to_it():
    scores = {1: 0.9, 2: 0.1, 3: 0.2, 4: 0.0}
    lifted = with_neighbours(scores, [1, 2, 3, 4], 0.5)
    assert lifted == {1: 0.9 + 0.05, 2: 0.1 + 0.45, 3: 0.2 + 0.05, 4: 0.0 + 0.1}
    assert ranked(lifted) == [1, 2, 3, 4] and ranked({1: 0.5, 2: 0.5}) == [2, 1]
    assert with_neighbours({7: 1.0}, [7], 0.3) == {7: 1.0}

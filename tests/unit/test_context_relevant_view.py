"""The relevance-first view (assemble_view with a ranking) and the ranking helpers.

Properties on random states and rankings: within budget by tiktoken's own count, pinned
first, deterministic, messages chronological and each stamped with its time (HH:MM), and
with its day when the line above is of another day; and greedy in ranking order, checked
against a replay that re-renders and re-counts the whole view for every candidate (so the
view's incremental accounting of restamped neighbours is checked too). Worked examples pin
the shares and the fusion arithmetic."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.context.tokens import count_message
from app.domain import context as d
from app.domain.context.ranking import ranked, reciprocal_rank_fusion, with_neighbours
from tests.unit.test_context_view import context, fact, msg, states

DAY = 86_400.0


DEFAULT_VIEW = d.ViewSettings()


def relevant(state, budget, ranking, s=DEFAULT_VIEW):
    return d.assemble_view(state, budget, None, count_message, 0.0, s, ranking=ranking)


def day_of(at):
    return datetime.fromtimestamp(at, tz=UTC).strftime("%a %d %b %Y")


def stamp(at, previous_at=None):
    """HH:MM, and the day before it when the line above is of another day (or none)."""
    time = datetime.fromtimestamp(at, tz=UTC).strftime("%H:%M ")
    return time if previous_at is not None and day_of(previous_at) == day_of(at) else f"{day_of(at)} {time}UTC "


def replayed_greedy(by_seq, ranking, left):
    """The selection a greedy fill in ranking order makes when every candidate's cost is
    found by rendering the whole body again and counting it: the slow, obvious way."""
    def body_cost(seqs):
        ordered = sorted(seqs)
        return sum(count_message(by_seq[s].role, stamp(by_seq[s].at, by_seq[p].at if i else None) + by_seq[s].content)
                   for i, (s, p) in enumerate(zip(ordered, [None] + ordered[:-1])))
    chosen: set[int] = set()
    for seq in ranking:
        if seq in by_seq and seq not in chosen and body_cost(chosen | {seq}) <= left:
            chosen.add(seq)
    return chosen


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
    # chronological, each stamped with its time, and its day when the line above is of another day
    assert [int(i.ref) for i in shown] == sorted(int(i.ref) for i in shown)
    assert [i.kind for i in v.items[n_pinned:]] == (["facts"] if "facts" in rest else []) + ["message"] * len(shown)
    previous_at = None
    for item in shown:
        m = by_seq[int(item.ref)]
        assert item.content == stamp(m.at, previous_at) + m.content and item.role == m.role
        assert item.tier == ("hot" if m in state.hot else "cold") and not m.pinned
        previous_at = m.at
    # greedy in ranking order, with no recent window: the same choice as the slow replay
    if recent == 0.0 and "facts" not in rest:
        left = budget - 3 - sum(i.tokens for i in v.items if i.kind == "pinned")
        unpinned = {s: m for s, m in by_seq.items() if not m.pinned}
        assert {int(i.ref) for i in shown} == replayed_greedy(unpinned, ranking, left)
        assert {int(i.ref) for i in shown} <= set(ranking)


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
    assert [i.ref for i in v.items] == ["1", "2", "39"] and {i.kind for i in v.items} == {"message"}
    assert v.items[0].tier == "cold" and v.items[1].tier == v.items[2].tier == "hot"
    assert v.items[0].content == "Fri 02 Jan 1970 00:00 UTC The vault-sync job rotates passwords every Tuesday."
    assert v.items[1].content == "Sun 04 Jan 1970 00:00 UTC Unrelated chatter number 2 about fonts."
    assert v.items[2].content == "00:00 Unrelated chatter number 39 about fonts."  # same day as the line above


def test_a_message_taken_in_between_moves_the_day_to_itself_and_pays_for_the_restamp():
    # 2 is ranked first and dated; 1, the same day and earlier, then takes the date and 2
    # drops to HH:MM. The budget fits both only because the restamp saves 2's date.
    a, b = "alpha bravo " * 70, "charlie delta " * 70   # long enough for the 256-token floor
    one, two = msg(1, "user", a, at=DAY + 60), msg(2, "user", b, at=DAY + 120)
    state = context(hot=[one, two])
    dated = count_message("user", "Fri 02 Jan 1970 00:01 UTC " + a)
    short = count_message("user", "00:02 " + b)
    assert 3 + dated + short >= d.MIN_BUDGET_TOKENS
    v = relevant(state, 3 + dated + short, [2, 1])
    assert [i.content for i in v.items] == ["Fri 02 Jan 1970 00:01 UTC " + a, "00:02 " + b]
    assert v.tokens == 3 + dated + short
    assert [i.ref for i in relevant(state, 3 + dated + short - 1, [2, 1]).items] == ["2"]


def test_the_recent_window_takes_its_share_before_the_ranking():
    hot = [msg(i, "user", f"Message {i} with a few words of padding.", at=1000.0 + i) for i in range(1, 30)]
    state = context(hot=hot)
    each = count_message("user", stamp(1001.0, 1000.0) + hot[0].content)
    dated = count_message("user", stamp(1001.0) + hot[0].content)
    budget = 1000
    share = (dated + 2 * each) / budget + 1e-9
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
    assert relevant(state, 1000, [5, 1]).items[0].kind == "message"  # share 0: no facts block


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


def test_neighbours_two_turns_away_add_their_own_weight():
    scores = {1: 0.0, 2: 0.0, 3: 4.0, 4: 0.0, 5: 0.0, 6: 0.0}
    lifted = with_neighbours(scores, [1, 2, 3, 4, 5, 6], (0.5, 0.25))
    assert lifted == {1: 1.0, 2: 2.0, 3: 4.0, 4: 2.0, 5: 1.0, 6: 0.0}
    assert with_neighbours(scores, [1, 2, 3, 4, 5, 6], (0.5,)) == with_neighbours(scores, [1, 2, 3, 4, 5, 6], 0.5)
    assert with_neighbours(scores, [1, 2, 3, 4, 5, 6], ()) == scores

"""The whole history, verbatim, when it fits: within budget by tiktoken's own count, pinned
first, every message of every tier once and in time order, deterministic, and None as
soon as one token is missing."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.context.tokens import count_message
from app.domain import context as d

AGENT = "agent-w"
ROLES = ("user", "assistant", "tool", "system")


def state_of(contents: list[tuple[str, str, bool]], cold_upto: int) -> d.AgentContext:
    messages = [d.ContextMessage(seq=i + 1, role=r, content=c, pinned=p, tokens=count_message(r, c), at=float(i))
                for i, (r, c, p) in enumerate(contents)]
    cold = [m for m in messages[:cold_upto] if not m.pinned]
    hot = [m for m in messages if m not in cold]
    return d.AgentContext(agent_id=AGENT, hot=tuple(hot), cold=d.ColdArchive(messages=tuple(cold), chunks=()),
                          last_seq=len(messages))


messages_st = st.lists(st.tuples(st.sampled_from(ROLES), st.text(min_size=0, max_size=80), st.booleans()),
                       min_size=0, max_size=25)


@settings(max_examples=150, deadline=None)
@given(messages_st, st.integers(0, 25), st.integers(256, 3000))
def test_all_messages_verbatim_pinned_first_in_time_order_within_budget(contents, cold_upto, budget):
    state = state_of(contents, cold_upto)
    view = d.whole_history_view(state, budget, count_message)
    need = 3 + sum(count_message(r, c) for r, c, _ in contents) if contents else 0
    if need > budget:
        assert view is None
        return
    assert view is not None and view.tokens == need <= budget
    assert view.tokens == (3 + sum(count_message(i.role, i.content) for i in view.items) if view.items else 0)
    kinds = [i.kind for i in view.items]
    assert kinds == sorted(kinds, key=lambda k: k != "pinned")                      # pinned first
    pinned = [i for i in view.items if i.kind == "pinned"]
    rest = [i for i in view.items if i.kind == "message"]
    assert [int(i.ref) for i in pinned] == [s for s, (_, _, p) in enumerate(contents, 1) if p]
    assert [int(i.ref) for i in rest] == [s for s, (_, _, p) in enumerate(contents, 1) if not p]
    assert all(i.content == contents[int(i.ref) - 1][1] for i in view.items)        # verbatim
    cold = {m.seq for m in state.cold.messages}
    assert all((i.tier == d.COLD) == (int(i.ref) in cold) for i in view.items)
    assert d.whole_history_view(state, budget, count_message).canonical_bytes() == view.canonical_bytes()


def test_one_token_short_is_none_and_bad_states_are_refused():
    state = state_of([("system", "Always answer in French.", True), ("user", "The port is 8080.", False)], 1)
    exact = 3 + count_message("system", "Always answer in French.") + count_message("user", "The port is 8080.")
    assert exact < 256
    assert d.whole_history_view(state, 256, count_message).tokens == exact
    big = state_of([("user", "word " * 300, False)], 0)
    need = 3 + count_message("user", "word " * 300)
    assert d.whole_history_view(big, need, count_message) is not None
    assert d.whole_history_view(big, need - 1, count_message) is None
    with pytest.raises(d.ContextLimitError):
        d.whole_history_view(state, 10, count_message)

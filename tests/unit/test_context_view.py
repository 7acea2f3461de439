"""View assembly (app.domain.context.assemble_view and its helpers), tested to kill mutants.

Three kinds of test:
- properties: within budget by tiktoken's own count, pinned first, deterministic;
- a reference model: the budget rules of the docstring written out plainly, compared with
  assemble_view on random states at budgets placed exactly on and next to the boundaries
  where an item fits or not (random budgets almost never land there, so a property test
  alone lets off-by-one mutants survive);
- worked examples of the ranking helpers, with the expected order spelled out.
See docs/benchmarks/mutation-testing-context.md for the score and the equivalent mutants.
"""
from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.context.tokens import count_message, count_text
from app.domain import context as d
from app.domain.context.view import _facts_block, _recency, _select_facts

AGENT = "agent-v"
S = d.ViewSettings()


def msg(seq, role, content, pinned=False, at=None):
    return d.ContextMessage(seq=seq, role=role, content=content, pinned=pinned,
                            tokens=count_message(role, content), at=float(seq if at is None else at))


def fact(fid, seq, kind="instruction", role="user", text=None, shape=""):
    text = text or f"Rule number {fid} about table t{seq}."
    return d.KeyFact(fact_id=fid, kind=kind, text=text, key=f"k-{fid}", source_seq=seq,
                     tokens=count_text(text), role=role, value=fid, shape=shape)


def context(hot=(), segments=(), facts=(), cold_messages=(), chunks=(), unextracted=()):
    return d.AgentContext(agent_id=AGENT, hot=tuple(hot), warm_segments=tuple(segments), facts=tuple(facts),
                          cold=d.ColdArchive(messages=tuple(cold_messages), chunks=tuple(chunks)),
                          last_seq=max([m.seq for m in list(hot) + list(cold_messages)], default=0),
                          unextracted=tuple(sorted(unextracted)))


def view(state, budget, scores=None, now=10_000.0):
    return d.assemble_view(state, budget, scores, count_message, now)


# -- a reference model of the budget rules ------------------------------------------------
def reference_head(role, content, cap):
    """The longest head of whole words (at least 8) marked as cut that fits ``cap``."""
    words = content.split(" ")
    lo, hi = 0, len(words) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_message(role, " ".join(words[:mid]) + " [...]") <= cap:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + " [...]" if lo >= 8 else ""


def reference_view(state, budget, scores, now):
    """assemble_view's documented rules, written independently: pinned oldest first while
    they fit; the facts block (chosen by _select_facts, tested below on its own) capped at
    facts_share, of the live facts but those of the newest messages that fit what the cap
    and the reserves leave; hot newest first, contiguous, leaving the warm, cold and
    pending reserves; the messages pending extraction left out, newest first, whole or
    their head, capped at pending_share; warm newest first leaving the cold floor; cold by
    blended score; leftover to hot, stopping at a message shown as pending."""
    left = budget - 3
    out_pinned, omitted = [], []
    for m in state.hot:
        if m.pinned:
            cost = count_message(m.role, m.content)
            if cost <= left:
                out_pinned.append(("pinned", m.role, m.content, cost, str(m.seq)))
                left -= cost
            else:
                omitted.append(m.seq)
    summaries = []
    for s in reversed(state.warm_segments):
        text = f"Summary of messages {s.from_seq}-{s.to_seq}: {s.summary}"
        summaries.append((s.segment_id, text, count_message("system", text)))
    reserve = min(int(S.warm_reserve * budget), summaries[0][2]) if summaries else 0
    if state.cold.chunks:
        reserve += int(S.cold_reserve * budget)
    everything = {m.seq: m for m in state.hot + state.cold.messages}
    if state.unextracted:
        reserve += min(int(S.pending_share * budget),
                       sum(count_message(everything[s].role, everything[s].content) for s in state.unextracted))
    recent = [m for m in state.hot if not m.pinned]
    facts_cap = min(left, int(S.facts_share * budget))
    newest, room = set(), max(0, left - facts_cap - reserve)
    for m in reversed(recent):
        if count_message(m.role, m.content) > room:
            break
        newest.add(m.seq)
        room -= count_message(m.role, m.content)
    live = [f for f in state.facts if f.superseded_by is None and f.source_seq not in newest]
    chosen, cost = _select_facts(live, facts_cap, count_message)
    out_facts = []
    if chosen:
        chosen = sorted(chosen, key=lambda f: (f.source_seq, f.fact_id))
        block = d.FACTS_HEADER + "\n" + "\n".join("- " + f.text for f in chosen)
        out_facts.append(("facts", "system", block, cost, ",".join(f.fact_id for f in chosen)))
        left -= cost
    taken = []
    as_pending = set()

    def fill(limit):
        nonlocal left
        while len(taken) < len(recent):
            m = recent[len(recent) - 1 - len(taken)]
            if m.seq in as_pending:
                return
            cost = count_message(m.role, m.content)
            if cost > left or cost > limit:
                return
            taken.append(("message", m.role, m.content, cost, str(m.seq)))
            left -= cost
            limit -= cost

    fill(max(0, left - reserve))
    out_pending = []
    in_window = {int(t[4]) for t in taken}
    by_seq = {m.seq: m for m in state.hot + state.cold.messages}
    cap = min(left, int(S.pending_share * budget))
    for seq in sorted(state.unextracted, reverse=True):
        m = by_seq.get(seq)
        if seq in in_window or m is None or m.pinned:
            continue
        content = m.content if count_message(m.role, m.content) <= cap else reference_head(m.role, m.content, cap)
        cost = count_message(m.role, content) if content else 0
        if not content or cost > cap:
            break
        out_pending.append(("pending", m.role, content, cost, str(seq)))
        as_pending.add(seq)
        cap -= cost
        left -= cost
    floor = int(S.cold_reserve * budget) if state.cold.chunks else 0
    out_warm = []
    for sid, text, cost in summaries:
        if cost <= left - floor:
            out_warm.append(("summary", "system", text, cost, sid))
            left -= cost
    out_cold = []
    at = {m.seq: m.at for m in state.cold.messages}
    weight = S.recency_weight if scores is not None else 1.0
    ranked = sorted(
        enumerate(state.cold.chunks),
        key=lambda pc: (-((1 - weight) * (scores or {}).get(pc[1].chunk_id, 0.0)
                          + weight * 0.5 ** (max(now - at.get(pc[1].to_seq, now), 0.0) / S.recency_half_life_seconds)),
                        -pc[0]))
    for _, c in ranked:
        text = f"Archived messages {c.from_seq}-{c.to_seq}:\n{c.text}"
        cost = count_message("system", text)
        if cost <= left:
            out_cold.append(("chunk", "system", text, cost, c.chunk_id))
            left -= cost
    fill(left)
    items = out_pinned + out_facts + out_pending + out_warm + taken[::-1] + out_cold
    return items, omitted, (3 + sum(i[3] for i in items) if items else 0)


words = st.sampled_from(["deploy", "the", "ORD-4821", "/srv/app/x.py", "naïve", "日本", "🚀", "must", "never",
                         "timeout", "=", "30 s", "\n", "Error:", "https://e.com/a", "  ", "ok."])
texts = st.lists(words, min_size=1, max_size=60).map(" ".join)


@st.composite
def states(draw):
    hot, cold_messages, seq = [], [], 0
    for _ in range(draw(st.integers(0, 14))):
        seq += 1
        m = msg(seq, draw(st.sampled_from(d.ROLES)), draw(texts), pinned=draw(st.integers(0, 4)) == 0,
                at=draw(st.floats(0, 20_000)))
        (cold_messages if draw(st.integers(0, 2)) == 0 and not m.pinned else hot).append(m)
    segments = [d.WarmSegment(f"seg-{i}", i * 10, i * 10 + 5, draw(texts), 0, float(i))
                for i in range(1, draw(st.integers(0, 3)) + 1)]
    facts = [fact(f"f{i}", draw(st.integers(1, 30)), kind=draw(st.sampled_from(list(d.FACT_KIND_PRIORITY) + ["odd"])),
                  role=draw(st.sampled_from(d.ROLES + ("robot",))), text=draw(texts),
                  shape=draw(st.sampled_from(["", "a", "b"])))
             for i in range(draw(st.integers(0, 8)))]
    facts = [f if draw(st.integers(0, 4)) else replace(f, superseded_by="later") for f in facts]
    chunks = [d.ColdChunk(f"c{i}", m.seq, m.seq, draw(texts), 0) for i, m in enumerate(cold_messages)]
    pending = [m.seq for m in hot + cold_messages if not m.pinned and draw(st.integers(0, 3)) == 0]
    return context(hot, segments, facts, cold_messages, chunks, pending)


def boundary_budgets(state, scores, now, draw_budget):
    """Budgets exactly on, and one token either side of, the total of the full view and
    of each prefix of it: where "fits" flips."""
    full, _, total = reference_view(state, d.MAX_BUDGET_TOKENS, scores, now)
    budgets = {draw_budget}
    running = 3
    for item in full:
        running += item[3]
        budgets |= {running - 1, running, running + 1}
    budgets |= {total, total + 1, total - 1}
    return sorted(b for b in budgets if d.MIN_BUDGET_TOKENS <= b <= d.MAX_BUDGET_TOKENS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states(), budget=st.integers(d.MIN_BUDGET_TOKENS, 2500),
       score=st.one_of(st.none(), st.floats(-1.0, 1.0)), now=st.floats(0, 30_000))
def test_assemble_view_follows_the_reference_model_on_and_around_every_boundary(state, budget, score, now):
    scores = None if score is None else {c.chunk_id: score * (i % 3) for i, c in enumerate(state.cold.chunks)}
    for b in boundary_budgets(state, scores, now, budget):
        got = d.assemble_view(state, b, scores, count_message, now)
        items, omitted, total = reference_view(state, b, scores, now)
        assert [(i.kind, i.role, i.content, i.tokens, i.ref) for i in got.items] == items, b
        assert got.omitted_pinned == tuple(omitted) and got.tokens == total and got.budget_tokens == b
        assert {i.tier for i in got.items if i.kind in ("pinned", "message")} <= {d.HOT}
        assert all(i.tier == d.WARM for i in got.items if i.kind in ("facts", "summary"))
        assert all(i.tier == d.COLD for i in got.items if i.kind == "chunk")
        # the promises: within budget by tiktoken's own count, pinned first, deterministic
        recount = sum(count_message(i.role, i.content) for i in got.items)
        assert got.tokens == (3 + recount if got.items else 0) <= b
        kinds = [i.kind for i in got.items]
        assert kinds[:kinds.count("pinned")] == ["pinned"] * kinds.count("pinned")
        assert d.assemble_view(state, b, scores, count_message, now).canonical_bytes() == got.canonical_bytes()


def test_the_reference_model_can_tell_a_defect_apart(monkeypatch):
    """A view that forgets the reply-priming tokens fits one message too many."""
    state = context(hot=[msg(i, "user", f"message {i} " * 20) for i in range(1, 30)])
    budget = 3 + sum(m.tokens for m in state.hot[-10:])
    assert [i.ref for i in view(state, budget).items] == [str(s) for s in range(20, 30)]
    monkeypatch.setattr(d.view, "REPLY_PRIMING_TOKENS", 0)
    got = view(state, budget - 1)
    assert [(i.kind, i.role, i.content, i.tokens, i.ref) for i in got.items] != reference_view(
        state, budget - 1, None, 10_000.0)[0]


# -- exact budgets, worked -------------------------------------------------------------------
def test_pinned_messages_fit_exactly_and_one_token_less_omits_the_newest():
    p1 = msg(1, "system", "You are a careful agent. " * 30, pinned=True)
    p2 = msg(2, "user", "Rule two. " * 40, pinned=True)
    state = context(hot=[p1, p2])
    exact = 3 + p1.tokens + p2.tokens
    assert exact > d.MIN_BUDGET_TOKENS
    full = view(state, exact)
    assert [i.ref for i in full.items] == ["1", "2"] and full.tokens == exact and full.omitted_pinned == ()
    short = view(state, exact - 1)
    assert [i.ref for i in short.items] == ["1"] and short.omitted_pinned == (2,) and short.tokens == 3 + p1.tokens
    assert short.pinned == (p1.content,)


def test_the_hot_window_is_the_newest_messages_that_fit_exactly():
    hot = [msg(i, "assistant" if i % 2 else "user", f"Step {i}: " + "reading traces " * 12) for i in range(1, 40)]
    state = context(hot=hot)
    exact = 3 + sum(m.tokens for m in hot[-15:])
    got = view(state, exact)
    assert [i.ref for i in got.items] == [str(s) for s in range(25, 40)] and got.tokens == exact
    assert [i.ref for i in view(state, exact - 1).items] == [str(s) for s in range(26, 40)]
    assert all(i.role == m.role and i.content == m.content for i, m in zip(got.items, hot[-15:]))


def test_facts_take_at_most_their_share_and_the_rest_flows_on():
    facts = [fact(f"f{i}", i) for i in range(1, 60)]
    hot = [msg(100 + i, "user", "recent work " * 30) for i in range(10)]
    state = context(hot=hot, facts=facts)
    got = view(state, 1000)
    block = got.items[0]
    assert block.kind == "facts" and block.role == "system" and block.tier == d.WARM
    assert block.tokens == count_message("system", block.content) <= int(0.30 * 1000)
    assert block.content.startswith(d.FACTS_HEADER + "\n- ")
    shown = block.ref.split(",")
    assert shown == sorted(shown, key=lambda fid: int(fid[1:]))            # session order
    assert len(shown) < len(facts)                                        # the cap bit
    # newest first under a tight budget (same kind and role)
    assert set(shown) == {f"f{i}" for i in range(60 - len(shown), 60)}
    assert got.tokens <= 1000 and [i.kind for i in got.items[1:]] == ["message"] * (len(got.items) - 1)
    assert got.tokens > 1000 - max(m.tokens for m in hot)                 # leftover went to hot


def test_warm_is_held_back_from_hot_and_summaries_come_newest_first():
    hot = [msg(i, "user", "long recent message " * 25) for i in range(100, 140)]
    segments = [d.WarmSegment(f"seg-{i}", i * 10, i * 10 + 9, f"summary number {i} " * 8, 0, float(i))
                for i in (1, 2, 3)]
    state = context(hot=hot, segments=segments)
    budget = 3 + 24 * hot[0].tokens + 20        # 24 hot messages alone would fill it
    got = view(state, budget)
    summaries = [i for i in got.items if i.kind == "summary"]
    assert summaries and summaries[0].ref == "seg-3"
    assert [s.ref for s in summaries] == ["seg-3", "seg-2", "seg-1"][:len(summaries)]
    assert summaries[0].content == f"Summary of messages 30-39: {segments[2].summary}"
    assert all(s.role == "system" for s in summaries)
    # without the reserve, hot alone would have filled the budget
    hot_only = view(context(hot=hot), budget)
    assert len([i for i in got.items if i.kind == "message"]) < len(hot_only.items)


def test_cold_chunks_rank_by_score_blended_with_recency_and_keep_their_reserve():
    cold = [msg(i, "user", f"archived {i}", at=1000.0 * i) for i in range(1, 4)]
    chunks = [d.ColdChunk(f"c{i}", i, i, f"[{i}] user: archived fact {i} " * 5, 0) for i in range(1, 4)]
    hot = [msg(10 + i, "user", "recent " * 60) for i in range(30)]
    state = context(hot=hot, cold_messages=cold, chunks=chunks)
    by_score = view(state, 1500, {"c1": 0.9, "c2": 0.1, "c3": 0.5}, now=4000.0)
    refs = [i.ref for i in by_score.items if i.kind == "chunk"]
    assert refs[0] == "c1" and by_score.items[-1].tier == d.COLD
    assert by_score.items[-1].content.startswith("Archived messages ")
    by_recency = view(state, 1500, None, now=4000.0)
    assert [i.ref for i in by_recency.items if i.kind == "chunk"][0] == "c3"   # newest first with no query
    # equal scores and ages: the newer chunk (later position) first
    same = context(hot=hot, cold_messages=[msg(1, "user", "x", at=0.0)],
                   chunks=[d.ColdChunk(f"c{i}", 1, 1, f"same {i}", 0) for i in range(3)])
    assert [i.ref for i in view(same, 1500, {}, now=0.0).items if i.kind == "chunk"][:3] == ["c2", "c1", "c0"]


# -- the helpers, worked --------------------------------------------------------------------
def test_fact_priority_order_spelled_out():
    facts = [
        fact("a", 5, kind="entity", role="user"),          # user: first, whatever its kind
        fact("b", 9, kind="instruction", role="system"),   # system ranks with user; newer first
        fact("c", 7, kind="instruction", role="tool"),     # tool output other than errors: last
        fact("d", 3, kind="decision", role="assistant"),   # then the assistant and tool errors, by kind
        fact("e", 8, kind="error", role="robot"),          # an unknown role ranks as assistant ...
        fact("f", 9, kind="error", role="tool"),           # ... ahead of tool, even when older
        fact("g", 1, kind="odd", role="assistant"),        # an unknown kind goes last of its tier
        fact("h", 9, kind="instruction", role="system"),   # same seq: fact id decides
    ]
    assert [f.fact_id for f in sorted(facts, key=d.fact_priority)] == ["b", "h", "a", "d", "e", "f", "g", "c"]
    assert d.fact_priority(facts[0]) == (0, 8, 0, -5, "a")
    assert d.fact_priority(facts[4]) == (1, 2, 1, -8, "e")
    assert d.fact_priority(facts[2]) == (2, 0, 2, -7, "c")
    assert d.fact_priority(facts[6])[1] > max(d.FACT_KIND_PRIORITY.values())


def test_facts_block_reads_in_session_order():
    block = _facts_block([fact("x2", 9, text="Later."), fact("x1", 2, text="Earlier."), fact("x0", 9, text="Tie.")])
    assert block == d.FACTS_HEADER + "\n- Earlier.\n- Tie.\n- Later."


def test_select_facts_edges():
    assert _select_facts([], 500, count_message) == ([], 0)
    assert _select_facts([fact("a", 1)], 0, count_message) == ([], 0)
    header = count_message("system", d.FACTS_HEADER + "\n")
    assert _select_facts([fact("a", 1)], header - 1, count_message) == ([], 0)
    one = fact("a", 1, text="Short rule.")
    exact = count_message("system", _facts_block([one]))
    assert _select_facts([one], exact, count_message) == ([one], exact)
    assert _select_facts([one], exact - 1, count_message) == ([], 0)


def test_select_facts_takes_every_fact_at_their_exact_cost_and_skips_only_what_does_not_fit():
    facts = [fact(f"s{i}", 20 - i, text=f"Short rule {i}.") for i in range(6)]
    everything = count_message("system", _facts_block(facts))
    chosen, cost = _select_facts(facts, everything, count_message)
    assert sorted(f.fact_id for f in chosen) == sorted(f.fact_id for f in facts) and cost == everything
    # A longer fact in the middle of the ranking, which fits the cap on its own but not
    # after the three before it, is skipped; the shorter ones after it still go in.
    long = fact("long", 17, text="A longer rule " + "with words " * 8 + ".")
    header = count_message("system", d.FACTS_HEADER + "\n")
    assert count_message("system", _facts_block([long])) <= everything
    assert count_message("system", _facts_block(facts[:3] + [long])) > everything
    ranked = facts[:3] + [long] + facts[3:]
    chosen, cost = _select_facts(ranked, everything, count_message)
    assert chosen == facts and cost == everything and header < cost


def test_select_facts_shows_one_of_each_shape_before_repeats():
    errors = [fact(f"e{i}", 30 - i, kind="error", role="tool", text=f"AssertionError: assert {i} == {i + 1}",
                   shape="error:assertionerror") for i in range(6)]
    other = fact("p", 1, kind="path", role="tool", text="See /srv/app/config.yaml.", shape="path:x")
    cap = count_message("system", _facts_block([errors[0], other])) + 2
    chosen, _ = _select_facts(errors + [other], cap, count_message)
    assert chosen == [errors[0], other]        # by priority alone it would be e0, e1
    # near-duplicates (same words, other values) count as repeats too, within a kind
    twins = [fact(f"t{i}", 40 - i, kind="todo", role="tool", text=f"Backfill invoices for region {i} today.")
             for i in range(4)]
    lone = fact("z", 2, kind="todo", role="tool", text="Rotate the staging credentials.")
    cap = count_message("system", _facts_block(twins[:1] + [lone]))
    chosen, _ = _select_facts(twins + [lone], cap, count_message)
    assert chosen == [twins[0], lone]
    # case does not hide a near-duplicate
    shout = fact("u", 39, kind="todo", role="tool", text="BACKFILL INVOICES FOR REGION 9 TODAY.")
    chosen, _ = _select_facts([twins[0], shout, lone], cap, count_message)
    assert chosen == [twins[0], lone]


def test_select_facts_puts_first_of_each_sort_before_the_repeats():
    """With room for all, the order chosen shows the classification: first the most
    important fact of each sort, then the repeats (same shape, or >= 60 % of the words of
    a fact of the same kind already taken)."""
    e0 = fact("e0", 50, kind="error", role="tool", text="AssertionError: assert 0 == 1", shape="error:assertionerror")
    e1 = fact("e1", 49, kind="error", role="tool", text="AssertionError: expected a list", shape="error:assertionerror")
    t0 = fact("t0", 40, kind="todo", role="tool", text="alpha beta gamma delta")
    t1 = fact("t1", 39, kind="todo", role="tool", text="alpha beta gamma omega")         # Jaccard 3/5 = 0.6
    x = fact("x", 38, kind="todo", role="tool", text="alpha one two three four five six")  # 1/10 with t0
    q = fact("q", 37, kind="quantity", role="tool", text="alpha beta gamma delta")       # another kind
    chosen, _ = _select_facts([x, t1, q, e1, t0, e0], 10_000, count_message)
    assert [f.fact_id for f in chosen] == ["e0", "t0", "x", "q", "e1", "t1"]


def test_recency_halves_every_half_life_and_ignores_future_timestamps():
    assert _recency(0.0, 3600.0) == 1.0
    assert _recency(3600.0, 3600.0) == 0.5
    assert _recency(7200.0, 3600.0) == 0.25
    assert _recency(-50.0, 3600.0) == 1.0
    assert _recency(0.5, 1800.0) < 1.0
    assert _recency(100.0, 0.0) == 0.0 and _recency(0.25, 0.5) == 0.5 ** 0.5


def test_view_serialisation_and_text():
    state = context(hot=[msg(1, "system", "Réponds en français. 日本", pinned=True), msg(2, "user", "hello")])
    got = view(state, 500)
    as_dict = got.to_dict()
    assert set(as_dict) == {"agent_id", "budget_tokens", "tokens", "items", "omitted_pinned"}
    assert as_dict["agent_id"] == AGENT and as_dict["budget_tokens"] == 500 and as_dict["tokens"] == got.tokens
    assert as_dict["omitted_pinned"] == [] and isinstance(as_dict["omitted_pinned"], list)
    assert as_dict["items"][0] == {"tier": "hot", "kind": "pinned", "role": "system",
                                   "content": "Réponds en français. 日本", "tokens": got.items[0].tokens, "ref": "1"}
    assert json.loads(got.canonical_bytes().decode("utf-8")) == as_dict
    assert "français".encode() in got.canonical_bytes()
    assert got.text() == "Réponds en français. 日本\nhello"
    assert view(context(), 500).tokens == 0 and view(context(), 500).items == ()


def test_a_hibernated_view_is_refused_with_the_agent_named():
    parked = d.AgentContext(agent_id=AGENT, hibernated=True)
    try:
        view(parked, 500)
    except d.ContextStateError as exc:
        assert AGENT in str(exc) and "hibernated" in str(exc)
    else:
        raise AssertionError("a hibernated context has no view")


def test_a_summary_that_fills_the_budget_exactly_is_shown_when_nothing_is_archived():
    segment = d.WarmSegment("seg-1", 1, 40, "what happened in the first forty steps " * 40, 0, 1.0)
    state = context(segments=[segment])
    exact = 3 + count_message("system", f"Summary of messages 1-40: {segment.summary}")
    assert exact >= d.MIN_BUDGET_TOKENS
    assert [i.ref for i in view(state, exact).items] == ["seg-1"]
    assert view(state, exact - 1).items == ()


def test_cold_ranking_blends_similarity_and_recency_with_the_documented_weights():
    """0.8 x cosine + 0.2 x recency. c_old: cosine 0.3, a hundred half-lives old (recency
    ~0): 0.24. c_new: cosine 0.1, archived now (recency 1): 0.08 + 0.2 = 0.28, so it
    ranks first; any other weighting of the cosine (1.2, 1.8) would put c_old first. A
    chunk not yet embedded (no score) counts as cosine 0, not as a match; a chunk whose
    messages are not in the archive counts as new."""
    now = 100 * S.recency_half_life_seconds
    cold = [msg(1, "user", "old", at=0.0), msg(2, "user", "new", at=now), msg(3, "user", "unscored", at=now / 2)]
    chunks = [d.ColdChunk("c_old", 1, 1, "old archived text", 0), d.ColdChunk("c_new", 2, 2, "new archived text", 0),
              d.ColdChunk("c_unscored", 3, 3, "unscored archived text", 0),
              d.ColdChunk("c_orphan", 9, 9, "orphan archived text", 0)]
    state = context(cold_messages=cold, chunks=chunks)
    got = view(state, 1000, {"c_old": 0.3, "c_new": 0.1, "c_orphan": 0.0}, now=now)
    assert [i.ref for i in got.items] == ["c_new", "c_old", "c_orphan", "c_unscored"]   # 0.28, 0.24, 0.2, ~0


@settings(max_examples=300, deadline=None)
@given(words=st.frozensets(st.sampled_from("abcdefghij"), max_size=10),
       others=st.lists(st.frozensets(st.sampled_from("abcdefghij"), max_size=10), max_size=6))
def test_near_duplicates_are_found_by_size_as_by_the_plain_jaccard_index(words, others):
    from app.domain.context.view import _near_duplicate
    by_size: dict[int, list[frozenset[str]]] = {}
    for other in others:
        by_size.setdefault(len(other), []).append(other)
    plain = any(len(words & o) >= d.NEAR_DUPLICATE_JACCARD * len(words | o) for o in others)
    assert _near_duplicate(words, by_size) == plain

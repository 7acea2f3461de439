"""The pure context domain: apply, compaction policy, view assembly, hibernation."""
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from app.context.tokens import count_message, count_text
from app.domain import context as d
from app.domain.events import AGENT_HIBERNATED, AGENT_WOKEN

AGENT = "agent-1"


def append(state, role, content, at, pinned=False):
    return d.apply(state, d.CONTEXT_APPENDED, {
        "agent_id": AGENT, "seq": state.last_seq + 1, "role": role, "content": content,
        "pinned": pinned, "tokens": count_message(role, content), "at": at})


def compaction(state, seqs, facts=(), superseded=(), at=0.0, summary="A summary."):
    msgs = [m for m in state.hot if m.seq in set(seqs)]
    return {
        "agent_id": AGENT, "segment_id": f"seg-{state.compactions + 1}",
        "from_seq": msgs[0].seq, "to_seq": msgs[-1].seq, "summary": summary,
        "summary_tokens": count_text(summary), "facts": list(facts), "superseded": list(superseded),
        "chunks": [{"chunk_id": f"seg-{state.compactions + 1}-c1", "from_seq": msgs[0].seq,
                    "to_seq": msgs[-1].seq, "text": "\n".join(m.content for m in msgs),
                    "tokens": count_text("\n".join(m.content for m in msgs))}],
        "tokens_before": 0, "tokens_after": 0, "summarizer": "test", "cost": {"cpu_seconds": 0.0}, "at": at}


def session(n=30, pinned_text="You are a careful agent. Never delete data."):
    state = append(d.new_context(AGENT), "system", pinned_text, 0.0, pinned=True)
    for i in range(n):
        state = append(state, "user" if i % 2 else "assistant", f"Message number {i} about the billing refactor step {i}.", 10.0 * (i + 1))
    return state


# -- apply --------------------------------------------------------------------------------
def test_append_goes_to_hot_and_tracks_growth():
    state = session(3)
    assert [m.seq for m in state.hot] == [1, 2, 3, 4]
    assert state.last_seq == 4 and state.tier_of(2) == d.HOT
    assert len(state.growth.window) == 4


def test_append_refuses_out_of_order_seq():
    state = session(2)
    with pytest.raises(ValueError):
        d.apply(state, d.CONTEXT_APPENDED, {"agent_id": AGENT, "seq": 2, "role": "user", "content": "x",
                                           "pinned": False, "tokens": 5, "at": 99.0})


def test_compaction_moves_span_to_cold_and_adds_warm_never_pinned():
    state = session(6)
    state = d.apply(state, d.CONTEXT_COMPACTED, compaction(state, [1, 2, 3, 4]))
    assert [m.seq for m in state.hot] == [1, 5, 6, 7]     # pinned seq 1 stays hot
    assert [m.seq for m in state.cold.messages] == [2, 3, 4]
    assert state.tier_of(3) == d.COLD
    assert state.warm_segments[0].from_seq == 1 and len(state.cold.chunks) == 1


def test_supersession_keeps_both_facts_and_marks_the_old_one():
    state = session(8)
    old = {"fact_id": "f2.0", "kind": "quantity", "text": "Set the timeout to 30 s.", "key": "timeout",
           "value": "30 s", "source_seq": 2}
    state = d.apply(state, d.CONTEXT_COMPACTED, compaction(state, [2, 3], facts=[old]))
    new = {"fact_id": "f4.0", "kind": "quantity", "text": "Set the timeout to 45 s.", "key": "timeout",
           "value": "45 s", "source_seq": 4}
    state = d.apply(state, d.CONTEXT_COMPACTED,
                    compaction(state, [4, 5], facts=[new], superseded=[{"fact_id": "f2.0", "by": "f4.0"}]))
    by_id = {f.fact_id: f for f in state.facts}
    assert by_id["f2.0"].superseded_by == "f4.0" and by_id["f4.0"].superseded_by is None
    assert [f.fact_id for f in state.live_facts] == ["f4.0"]
    view = d.assemble_view(state, 2000, None, count_message, 200.0)
    assert "45 s" in view.text() and "Set the timeout to 30 s." not in view.items[1].content


def test_unknown_events_are_ignored():
    state = session(2)
    assert d.apply(state, "TurnGranted", {"x": 1}) is state


# -- compaction policy ----------------------------------------------------------------------
def big_session(n, gap=60.0, size=40):
    state = append(d.new_context(AGENT), "system", "System prompt.", 0.0, pinned=True)
    for i in range(n):
        state = append(state, "user", " ".join(["word"] * size) + f" {i}", gap * (i + 1))
    return state


def test_no_plan_below_high_watermark():
    state = big_session(5)
    assert d.plan_compaction(state, 4000, d.CompactionSettings(), now=400.0) is None


def test_plan_takes_oldest_unpinned_down_to_low_watermark():
    state = big_session(60)
    budget = 2000
    s = d.CompactionSettings(mode=d.FIXED)
    plan = d.plan_compaction(state, budget, s, now=4000.0)
    assert plan is not None
    assert plan.seqs == tuple(range(2, 2 + len(plan.seqs)))       # oldest first, contiguous, not seq 1
    after = state.hot_tokens - plan.span_tokens
    assert after <= s.low_watermark * budget
    # minimal: keeping the last chosen message would leave us above the low watermark
    last = next(m for m in state.hot if m.seq == plan.seqs[-1])
    assert after + last.tokens > s.low_watermark * budget
    assert plan.summary_target_tokens <= s.summary_max_budget_fraction * budget


def test_never_mode_never_compacts():
    state = big_session(200)
    assert d.plan_compaction(state, 1000, d.CompactionSettings(mode=d.NEVER), now=1e6) is None


def test_fast_grower_compacts_earlier_and_deeper():
    s = d.CompactionSettings()
    slow = big_session(30, gap=600.0)
    fast = big_session(30, gap=1.0)
    hs, ls = d.effective_watermarks(s, slow.growth.tokens_per_minute(slow.last_activity_at))
    hf, lf = d.effective_watermarks(s, fast.growth.tokens_per_minute(fast.last_activity_at))
    assert hf < hs and lf < ls
    assert hf >= s.high_watermark - s.max_high_shift and lf >= s.low_watermark - s.max_low_shift
    # a budget where the slow grower is under its high mark but the fast one is over
    budget = int(fast.hot_tokens / ((hf + hs) / 2))
    assert d.plan_compaction(slow, budget, s, slow.last_activity_at) is None
    assert d.plan_compaction(fast, budget, s, fast.last_activity_at) is not None


def test_settings_validate():
    with pytest.raises(ValueError):
        d.CompactionSettings(high_watermark=0.3, low_watermark=0.5)
    with pytest.raises(ValueError):
        d.CompactionSettings(mode="sometimes")


# -- limits -------------------------------------------------------------------------------
def test_limits_have_clear_errors():
    with pytest.raises(d.ContextLimitError, match="limit is 100000"):
        d.validate_message("user", "x" * (d.MAX_MESSAGE_CHARS + 1))
    with pytest.raises(d.ContextLimitError, match="role must be one of"):
        d.validate_message("robot", "hi")
    with pytest.raises(d.ContextLimitError, match="limit is 100"):
        d.validate_append([("user", "hi")] * (d.MAX_MESSAGES_PER_APPEND + 1))
    with pytest.raises(d.ContextLimitError, match="between 256 and"):
        d.validate_budget(10)
    with pytest.raises(d.ContextLimitError) as err:
        d.validate_budget(d.MAX_BUDGET_TOKENS + 1)
    assert err.value.limit == "budget_tokens" and isinstance(err.value, ValueError)
    d.validate_append([("user", "fine"), ("tool", "ok")])


# -- view ---------------------------------------------------------------------------------
def rich_state():
    state = session(40)
    facts = [{"fact_id": f"f{s}.0", "kind": "instruction", "text": f"Never touch table t{s}.",
              "key": f"rule:t{s}", "value": f"t{s}", "source_seq": s} for s in range(2, 12)]
    state = d.apply(state, d.CONTEXT_COMPACTED, compaction(state, list(range(2, 12)), facts=facts, at=120.0))
    state = d.apply(state, d.CONTEXT_COMPACTED, compaction(state, list(range(12, 22)), at=220.0, summary="Second."))
    return state


def test_view_order_and_tiers():
    view = d.assemble_view(rich_state(), 4000, {"seg-1-c1": 0.9}, count_message, 500.0)
    kinds = [i.kind for i in view.items]
    assert kinds[0] == "pinned"
    assert kinds[1] == "facts" and kinds[2:4] == ["summary", "summary"]
    assert view.items[2].ref == "seg-2"                              # warm: newest first
    hot = [int(i.ref) for i in view.items if i.kind == "message"]
    assert hot == sorted(hot) and hot[-1] == 41                      # chronological, most recent kept
    assert kinds[-1] == "chunk" and {i.tier for i in view.items} == {d.HOT, d.WARM, d.COLD}
    assert view.pinned == ("You are a careful agent. Never delete data.",)
    assert view.tokens == 3 + sum(count_message(i.role, i.content) for i in view.items) <= 4000


def test_pinned_over_budget_keeps_budget_and_reports_omissions():
    state = append(d.new_context(AGENT), "system", "short system prompt", 0.0, pinned=True)
    state = append(state, "user", "standing instruction " * 400, 1.0, pinned=True)
    view = d.assemble_view(state, 300, None, count_message, 2.0)
    assert view.tokens <= 300
    assert [i.content for i in view.items] == ["short system prompt"]
    assert view.omitted_pinned == (2,)


def test_hibernated_view_is_refused_and_budget_validated():
    state = rich_state()
    hib = d.apply(state, AGENT_HIBERNATED, {"agent_id": AGENT, "resume_point": d.resume_point_for(state), "at": 1.0})
    with pytest.raises(d.ContextStateError):
        d.assemble_view(hib, 1000, None, count_message, 2.0)
    with pytest.raises(d.ContextLimitError):
        d.assemble_view(state, 100, None, count_message, 2.0)


words = st.sampled_from(["deploy", "the", "ORD-4821", "/srv/app/x.py", "naïve", "日本", "🚀", "must", "never",
                         "timeout", "=", "30 s", "\n", "Error:", "https://e.com/a", "  ", "ok."])
texts = st.lists(words, min_size=0, max_size=120).map(" ".join)


@st.composite
def states(draw):
    state = d.new_context(AGENT)
    at = 0.0
    for _ in range(draw(st.integers(0, 25))):
        at += draw(st.floats(0.0, 100.0))
        state = append(state, draw(st.sampled_from(d.ROLES)), draw(texts), at, pinned=draw(st.booleans()) and draw(st.booleans()))
    unpinned = [m.seq for m in state.hot if not m.pinned]
    if len(unpinned) >= 3 and draw(st.booleans()):
        k = draw(st.integers(1, len(unpinned) - 1))
        facts = [{"fact_id": f"f{s}.{j}", "kind": draw(st.sampled_from(list(d.FACT_KIND_PRIORITY))),
                  "text": draw(texts) or "x", "key": f"k{j}", "value": "v", "source_seq": s,
                  "role": draw(st.sampled_from(d.ROLES))}
                 for s in unpinned[:k] for j in range(draw(st.integers(0, 3)))]
        state = d.apply(state, d.CONTEXT_COMPACTED, compaction(state, unpinned[:k], facts=facts, at=at,
                                                                summary=draw(texts) or "s"))
    return state


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states(), budget=st.integers(d.MIN_BUDGET_TOKENS, 3000),
       scores=st.one_of(st.none(), st.floats(-1.0, 1.0)))
def test_view_never_exceeds_budget_and_pinned_come_first(state, budget, scores):
    chunk_scores = None if scores is None else {c.chunk_id: scores for c in state.cold.chunks}
    view = d.assemble_view(state, budget, chunk_scores, count_message, now=10_000.0)
    recount = sum(count_message(i.role, i.content) for i in view.items)
    assert view.tokens == (3 + recount if view.items else 0)
    assert view.tokens <= budget
    kinds = [i.kind for i in view.items]
    order = ["pinned", "facts", "summary", "message", "chunk"]
    assert [order.index(k) for k in kinds] == sorted(order.index(k) for k in kinds)
    pinned_seqs = [m.seq for m in state.hot if m.pinned]
    shown = [int(i.ref) for i in view.items if i.kind == "pinned"]
    assert sorted(shown + list(view.omitted_pinned)) == pinned_seqs


# -- serialisation, rebuild, hibernation --------------------------------------------------------
def test_state_round_trips_through_json_with_equal_hash():
    state = rich_state()
    blob = json.dumps(d.state_to_dict(state))
    restored = d.state_from_dict(json.loads(blob))
    assert restored == state and d.state_hash(restored) == d.state_hash(state)


def test_rebuild_from_events_equals_live_state():
    events, state = [], d.new_context(AGENT)
    for i in range(12):
        data = {"agent_id": AGENT, "seq": i + 1, "role": "user", "content": f"m{i}", "pinned": i == 0,
                "tokens": count_message("user", f"m{i}"), "at": float(i)}
        events.append((d.CONTEXT_APPENDED, json.loads(json.dumps(data))))
        state = d.apply(state, *events[-1])
    comp = compaction(state, [2, 3, 4])
    events.append((d.CONTEXT_COMPACTED, json.loads(json.dumps(comp))))
    state = d.apply(state, *events[-1])
    rebuilt = d.new_context(AGENT)
    for event in events:
        rebuilt = d.apply(rebuilt, *event)
    assert d.state_hash(rebuilt) == d.state_hash(state)


def test_hibernate_keeps_only_cold_archive_and_resume_point_and_wake_is_exact():
    state = rich_state()
    before = d.assemble_view(state, 3000, {"seg-2-c1": 0.7}, count_message, 900.0)
    hib = d.apply(state, AGENT_HIBERNATED, json.loads(json.dumps(
        {"agent_id": AGENT, "resume_point": d.resume_point_for(state), "at": 800.0})))
    assert hib.hibernated and hib.hot == () and hib.warm_segments == () and hib.facts == ()
    assert len(hib.cold.messages) == len(state.hot) + len(state.cold.messages)   # nothing deleted
    assert hib.resume_point is not None and d.context_stats(hib)["hot_tokens"] == 0
    stored = d.state_from_dict(json.loads(json.dumps(d.state_to_dict(hib))))   # via a projection row
    woken = d.apply(stored, AGENT_WOKEN, {"agent_id": AGENT, "at": 900.0})
    after = d.assemble_view(woken, 3000, {"seg-2-c1": 0.7}, count_message, 900.0)
    assert after.canonical_bytes() == before.canonical_bytes()
    assert d.state_hash(woken) == d.state_hash(state)


def test_append_to_hibernated_agent_wakes_it_first():
    state = rich_state()
    hib = d.apply(state, AGENT_HIBERNATED, {"agent_id": AGENT, "resume_point": d.resume_point_for(state), "at": 1.0})
    woke = append(hib, "user", "back again", 5000.0)
    assert not woke.hibernated and woke.hot[-1].content == "back again"
    assert len(woke.hot) == len(state.hot) + 1


def test_should_hibernate_after_idle_time():
    state = session(3)
    assert not d.should_hibernate(state, state.last_activity_at + 10, idle_seconds=60)
    assert d.should_hibernate(state, state.last_activity_at + 60, idle_seconds=60)


def test_a_hibernation_that_lost_the_race_to_an_append_folds_as_a_no_op():
    from app.domain import context as c
    state = c.new_context("a")
    state = c.apply(state, c.CONTEXT_APPENDED, {"agent_id": "a", "seq": 1, "role": "user", "content": "one",
                                                "pinned": False, "tokens": 5, "at": 1.0})
    stale = c.resume_point_for(state)
    state = c.apply(state, c.CONTEXT_APPENDED, {"agent_id": "a", "seq": 2, "role": "user", "content": "two",
                                                "pinned": False, "tokens": 5, "at": 2.0})
    after = c.apply(state, "AgentHibernated", {"agent_id": "a", "resume_point": stale, "at": 3.0})
    assert not after.hibernated and c.state_hash(after) == c.state_hash(state)

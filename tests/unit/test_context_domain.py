"""The pure context domain: apply, compaction policy, view assembly, hibernation."""
import gc
import json
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
        state = append(state, "user" if i % 2 else "assistant",
                       f"Message number {i} about the billing refactor step {i}.", 10.0 * (i + 1))
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
        state = append(state, draw(st.sampled_from(d.ROLES)), draw(texts), at,
                       pinned=draw(st.booleans()) and draw(st.booleans()))
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
    order = ["pinned", "facts", "pending", "summary", "message", "chunk"]
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


# The rebuild is checked against a reference model: a direct statement of what the tiers
# must hold after a sequence of events, written without the fold (no replace, no apply).
# Comparing the fold with itself (fold the events, fold them again) would pass whatever
# the fold did, so the events here are also decoded from their JSON form, and the live
# state is reached by another route: resumed from a serialised snapshot half way.
def reference_state(agent_id, events):
    """What the context must be after ``events`` (JSON-decoded (type, data) pairs)."""
    messages, moved, segments, facts, chunks, window = {}, set(), [], [], [], []
    superseded_by, last_activity, parked = {}, 0.0, False
    pending, fact_events, start = [], 0, 0

    def record_facts(data, scanned, span):
        """The facts of the scanned messages still pending: the first record of a message's facts wins."""
        news = {s for s in scanned if s in pending or (span and (not start or s < start))}
        kept = set()
        for f in data["facts"]:
            if f["source_seq"] not in news:
                continue
            role = f.get("role") or (messages[f["source_seq"]]["role"] if f["source_seq"] in span else "user")
            facts.append({"fact_id": f["fact_id"], "kind": f["kind"], "text": f["text"], "key": f["key"],
                          "source_seq": f["source_seq"], "tokens": f.get("tokens", 0), "role": role,
                          "value": f.get("value", ""), "shape": f.get("shape", "")})
            kept.add(f["fact_id"])
        superseded_by.update({x["fact_id"]: x["by"] for x in data["superseded"] if x["by"] in kept})
        pending[:] = [s for s in pending if s not in news]

    for kind, data in events:
        if kind == d.CONTEXT_APPENDED:
            messages[data["seq"]] = {k: data[k] for k in ("seq", "role", "content", "pinned", "tokens", "at")}
            window = (window + [[data["at"], data["tokens"]]])[-d.GROWTH_WINDOW:]
            last_activity = data["at"]
            if data.get("facts_at_append") and not data["pinned"]:
                pending.append(data["seq"])
            if data.get("facts_at_append"):
                start = start or data["seq"]
        elif kind == d.CONTEXT_FACTS_EXTRACTED:
            record_facts(data, data["seqs"], set())
            fact_events += 1
            last_activity = max(last_activity, data["at"])
        elif kind == d.CONTEXT_COMPACTED:
            span = {s for s, m in messages.items() if data["from_seq"] <= s <= data["to_seq"]
                    and not m["pinned"] and s not in moved}
            moved |= span
            segments.append({k: data[k] for k in ("segment_id", "from_seq", "to_seq", "summary",
                                                  "summary_tokens", "at")})
            record_facts(data, data.get("scanned_seqs", sorted(span)), span)
            chunks += [{k: c[k] for k in ("chunk_id", "from_seq", "to_seq", "text", "tokens")} for c in data["chunks"]]
            last_activity = max(last_activity, data["at"])
        elif kind == AGENT_HIBERNATED:
            parked = True
        elif kind == AGENT_WOKEN:
            parked = False
    for f in facts:
        f["superseded_by"] = superseded_by.get(f["fact_id"])
    assert not parked, "the reference describes awake contexts"
    return {"agent_id": agent_id, "hot": [m for s, m in sorted(messages.items()) if s not in moved],
            "warm_segments": segments, "facts": facts,
            "cold": {"messages": [m for s, m in sorted(messages.items()) if s in moved], "chunks": chunks},
            "growth": {"window": window}, "last_seq": max(messages, default=0), "compactions": len(segments),
            "last_activity_at": last_activity, "hibernated": False, "resume_point": None,
            "unextracted": pending, "fact_events": fact_events, "facts_from": start}


def as_json(state):
    return json.loads(d.canonical_json(d.state_to_dict(state)))


def fold_log(agent_id, events, start=None, history=()):
    """The projector's route: fold, and before an event that needs a parked context,
    restore it from the context events before it (the stream, ``history`` included: the
    log before ``start``), as the shell does."""
    state = start or d.new_context(agent_id)
    for i, (kind, data) in enumerate(events):
        if state.hibernated and kind in (d.CONTEXT_APPENDED, d.CONTEXT_COMPACTED, d.CONTEXT_FACTS_EXTRACTED,
                                         AGENT_WOKEN):
            archived = d.new_context(agent_id)
            for k, x in list(history) + list(events[:i]):
                if k in (d.CONTEXT_APPENDED, d.CONTEXT_COMPACTED, d.CONTEXT_FACTS_EXTRACTED):
                    archived = d.apply(archived, k, x)
            state = d.restore(state, archived)
        state = d.apply(state, kind, data)
    return state


@st.composite
def logs(draw):
    """A random context log: appends, append-time fact extractions (of pending messages,
    and some of messages whose facts are recorded already), compactions of random hot spans
    with facts and supersessions, and hibernate/wake cycles; ends awake."""
    state, events, at, fact_ids = d.new_context(AGENT), [], 0.0, []
    extracting_from = draw(st.integers(0, 40))   # the step from which appends are extracted

    def record(kind, data):
        nonlocal state
        events.append((kind, json.loads(json.dumps(data))))
        state = fold_log(AGENT, events[-1:], start=state, history=events[:-1])

    for _ in range(draw(st.integers(1, 40))):
        at += draw(st.floats(0.0, 50.0))
        step = draw(st.sampled_from(["append"] * 6 + ["compact", "compact", "facts", "facts", "hibernate"]))
        unpinned = [m.seq for m in state.hot if not m.pinned]
        if step == "compact" and len(unpinned) >= 2:
            lo = draw(st.integers(0, len(unpinned) - 2))
            hi = draw(st.integers(lo, len(unpinned) - 1))
            seqs = unpinned[lo:hi + 1]
            facts = [{"fact_id": f"f{s}.0", "kind": "quantity", "text": f"value {s}", "key": f"k{s % 3}",
                      "value": str(s), "source_seq": s, "tokens": 2} for s in seqs if draw(st.booleans())]
            old = [f for f in fact_ids if draw(st.booleans())][:2]
            sup = [{"fact_id": o, "by": facts[0]["fact_id"]} for o in old] if facts else []
            data = compaction(state, seqs, facts=facts, superseded=sup, at=at, summary=f"summary {len(events)}")
            if state.facts_from:   # written by a server that extracts at append time
                data["scanned_seqs"] = [s for s in seqs if draw(st.integers(0, 3))]
            record(d.CONTEXT_COMPACTED, data)
            fact_ids = [f.fact_id for f in state.facts]   # a supersession names a fact that exists
        elif step == "facts" and state.last_seq:
            # mostly pending messages, sometimes one whose facts are recorded already (a lost race)
            seqs = sorted(set(state.unextracted[:draw(st.integers(1, 4))])
                          | ({draw(st.integers(1, state.last_seq))} if draw(st.booleans()) else set()))
            facts = [{"fact_id": f"f{s}.0", "kind": "decision", "text": f"chose {s}", "key": f"k{s % 3}",
                      "value": str(s), "source_seq": s, "tokens": 2, "role": "user"}
                     for s in seqs if draw(st.booleans())]
            old = [f for f in fact_ids if draw(st.booleans())][:2]
            sup = [{"fact_id": o, "by": facts[0]["fact_id"]} for o in old] if facts else []
            record(d.CONTEXT_FACTS_EXTRACTED, {"agent_id": AGENT, "seqs": seqs, "facts": facts,
                                               "superseded": sup, "extractor": "test", "at": at})
            fact_ids = [f.fact_id for f in state.facts]
        elif step == "hibernate" and state.last_seq:
            record(AGENT_HIBERNATED, {"agent_id": AGENT, "resume_point": d.resume_point_for(state), "at": at})
            record(AGENT_WOKEN, {"agent_id": AGENT, "at": at})
        else:
            role = draw(st.sampled_from(d.ROLES))
            content = draw(texts)
            record(d.CONTEXT_APPENDED, {"agent_id": AGENT, "seq": state.last_seq + 1, "role": role,
                                        "content": content, "pinned": draw(st.integers(0, 5)) == 0,
                                        "tokens": len(content) // 4 + 3, "at": at,
                                        **({"facts_at_append": True} if len(events) >= extracting_from else {})})
    return events


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=logs(), cut=st.floats(0.0, 1.0))
def test_rebuild_from_the_json_log_matches_a_reference_model_and_a_resumed_projection(events, cut):
    blob = json.dumps(events)                                  # the log as stored
    decoded = [tuple(e) for e in json.loads(blob)]
    rebuilt = fold_log(AGENT, decoded)
    assert as_json(rebuilt) == reference_state(AGENT, decoded)
    # Another route to the same state: a projection persisted part way (as a JSON
    # document, parked or not), loaded, and folded on from there.
    k = int(cut * len(decoded))
    snapshot = json.loads(json.dumps(d.state_to_dict(fold_log(AGENT, decoded[:k]))))
    resumed = fold_log(AGENT, decoded[k:], start=d.state_from_dict(snapshot), history=decoded[:k])
    assert d.state_hash(resumed) == d.state_hash(rebuilt)


def test_the_reference_model_sees_a_defect_in_the_fold(monkeypatch):
    """The check above can fail: a fold that forgets to mark superseded facts differs."""
    state = session(8)
    events = [(d.CONTEXT_APPENDED, {"agent_id": AGENT, "seq": m.seq, "role": m.role, "content": m.content,
                                    "pinned": m.pinned, "tokens": m.tokens, "at": m.at}) for m in state.hot]
    old = {"fact_id": "f2.0", "kind": "quantity", "text": "t 30", "key": "t", "value": "30", "source_seq": 2}
    new = {"fact_id": "f4.0", "kind": "quantity", "text": "t 45", "key": "t", "value": "45", "source_seq": 4}
    events.append((d.CONTEXT_COMPACTED, compaction(state, [2, 3], facts=[old])))
    after_first = fold_log(AGENT, events)
    events.append((d.CONTEXT_COMPACTED, compaction(after_first, [4, 5], facts=[new],
                                                   superseded=[{"fact_id": "f2.0", "by": "f4.0"}])))
    events = json.loads(json.dumps(events))
    assert as_json(fold_log(AGENT, events)) == reference_state(AGENT, events)
    real_replace = d.fold.replace
    monkeypatch.setattr(d.fold, "replace", lambda obj, **kw: real_replace(
        obj, **{k: v for k, v in kw.items() if k != "superseded_by"}))
    assert as_json(fold_log(AGENT, events)) != reference_state(AGENT, events)


# -- hibernation ------------------------------------------------------------------------------
def rich_log():
    """rich_state() as the JSON-decoded events that build it."""
    events = []
    state = session(40)
    for m in state.hot:
        events.append((d.CONTEXT_APPENDED, {"agent_id": AGENT, "seq": m.seq, "role": m.role, "content": m.content,
                                            "pinned": m.pinned, "tokens": m.tokens, "at": m.at}))
    facts = [{"fact_id": f"f{s}.0", "kind": "instruction", "text": f"Never touch table t{s}.",
              "key": f"rule:t{s}", "value": f"t{s}", "source_seq": s} for s in range(2, 12)]
    events.append((d.CONTEXT_COMPACTED, compaction(fold_log(AGENT, events), list(range(2, 12)), facts=facts,
                                                   at=120.0)))
    events.append((d.CONTEXT_COMPACTED, compaction(fold_log(AGENT, events), list(range(12, 22)), at=220.0,
                                                   summary="Second.")))
    return [(k, json.loads(json.dumps(x))) for k, x in events]


def hibernation(state, at=800.0):
    return json.loads(json.dumps({"agent_id": AGENT, "resume_point": d.resume_point_for(state), "at": at}))


def test_hibernation_releases_every_tier_and_a_wake_from_the_log_restores_the_exact_view():
    events = rich_log()
    state = fold_log(AGENT, events)
    assert as_json(state) == as_json(rich_state())
    before = d.assemble_view(state, 3000, {"seg-2-c1": 0.7}, count_message, 900.0)
    stats_before = d.context_stats(state)
    hib = d.apply(state, AGENT_HIBERNATED, hibernation(state))
    # Nothing of the context is left in the object: no message, summary, fact or chunk.
    assert hib.hibernated and hib.hot == () and hib.warm_segments == () and hib.facts == ()
    assert hib.cold == d.ColdArchive() and hib.growth == d.GrowthStats()
    stored = d.canonical_json(d.state_to_dict(hib))            # the projection's document
    assert "billing refactor" not in stored and "Never touch" not in stored and "Second." not in stored
    assert len(stored) < len(d.canonical_json(d.state_to_dict(state))) / 20
    stats = d.context_stats(hib)
    assert (stats["hot_tokens"], stats["warm_tokens"]) == (0, 0)
    assert stats["messages"] == stats_before["messages"] == 41
    assert stats["cold_tokens"] == stats_before["hot_tokens"] + stats_before["cold_tokens"]
    # The wake folds the context stream again, as the projector does.
    parked = d.state_from_dict(json.loads(stored))
    assert d.restore(parked, fold_log(AGENT, events)) == state
    woken = fold_log(AGENT, events + [(AGENT_HIBERNATED, hibernation(state)),
                                      (AGENT_WOKEN, {"agent_id": AGENT, "at": 900.0})])
    after = d.assemble_view(woken, 3000, {"seg-2-c1": 0.7}, count_message, 900.0)
    assert after.canonical_bytes() == before.canonical_bytes()
    assert d.state_hash(woken) == d.state_hash(state)


def test_hibernation_frees_the_memory_the_context_held():
    """Measured, not inferred: the bytes Python holds drop by the size of the history once
    the awake state is dropped and only the hibernated one is kept."""
    def big_context():
        state = d.new_context(AGENT)
        for i in range(300):
            content = f"{i:04d} " + (f"payload-{i} ") * 400   # ~4 KB each, unique
            state = d.apply(state, d.CONTEXT_APPENDED, {"agent_id": AGENT, "seq": i + 1, "role": "tool",
                                                       "content": content, "pinned": False, "tokens": 1000,
                                                       "at": float(i)})
        return d.apply(state, d.CONTEXT_COMPACTED, compaction(state, list(range(1, 151))))

    tracemalloc.start()
    try:
        state = big_context()
        history = sum(len(m.content) for m in state.hot + state.cold.messages)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        parked = d.apply(state, AGENT_HIBERNATED, hibernation(state))
        del state
        gc.collect()
        freed = held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert history > 1_000_000
    assert freed > history, (freed, history)                 # the messages, and the chunks beside them
    assert parked.hibernated and d.context_stats(parked)["messages"] == 300


def test_restore_refuses_a_stream_that_does_not_match_the_resume_point():
    events = rich_log()
    state = fold_log(AGENT, events)
    parked = d.apply(state, AGENT_HIBERNATED, hibernation(state))
    with pytest.raises(ValueError, match="does not match its resume point"):
        d.restore(parked, fold_log(AGENT, events[:-1]))          # a stream read short
    tampered = [(k, {**x, "content": "changed"}) if k == d.CONTEXT_APPENDED and x["seq"] == 41 else (k, x)
                for k, x in events]
    with pytest.raises(ValueError, match="does not match its resume point"):
        d.restore(parked, fold_log(AGENT, tampered))             # a working set that differs
    with pytest.raises(ValueError):
        d.restore(parked, d.new_context("someone-else"))
    assert d.restore(state, d.new_context(AGENT)) is state        # not parked: unchanged


def test_nothing_folds_into_a_parked_context():
    state = rich_state()
    hib = d.apply(state, AGENT_HIBERNATED, hibernation(state, at=1.0))
    with pytest.raises(d.ContextStateError, match="restore"):
        append(hib, "user", "back again", 5000.0)
    with pytest.raises(d.ContextStateError):
        d.apply(hib, AGENT_WOKEN, {"agent_id": AGENT, "at": 2.0})
    with pytest.raises(d.ContextStateError):
        d.assemble_view(hib, 1000, None, count_message, 2.0)
    assert d.apply(hib, AGENT_HIBERNATED, hibernation(state, at=3.0)) is hib


def test_an_append_straight_after_a_hibernation_follows_the_restored_history():
    events = rich_log()
    state = fold_log(AGENT, events)
    events += [(AGENT_HIBERNATED, hibernation(state, at=1.0)),
               (d.CONTEXT_APPENDED, {"agent_id": AGENT, "seq": 42, "role": "user", "content": "back again",
                                     "pinned": False, "tokens": count_message("user", "back again"), "at": 5000.0})]
    woke = fold_log(AGENT, events)
    assert not woke.hibernated and woke.hot[-1].content == "back again"
    assert len(woke.hot) == len(state.hot) + 1 and woke.cold == state.cold


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

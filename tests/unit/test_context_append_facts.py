"""Key facts at append time: the fold of ContextFactsExtracted, "pending extraction", the
query-less view that draws on every fact extracted so far, and the extraction wrapper."""
from __future__ import annotations

import json

from app.context.append_facts import extract_pending, extractor_version, pending_messages
from app.context.compactor import compact
from app.context.facts import EXTRACTOR_VERSION
from app.context.tokens import count_message, count_text
from app.domain import context as d

AGENT = "agent-f"
FILLER = ("We walked through the retry path and the cache warmup again; nothing conclusive yet, "
          "so the traces get another read after lunch. ")


def append(state, role, content, at, pinned=False):
    return d.apply(state, d.CONTEXT_APPENDED, {
        "agent_id": AGENT, "seq": state.last_seq + 1, "role": role, "content": content,
        "pinned": pinned, "tokens": count_message(role, content), "at": at, "facts_at_append": True})


def fact(seq, index=0, text=None, key=None, value=None, kind="decision"):
    text = text or f"We decided on option {seq}."
    return {"fact_id": f"f{seq}.{index}", "kind": kind, "text": text, "key": key or f"key-{seq}",
            "value": value or text, "source_seq": seq, "role": "user", "tokens": count_text(text), "shape": ""}


def extracted(seqs, facts=(), superseded=(), at=100.0):
    return {"agent_id": AGENT, "seqs": list(seqs), "facts": list(facts), "superseded": list(superseded),
            "extractor": "test", "at": at}


def compacted(state, seqs, facts=(), superseded=(), scanned=None):
    msgs = [m for m in state.hot if m.seq in set(seqs)]
    data = {"agent_id": AGENT, "segment_id": f"seg-{state.compactions + 1}", "from_seq": msgs[0].seq,
            "to_seq": msgs[-1].seq, "summary": "A summary.", "summary_tokens": 3, "facts": list(facts),
            "superseded": list(superseded), "chunks": [], "at": 50.0}
    if scanned is not None:
        data["scanned_seqs"] = list(scanned)
    return data


def session(n):
    state = append(d.new_context(AGENT), "system", "You are careful.", 0.0, pinned=True)
    for i in range(n):
        state = append(state, "user", f"Note {i}. " + FILLER, float(i + 1))
    return state


# -- the fold: what "pending extraction" means ---------------------------------------------
def test_an_appended_message_is_pending_until_its_facts_are_recorded_and_a_pinned_one_never_is():
    state = session(3)
    assert state.unextracted == (2, 3, 4)   # seq 1 is pinned: always shown whole, never pending
    state = d.apply(state, d.CONTEXT_FACTS_EXTRACTED, extracted([2, 3], [fact(3)]))
    assert state.unextracted == (4,)
    assert [f.fact_id for f in state.live_facts] == ["f3.0"] and state.tier_of(3) == d.HOT
    assert state.fact_events == 1   # counted: it is part of the stream's version


def test_the_first_record_of_a_messages_facts_wins_either_way():
    state = session(6)
    state = d.apply(state, d.CONTEXT_FACTS_EXTRACTED, extracted([2, 3], [fact(2), fact(3)]))
    # A compaction planned before that extraction landed scanned 2..4 too: its facts of 2
    # and 3 (and the supersession one of them causes) are dropped, those of 4 kept.
    late = compacted(state, [2, 3, 4], [fact(2, text="We decided on the copy of 2."), fact(4)],
                     superseded=[{"fact_id": "f3.0", "by": "f2.0"}], scanned=[2, 3, 4])
    state = d.apply(state, d.CONTEXT_COMPACTED, late)
    assert sorted(f.fact_id for f in state.facts) == ["f2.0", "f3.0", "f4.0"]
    assert all(f.superseded_by is None for f in state.facts)
    assert next(f for f in state.facts if f.fact_id == "f2.0").text == "We decided on option 2."
    assert state.unextracted == (5, 6, 7)
    # And an extraction that lost the race to that compaction records nothing for 4.
    state = d.apply(state, d.CONTEXT_FACTS_EXTRACTED, extracted([4, 5], [fact(4, text="copy"), fact(5)]))
    assert sorted(f.fact_id for f in state.facts) == ["f2.0", "f3.0", "f4.0", "f5.0"]
    assert state.unextracted == (6, 7)


def test_supersession_at_append_time_marks_the_old_fact_as_a_compaction_does():
    state = session(4)
    state = d.apply(state, d.CONTEXT_FACTS_EXTRACTED, extracted(
        [2], [fact(2, text="The port is 8080.", key="port", value="8080", kind="quantity")]))
    state = d.apply(state, d.CONTEXT_FACTS_EXTRACTED, extracted(
        [3], [fact(3, text="The port is 9090.", key="port", value="9090", kind="quantity")],
        superseded=[{"fact_id": "f2.0", "by": "f3.0"}]))
    assert [f.text for f in state.live_facts] == ["The port is 9090."]
    assert [f.superseded_by for f in state.facts] == ["f3.0", None]


def test_a_log_from_before_append_time_facts_folds_as_before():
    """Its messages are never pending, and its compactions' facts are all kept; appends
    made for extraction after it are pending, and a compaction of old and new messages
    keeps the facts of the old ones."""
    state = d.new_context(AGENT)
    for i in range(4):
        state = d.apply(state, d.CONTEXT_APPENDED, {"agent_id": AGENT, "seq": i + 1, "role": "user",
                                                   "content": f"Old {i}.", "tokens": 6, "at": float(i)})
    assert state.unextracted == () and state.facts_from == 0
    state = d.apply(state, d.CONTEXT_COMPACTED, compacted(state, [1, 2], [fact(1), fact(2)]))
    assert [f.fact_id for f in state.live_facts] == ["f1.0", "f2.0"]
    state = append(state, "user", "New.", 9.0)
    assert state.unextracted == (5,) and state.facts_from == 5
    state = d.apply(state, d.CONTEXT_COMPACTED, compacted(state, [3, 4, 5], [fact(3), fact(5)], scanned=[3, 4, 5]))
    assert [f.fact_id for f in state.live_facts] == ["f1.0", "f2.0", "f3.0", "f5.0"]
    assert state.unextracted == ()


def test_messages_a_compaction_left_unscanned_stay_pending_in_cold():
    state = session(5)
    data = compacted(state, [2, 3, 4], [fact(2)])
    data["messages_not_scanned"] = 1
    state = d.apply(state, d.CONTEXT_COMPACTED, data)
    assert state.unextracted == (4, 5, 6) and state.tier_of(4) == d.COLD
    assert [m.seq for m in pending_messages(state)] == [4, 5, 6]


def test_hibernation_keeps_the_fact_event_count_that_fixes_the_stream_version():
    state = d.apply(session(2), d.CONTEXT_FACTS_EXTRACTED, extracted([2]))
    parked = d.apply(state, "AgentHibernated", {"agent_id": AGENT, "resume_point": d.resume_point_for(state),
                                                "at": 9.0})
    assert parked.hibernated and parked.fact_events == 1


# -- the query-less view --------------------------------------------------------------------
def long_session(n=40):
    state = session(n)
    return state


def test_the_view_shows_the_facts_of_hot_messages_it_leaves_out_and_not_of_those_it_shows():
    state = long_session()
    state = d.apply(state, d.CONTEXT_FACTS_EXTRACTED, extracted(
        range(2, 42), [fact(3, text="We decided to pin node 20.11 for the build."),
                       fact(40, text="We decided to ship on Thursday.")]))
    assert not state.unextracted and not state.cold.messages   # nothing pending, nothing compacted
    view = d.assemble_view(state, 600, None, count_message, 100.0)
    shown = {int(i.ref) for i in view.items if i.kind == "message"}
    assert 3 not in shown and 40 in shown
    facts = next(i for i in view.items if i.kind == "facts")
    assert "node 20.11" in facts.content and "Thursday" not in facts.content
    assert view.tokens <= 600


def test_a_message_pending_extraction_that_the_window_leaves_out_is_shown_itself():
    state = long_session()
    # every message but 3 has had its facts extracted (3 is pending: a lagging worker)
    state = d.apply(state, d.CONTEXT_FACTS_EXTRACTED, extracted([2] + list(range(4, 42))))
    assert state.unextracted == (3,)
    view = d.assemble_view(state, 600, None, count_message, 100.0)
    pending = [i for i in view.items if i.kind == "pending"]
    assert [(i.ref, i.tier, i.content) for i in pending] == [("3", d.HOT, state.hot[2].content)]
    assert view.tokens <= 600
    assert [i.kind for i in view.items].index("pending") < [i.kind for i in view.items].index("message")


def test_a_long_pending_message_left_out_shows_its_head():
    state = session(0)
    state = append(state, "user", "Root cause: the connection pool was exhausted by the nightly export. "
                   + FILLER * 40, 1.0)
    for i in range(30):
        state = append(state, "assistant", f"Step {i}. " + FILLER, float(i + 2))
    state = d.apply(state, d.CONTEXT_FACTS_EXTRACTED, extracted(range(3, 33)))
    assert state.unextracted == (2,)
    view = d.assemble_view(state, 1000, None, count_message, 100.0)
    pending = next(i for i in view.items if i.kind == "pending")
    assert pending.content.startswith("Root cause: the connection pool was exhausted")
    assert pending.content.endswith("[...]") and pending.tokens <= int(0.2 * 1000)
    assert view.tokens <= 1000


def test_a_view_replayed_from_the_json_log_is_the_same_view():
    state = long_session()
    events = [(d.CONTEXT_APPENDED, {"agent_id": AGENT, "seq": m.seq, "role": m.role, "content": m.content,
                                    "pinned": m.pinned, "tokens": m.tokens, "at": m.at, "facts_at_append": True})
              for m in state.hot]
    live = state
    for data in (extracted(range(2, 20), [fact(5, text="We decided to keep the v1 API.")]),
                 compacted(live, range(2, 15), scanned=[]),
                 extracted(range(20, 42), [fact(30, text="We decided to drop the cron job.")])):
        kind = d.CONTEXT_COMPACTED if "segment_id" in data else d.CONTEXT_FACTS_EXTRACTED
        events.append((kind, data))
        live = d.apply(live, kind, data)
    replayed = d.new_context(AGENT)
    for kind, data in json.loads(json.dumps(events)):
        replayed = d.apply(replayed, kind, data)
    assert d.state_hash(replayed) == d.state_hash(live)
    assert d.assemble_view(replayed, 500, None, count_message, 99.0).canonical_bytes() == \
        d.assemble_view(live, 500, None, count_message, 99.0).canonical_bytes()


# -- the shell's pieces ------------------------------------------------------------------------
def test_extraction_scans_at_least_one_message_and_leaves_the_rest_pending_past_its_budget():
    state = session(0)
    for i, text in enumerate(["We decided to pin node 20.11.", "Never deploy on Fridays.", "ok"]):
        state = append(state, "user", text, float(i + 1))
    messages = pending_messages(state)
    data = extract_pending(state, messages, count_text, 7.0, budget_s=0.0)
    assert data is not None and data["seqs"] == [2]   # out of budget after the first
    assert [f["text"] for f in data["facts"]] == ["We decided to pin node 20.11."]
    assert data["extractor"] == extractor_version() and data["at"] == 7.0
    assert data["extractor"].startswith(EXTRACTOR_VERSION + "+")   # the name its benchmark reports
    state = d.apply(state, d.CONTEXT_FACTS_EXTRACTED, data)
    data = extract_pending(state, pending_messages(state), count_text, 8.0)
    assert data is not None and data["seqs"] == [3, 4]
    assert extract_pending(state, [], count_text, 8.0) is None


def test_a_compaction_does_not_scan_messages_whose_facts_were_recorded_at_append_time():
    from app.context.summarize import Summary

    class Echo:
        def summarize(self, messages, target, count):
            return Summary(text="s", summarizer="test", cost={})

    state = session(0)
    for i, text in enumerate(["We decided to pin node 20.11.", "We decided to keep the v1 API."]):
        state = append(state, "user", text, float(i + 1))
    state = d.apply(state, d.CONTEXT_FACTS_EXTRACTED,
                    extract_pending(state, pending_messages(state)[:1], count_text, 5.0))
    plan = d.CompactionPlan(agent_id=AGENT, segment_id="seg-1", seqs=(2, 3), from_seq=2, to_seq=3,
                            tokens_before=0, span_tokens=0, target_tokens=0, high_watermark=0.5,
                            low_watermark=0.3, tokens_per_minute=0.0, summary_target_tokens=16)
    data = compact(state, plan, Echo(), count_text, 6.0)
    assert data["scanned_seqs"] == [3] and [f["source_seq"] for f in data["facts"]] == [3]
    state = d.apply(state, d.CONTEXT_COMPACTED, data)
    assert sorted(f.text for f in state.live_facts) == ["We decided to keep the v1 API.",
                                                        "We decided to pin node 20.11."]
    assert state.unextracted == ()

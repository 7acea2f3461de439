"""Managed context's pure part: which messages are new, and a verbatim tail that never
splits a tool call from its results (app/gateway/managed_wire.py)."""
from __future__ import annotations

from app.gateway.managed_wire import ANTHROPIC_SHAPE, OPENAI_SHAPE, new_from, recent_window
from tests.tool_pairs import paired_openai


def k(*texts: str) -> list[tuple[str, str]]:
    return [("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]


def test_a_whole_resend_appends_only_its_new_tail():
    held = k("a", "b", "c", "d")
    assert new_from(held, k("a", "b", "c", "d", "e", "f")) == 4
    assert new_from([], k("a", "b")) == 0
    assert new_from(held, k("a", "b", "c", "d")) == 4   # nothing new


def test_a_window_of_the_history_appends_only_its_new_tail():
    held = k("a", "b", "c", "d", "e", "f")
    sent = k("a", "b", "c", "d", "e", "f", "g", "h")[4:]   # the client keeps its last messages
    assert new_from(held, sent) == 2


def test_a_repeated_message_is_appended_again():
    held = [("user", "ok"), ("assistant", "done"), ("user", "ok"), ("assistant", "done")]
    sent = held + [("user", "ok")]
    assert new_from(held, sent) == 4


def test_an_edited_or_regenerated_history_does_not_re_append_what_is_held():
    held = k("a", "b", "c", "d", "e", "f")
    edited = k("a", "B!", "c", "d", "e", "f", "g")      # an old message edited, one new
    assert new_from(held, edited) == 6
    regenerated = k("a", "b", "c", "d", "e")            # the last answer dropped, to be asked again
    assert new_from(held, regenerated) == 5
    other = [("user", "something else entirely")]
    assert new_from(held, other) == 0


def _openai_conversation(steps: int) -> list[dict]:
    turns: list[dict] = [{"role": "user", "content": "start the task"}]
    for i in range(steps):
        turns.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}a", "type": "function", "function": {"name": "look", "arguments": "{}"}},
            {"id": f"call_{i}b", "type": "function", "function": {"name": "read", "arguments": "{}"}}]})
        turns.append({"role": "tool", "tool_call_id": f"call_{i}a", "content": f"result {i}a"})
        turns.append({"role": "tool", "tool_call_id": f"call_{i}b", "content": f"result {i}b"})
    return turns


def test_the_tail_keeps_tool_calls_with_their_results():
    turns = _openai_conversation(20)
    costs = [10] * len(turns)
    for limit in range(5, 200, 7):
        window = recent_window(OPENAI_SHAPE, turns, costs, 1000, limit)
        kept = [turns[i] for i in window.indices]
        assert paired_openai(kept)
        assert kept[0]["role"] == "user"        # the turn's opening message comes along
        assert window.tokens == 10 * len(kept)


def test_an_anthropic_tail_starts_with_the_user_and_keeps_pairs():
    turns: list[dict] = [{"role": "user", "content": "start"}]
    for i in range(10):
        turns.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "x",
                                                        "input": {}}]})
        turns.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                                   "content": "r"}]})
    costs = [10] * len(turns)
    window = recent_window(ANTHROPIC_SHAPE, turns, costs, 45, 40)   # no room for the opener
    kept = [turns[i] for i in window.indices]
    assert window.placeholder and kept[0]["role"] == "assistant" and len(kept) % 2 == 0
    window = recent_window(ANTHROPIC_SHAPE, turns, costs, 1000, 40)
    assert turns[window.indices[0]]["content"] == "start" and not window.placeholder


def test_keys_carry_tool_ids():
    a = OPENAI_SHAPE.key({"role": "tool", "tool_call_id": "call_1", "content": "ok"})
    b = OPENAI_SHAPE.key({"role": "tool", "tool_call_id": "call_2", "content": "ok"})
    assert a != b and a[0] == "tool"
    call = ANTHROPIC_SHAPE.key({"role": "assistant", "content": [
        {"type": "text", "text": "let me look"},
        {"type": "tool_use", "id": "tu_1", "name": "grep", "input": {"q": 1}}]})
    assert "tu_1" in call[1] and "grep" in call[1] and call[1].startswith("let me look")


def test_a_responses_tail_keeps_reasoning_and_parallel_calls_with_their_outputs():
    from app.gateway.managed_wire import RESPONSES_SHAPE
    items: list[dict] = [{"type": "message", "role": "user", "content": "go"}]
    for i in range(6):
        items += [{"type": "reasoning", "id": f"rs_{i}", "summary": []},
                  {"type": "function_call", "call_id": f"a{i}", "name": "x", "arguments": "{}"},
                  {"type": "function_call", "call_id": f"b{i}", "name": "y", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": f"a{i}", "output": "1"},
                  {"type": "function_call_output", "call_id": f"b{i}", "output": "2"}]
    units = RESPONSES_SHAPE.units(items)
    assert units[0] == [0] and all(len(u) == 5 and items[u[0]]["type"] == "reasoning" for u in units[1:])
    window = recent_window(RESPONSES_SHAPE, items, [10] * len(items), 1000, 120)
    assert [items[i]["type"] for i in window.indices][:2] == ["message", "reasoning"]
    assert RESPONSES_SHAPE.key(items[1]) == ("assistant", "")          # reasoning is not kept
    assert RESPONSES_SHAPE.key(items[4]) == ("tool", "[result of tool call a0] 1")

"""Whether a message list keeps every tool call with its results (OpenAI chat wire): what
managed context promises of any prompt it assembles or tail it keeps."""
from __future__ import annotations


def paired_openai(messages: list[dict]) -> bool:
    called: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        called |= {c["id"] for c in m.get("tool_calls") or ()}
        if m["role"] == "tool":
            if m["tool_call_id"] not in called:
                return False
            answered.add(m["tool_call_id"])
    return called == answered

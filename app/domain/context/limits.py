"""The documented limits of context requests, checked before anything is recorded.

Each broken limit raises ContextLimitError naming it, so the API can answer with a clear
error code and the log never holds a message, append or budget outside these bounds.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ROLES = ("system", "user", "assistant", "tool")

# 100k characters is ~25k tokens: bigger than any single turn an agent should keep in
# context (that is a file dump, which belongs in a tool's store), and it bounds the CPU a
# single request can spend in the tokenizer.
MAX_MESSAGE_CHARS = 100_000
# An append is one agent step (a turn's messages plus tool results); 100 is far above real
# steps and keeps one request's event batch small.
MAX_MESSAGES_PER_APPEND = 100
# Below 256 tokens even a system prompt and one message do not fit; above 2^20 no model
# accepts the view (the largest windows today are ~1M tokens).
MIN_BUDGET_TOKENS = 256
MAX_BUDGET_TOKENS = 1_048_576


class ContextLimitError(ValueError):
    """A request broke a documented limit; ``limit`` names it for API error codes."""

    def __init__(self, limit: str, value: Any, bound: Any, message: str) -> None:
        super().__init__(message)
        self.limit, self.value, self.bound = limit, value, bound


def validate_message(role: str, content: str) -> None:
    if "\x00" in content:
        raise ContextLimitError("content", 0, (0, 0), "content may not contain NUL characters")
    if role not in ROLES:
        raise ContextLimitError("role", role, ROLES,
                                f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not isinstance(content, str):
        raise ContextLimitError("content", type(content).__name__, "str", "content must be a string")
    if len(content) > MAX_MESSAGE_CHARS:
        raise ContextLimitError(
            "message_chars", len(content), MAX_MESSAGE_CHARS,
            f"message has {len(content)} characters; the limit is {MAX_MESSAGE_CHARS} "
            "(store large tool outputs elsewhere and append a reference)")


def validate_append(messages: Sequence[tuple[str, str]]) -> None:
    """Checks one append request: 1..MAX_MESSAGES_PER_APPEND messages, each valid."""
    if len(messages) == 0:
        raise ContextLimitError("messages_per_append", 0, 1, "an append needs at least one message")
    if len(messages) > MAX_MESSAGES_PER_APPEND:
        raise ContextLimitError(
            "messages_per_append", len(messages), MAX_MESSAGES_PER_APPEND,
            f"{len(messages)} messages in one append; the limit is {MAX_MESSAGES_PER_APPEND}")
    for role, content in messages:
        validate_message(role, content)


def validate_budget(budget_tokens: int) -> None:
    if not isinstance(budget_tokens, int) or isinstance(budget_tokens, bool):
        raise ContextLimitError("budget_tokens", budget_tokens, "int", "budgetTokens must be an integer")
    if not MIN_BUDGET_TOKENS <= budget_tokens <= MAX_BUDGET_TOKENS:
        raise ContextLimitError(
            "budget_tokens", budget_tokens, (MIN_BUDGET_TOKENS, MAX_BUDGET_TOKENS),
            f"budgetTokens must be between {MIN_BUDGET_TOKENS} and {MAX_BUDGET_TOKENS}, "
            f"got {budget_tokens}")

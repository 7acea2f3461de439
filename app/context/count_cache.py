"""Token counts of view items, remembered between views.

A view with a query tries every ranked message (stamped with its time) against the budget,
and counting one with tiktoken costs ~50 us: at 30k tokens of history that is ~25 ms of a
view, the same counts every time. The count of a given (encoding, role, text) never
changes, so they are kept here, least recently used out first, bounded by the characters
the keys hold (a key keeps its text alive).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from .tokens import count_message

DEFAULT_MAX_CHARS = 64 * 1024 * 1024


class CountCache:
    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS,
                 count: Callable[[str, str, str], int] = count_message) -> None:
        self.max_chars = max_chars
        self._count = count
        self._entries: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()   # views may count from the loop and from threads
        self.hits = self.misses = 0

    def counter(self, encoding: str) -> Callable[[str, str], int]:
        """A ``count_message(role, content)`` for ``encoding`` that remembers."""
        return lambda role, content: self.count(role, content, encoding)

    def count(self, role: str, content: str, encoding: str) -> int:
        key = (encoding, role, content)
        with self._lock:
            tokens = self._entries.get(key)
            if tokens is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return tokens
        tokens = self._count(role, content, encoding)
        size = len(content) + len(role)
        with self._lock:
            self.misses += 1
            if size > self.max_chars or key in self._entries:
                return tokens
            self._entries[key] = tokens
            self._chars += size
            while self._chars > self.max_chars:
                (_, old_role, old_content), _ = self._entries.popitem(last=False)
                self._chars -= len(old_content) + len(old_role)
        return tokens

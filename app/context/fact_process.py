"""Append-time key-fact extraction in a child process of its own, at the background
model's lower CPU priority (app.context.child_process).

Why a process: extraction is pure-Python regex work, and an agent appending hostile
messages at the API's size limit makes it about a second of CPU a message. On a thread of
the server it held the server's interpreter in slices for that long, and every append,
view and grant the event loop served meanwhile waited for the GIL as well as for a core.
In a child it shares no interpreter with the request path, and the child's ``nice`` makes
the kernel serve requests first.

Why not the background model's process: that one runs indexing batches and whole
compactions (up to seconds each) one at a time, and an append's facts would wait behind
them; an ordinary message's extraction takes under a millisecond. Here the only queue is
the service's round-robin of agents (app.context.service), one bounded call at a time
(app.context.append_facts), so a flood from one agent delays another's facts by at most
one call.

A call sends the agent's id, its live facts (what supersession is judged against) and
the messages to scan; the child counts the facts' tokens with the pool's tokenizer, as
the server would, and answers the event's data, extractor version included.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.domain.context import AgentContext, ContextMessage, KeyFact

from .child_process import ChildProcess, background_nice, start_child

WARM_ENCODING = "cl100k_base"   # the default pool tokenizer: loaded before the first call needs it


def _extract_in_child(agent_id: str, live_facts: Sequence[KeyFact], messages: Sequence[ContextMessage],
                      encoding: str, now: float, budget_s: float) -> dict[str, Any] | None:
    from .append_facts import extract_span
    from .tokens import count_text
    return extract_span(agent_id, live_facts, messages, lambda text: count_text(text, encoding), now, budget_s)


def _warm_in_child(encoding: str) -> str:
    """Load what a first call would (the extractor, its version's digest, the tokenizer's
    tables) and answer the version."""
    from .append_facts import extractor_version
    from .tokens import count_text
    count_text("warm", encoding)
    return extractor_version()


def _start_fact_child(nice: int) -> None:
    """Load the extractor and the default tokenizer's tables at the server's priority, then
    lower it. Loading them is a second of CPU once; at nice 10 on a busy machine it took
    seconds of wall time (5 s at a load average of 8 on 2 cores), and the first appends'
    facts waited that long."""
    _warm_in_child(WARM_ENCODING)
    start_child(nice)


class FactProcess(ChildProcess):
    """Append-time extraction (``append_facts.extract_pending``) run in the child."""

    def __init__(self, nice: int | None = None) -> None:
        super().__init__(background_nice() if nice is None else nice, _start_fact_child)

    def extract(self, state: AgentContext, messages: Sequence[ContextMessage], encoding: str, now: float,
                budget_s: float) -> dict[str, Any] | None:
        """ContextFactsExtracted data for ``messages`` of ``state`` (see extract_pending)."""
        if not messages:
            return None
        return self.call(_extract_in_child, state.agent_id, state.live_facts, list(messages), encoding, now,
                         budget_s)

    def warm(self, encoding: str = WARM_ENCODING) -> str:
        """Start the child and load the extractor there; its extractor version."""
        return self.call(_warm_in_child, encoding)

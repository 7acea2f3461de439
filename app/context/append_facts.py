"""Key facts at append time: the data of a ContextFactsExtracted event for the messages of
an agent still pending extraction.

The extractor (app.context.facts, through the compactor's ``scan_span``) is pure regex
work, ~0.5 ms for an ordinary message and up to about a second for a hostile one at the
API's size limit. The service runs it in a process of its own (app.context.fact_process),
never in the server's: in a thread of the server, an agent appending such messages held
the interpreter in slices for as long, and every append and view served meanwhile waited
for it.

Each call is bounded: it scans messages in order until ``APPEND_EXTRACTION_BUDGET_S`` of
CPU time is spent, and at most ``MAX_MESSAGES_PER_EVENT`` of them. Unlike a compaction,
it never gives a message up: what it did not reach stays pending and is the next call's.
The first message is always scanned, so a call takes at most the budget plus one message,
and one message at most what the API's size limit allows.

The event records the facts, not how to find them again: replay folds what was recorded,
and ``extractor_version`` names the code that found them, for readers of the log.
"""
from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Sequence
from functools import cache
from typing import Any

from app.domain.context import AgentContext, ContextMessage, KeyFact

from .compactor import TokenCounter, extraction_deadline, scan_span

# Small batches keep each event (and the agent's lock while it is recorded) small; a
# backlog takes several turns of the worker, one agent after another.
MAX_MESSAGES_PER_EVENT = 32
# The CPU time of one call: one process extracts for every agent in turn, so this (plus
# one message) is the most one agent's backlog delays another's facts a turn. A batch of
# ordinary messages takes a few milliseconds and is never cut; a backlog of hostile ones
# goes a message or so a turn.
APPEND_EXTRACTION_BUDGET_S = 0.25


@cache
def extractor_version() -> str:
    """The extractor's named version (facts.EXTRACTOR_VERSION, what its benchmark reports)
    and a digest of its source (its patterns and their salience scoring): the name for
    readers of the log, the digest because an edit that forgot to bump the name still
    extracts other facts. Two servers that record the same version extract the same facts."""
    from . import compactor, facts, salience
    digest = hashlib.sha256()
    for module in (facts, salience, compactor):
        digest.update(inspect.getsource(module).encode("utf-8"))
    return f"{facts.EXTRACTOR_VERSION}+{digest.hexdigest()[:12]}"


def pending_messages(state: AgentContext, limit: int = MAX_MESSAGES_PER_EVENT) -> list[ContextMessage]:
    """The oldest ``limit`` messages pending extraction, hot or cold, in order."""
    wanted = set(state.unextracted[:limit])
    if not wanted:
        return []
    found = [m for m in state.hot if m.seq in wanted]
    if len(found) < len(wanted):
        found += [m for m in state.cold.messages if m.seq in wanted]
    return sorted(found, key=lambda m: m.seq)


def extract_pending(state: AgentContext, messages: Sequence[ContextMessage], count: TokenCounter,
                    now: float, budget_s: float = APPEND_EXTRACTION_BUDGET_S) -> dict[str, Any] | None:
    """ContextFactsExtracted data for the first of ``messages`` that ``budget_s`` of CPU
    time lets it scan (at least one), superseding ``state``'s live facts as a compaction
    would; None when there is nothing to scan."""
    return extract_span(state.agent_id, state.live_facts, messages, count, now, budget_s)


def extract_span(agent_id: str, live_facts: Sequence[KeyFact], messages: Sequence[ContextMessage],
                 count: TokenCounter, now: float,
                 budget_s: float = APPEND_EXTRACTION_BUDGET_S) -> dict[str, Any] | None:
    """``extract_pending`` on what it reads of the agent's state: its id and live facts
    (all a call sends to the fact process)."""
    if not messages:
        return None
    started = time.thread_time()
    facts, superseded, not_scanned = scan_span(live_facts, messages, count, extraction_deadline(budget_s))
    scanned = list(messages[:len(messages) - not_scanned])
    return {"agent_id": agent_id, "seqs": [m.seq for m in scanned], "facts": facts,
            "superseded": superseded, "extractor": extractor_version(), "at": now,
            "cpu_seconds": round(time.thread_time() - started, 6)}

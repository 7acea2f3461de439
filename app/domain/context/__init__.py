"""Per-agent tiered context: state, events, and the pure policy around them.

Tiers
-----
- hot:  recent messages, verbatim (``AgentContext.hot``). Pinned messages (system prompts,
        standing instructions) live here forever: they are never compacted.
- warm: compacted segments (a summary of a span) and the key facts extracted from it
        (``warm_segments``, ``facts``). A superseded fact stays, marked ``superseded_by``.
- cold: the original messages of every compacted span, and those messages cut into
        ~200-token chunks for semantic search (``cold``). Nothing is ever deleted:
        compaction only moves a span from hot to warm (its summary) and cold (its originals).

Hibernation releases all three tiers from memory. The agent's context stream in the log
is their durable copy (the fold of its ContextAppended and ContextCompacted events is the
context, whatever hibernated and woke in between), so a hibernated agent keeps only a
``ResumePoint``: where its stream ended, a digest of its working set, and the totals its
stats report. Waking folds the stream again (the shell reads it) and ``restore`` checks
the result against the resume point before it replaces the parked state.

Purity: no I/O, no clock, no model. Time enters as values (``at`` in events, ``now`` as an
argument) and token counts enter as numbers recorded in events or through a counter passed
in, so a projection rebuilt from the log is byte-identical to the live one
(``state_hash``), and the policy can be property-tested.

Modules
-------
- limits:      the documented bounds of a request (message size, append size, budget).
- state:       AgentContext and its tiers, and their canonical serialisation and hash.
- fold:        ``apply`` (one event into the state) and ``restore`` (a parked context back);
               what "pending extraction" means (``AgentContext.unextracted``).
- compaction:  when and what to compact (the plan; app.context.compactor carries it out).
- hibernation: when an idle context is parked.
- view:        ``assemble_view``, the context an agent reads within a token budget.
- whole:       ``whole_history_view``, every message verbatim when they all fit.
- stats:       the ContextStats of the public contract.
The event names are in app.domain.events with all the others. This package re-exports
the public names callers use, so ``from app.domain import context as ctx`` reaches them;
a private helper is imported from the module that defines it.
"""
from __future__ import annotations

from app.domain.events import (
    CONTEXT_APPENDED,
    CONTEXT_COMPACTED,
    CONTEXT_EVENTS,
    CONTEXT_FACTS_EXTRACTED,
)

from .compaction import (
                         ADAPTIVE,
                         FIXED,
                         NEVER,
                         CompactionPlan,
                         CompactionSettings,
                         effective_watermarks,
                         plan_compaction,
)
from .fold import apply, restore
from .hibernation import DEFAULT_IDLE_SECONDS, should_hibernate
from .limits import (
                         MAX_BUDGET_TOKENS,
                         MAX_MESSAGE_CHARS,
                         MAX_MESSAGES_PER_APPEND,
                         MIN_BUDGET_TOKENS,
                         ROLES,
                         ContextLimitError,
                         validate_append,
                         validate_budget,
                         validate_message,
)
from .state import (
                         COLD,
                         FACT_KIND_PRIORITY,
                         GROWTH_WINDOW,
                         HOT,
                         WARM,
                         AgentContext,
                         ColdArchive,
                         ColdChunk,
                         ContextMessage,
                         ContextStateError,
                         GrowthStats,
                         KeyFact,
                         ResumePoint,
                         WarmSegment,
                         canonical_json,
                         new_context,
                         resume_point_for,
                         state_from_dict,
                         state_hash,
                         state_to_dict,
)
from .stats import context_stats
from .view import (
                         FACTS_HEADER,
                         NEAR_DUPLICATE_JACCARD,
                         REPLY_PRIMING_TOKENS,
                         ContextView,
                         ViewItem,
                         ViewSettings,
                         assemble_view,
                         fact_priority,
)
from .whole import whole_history_view

__all__ = [
    "ADAPTIVE", "COLD", "CONTEXT_APPENDED", "CONTEXT_COMPACTED", "CONTEXT_EVENTS", "CONTEXT_FACTS_EXTRACTED",
    "DEFAULT_IDLE_SECONDS",
    "FACTS_HEADER", "FACT_KIND_PRIORITY", "FIXED", "GROWTH_WINDOW", "HOT", "MAX_BUDGET_TOKENS",
    "MAX_MESSAGES_PER_APPEND", "MAX_MESSAGE_CHARS", "MIN_BUDGET_TOKENS", "NEAR_DUPLICATE_JACCARD", "NEVER",
    "REPLY_PRIMING_TOKENS", "ROLES", "WARM", "AgentContext", "ColdArchive", "ColdChunk", "CompactionPlan",
    "CompactionSettings", "ContextLimitError", "ContextMessage", "ContextStateError", "ContextView",
    "GrowthStats", "KeyFact", "ResumePoint", "ViewItem", "ViewSettings", "WarmSegment", "apply",
    "assemble_view", "whole_history_view", "canonical_json", "context_stats", "effective_watermarks", "fact_priority",
    "new_context", "plan_compaction", "restore", "resume_point_for", "should_hibernate", "state_from_dict",
    "state_hash", "state_to_dict", "validate_append", "validate_budget", "validate_message",
]

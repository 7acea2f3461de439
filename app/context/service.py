"""The context lifecycle shell: append, compact, assemble views, index cold chunks.

Rules live in app/domain/context/ (pure); this module adds the event store, the
tokenizer, the embedding model and the summarizer around them.

- append: each message is a `ContextAppended` event in `context-<agent>` (expected
  version, so two writers cannot interleave sequence numbers). It only records: an append
  that takes hot tokens past the high watermark hands the agent to the compaction worker,
  which summarises in the background model's process (with an LLM summarizer, in a thread)
  and appends `ContextCompacted` when done. Views stay correct meanwhile: hot still holds
  every message, and the view never exceeds its budget.
- facts: each append also hands the agent to the fact worker, which extracts the key
  facts of its new messages in a process of its own (app.context.fact_process; agents
  round-robin, one bounded call each a turn, app.context.append_facts) and records them
  as `ContextFactsExtracted`, so a query-less view has the facts of every message it
  leaves out, compacted or not; a message still pending extraction is shown itself.
- view: without a query, the tiered view (pinned, facts, warm, hot, cold chunks by
  recency). With a query, relevance first: messages of every tier ranked by RRF of dense
  (MiniLM) and BM25 rankings (app.context.retrieval), each stamped with its time.
- index: a background task embeds new messages and stores them as float32 bytes, off the
  request path (app.context.indexer); a message not yet embedded ranks by BM25 alone.

Time comes from the injected ``clock``, read once per operation: an append's events share
one ``now``, and so do a compaction's plan, summary and event.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from app.auth import Principal, require, require_self_or_operator
from app.domain import context as ctx
from app.domain import events as ev
from app.domain.streams import context_stream
from app.errors import BadInput, Conflict, Forbidden
from app.eventstore.model import ConcurrencyError, NewEvent, RecordedEvent
from app.eventstore.store import EventStore
from app.projections.context_archive import archived_context
from app.projections.documents import AgentView
from app.service import Service
from app.tasks import cancel_all

from .append_facts import APPEND_EXTRACTION_BUDGET_S, pending_messages
from .count_cache import CountCache
from .embedding_lane import EmbeddingLane
from .embeddings_store import EmbeddingStore
from .fact_process import FactProcess
from .indexer import MessageIndexer, messages_of
from .model_process import ModelProcess
from .retrieval import hybrid_ranking
from .tokens import count_messages, count_text, encoding_ready

if TYPE_CHECKING:   # for the annotations only: both load lazily (see below)
    from .embedder import MiniLMEmbedder
    from .summarize import OpenAICompatibleSummarizer

log = logging.getLogger(__name__)

# How often the fact worker looks for messages pending extraction that no append of this
# process handed over, and how long a message must have been pending to be taken then.
FACTS_SWEEP_SECONDS = 5.0


class ContextService:
    def __init__(self, service: Service, *, compaction: ctx.CompactionSettings | None = None,
                 hibernate_idle_seconds: float = ctx.DEFAULT_IDLE_SECONDS,
                 clock: Callable[[], float] = time.time, embeddings: EmbeddingStore | None = None):
        self.service = service
        # PostgreSQL's: embeddings and archives live in its tables (no in-memory context service)
        self.store = cast(EventStore, service.store)
        self.projector = service.projector
        self.clock = clock
        self.embeddings = embeddings or EmbeddingStore(self.store.pool)
        self.compaction = compaction or ctx.CompactionSettings()
        self.hibernate_idle_seconds = hibernate_idle_seconds
        self._embedder: MiniLMEmbedder | None = None
        from .embedder import embedding_threads
        embedding_threads()  # a bad AGENTRM_EMBEDDING_THREADS stops the start, with its reason
        # (and ModelProcess reads AGENTRM_EMBEDDING_NICE the same way, below)
        self._llm: OpenAICompatibleSummarizer | None | bool = False   # not read yet (see _llm_summarizer)
        self._tasks: list[asyncio.Task] = []
        self._index_wake = asyncio.Event()
        self._compact_wake = asyncio.Event()
        # Agents whose plan is not empty, in the order they became pending (a dict: an
        # ordered set). The worker serves them round-robin, see run_compactions.
        self._compact_pending: dict[str, None] = {}
        self._compacting = asyncio.Lock()
        # Agents with messages pending extraction, served round-robin like compactions,
        # one bounded batch per turn, in a process of their own (never the server's).
        self._facts_pending: dict[str, None] = {}
        self._facts_wake = asyncio.Event()
        self._extracting = asyncio.Lock()
        self.fact_process = FactProcess()
        self.fact_budget_s = APPEND_EXTRACTION_BUDGET_S
        # One lane to the model for queries and indexing: queries on the in-process model,
        # background work (indexing, whole compactions) in a child process at a lower CPU
        # priority.
        self.background_model = ModelProcess()
        self.lane = EmbeddingLane(lambda: self.embedder, background_of=lambda: self.background_model)
        self.indexer = MessageIndexer(self.embeddings, lane=self.lane)
        self._index_dirty: set[str] = set()   # agents appended to since the last pass
        self.counts = CountCache()
        self.view_settings = ctx.ViewSettings()

    # -- collaborators (loaded lazily: the model costs seconds and memory) ---------------
    def _llm_summarizer(self):
        """The LLM summarizer the environment configures, or None (the extractive one, in
        the background model's process). Read once."""
        if self._llm is False:
            from .summarize import llm_summarizer_from_env
            self._llm = llm_summarizer_from_env()
        return self._llm

    @property
    def embedder(self):
        if self._embedder is None:
            from .embedder import default_embedder
            self._embedder = default_embedder()
        return self._embedder

    def _encoding(self, agent: AgentView) -> str:
        pool = self.service.model.pools.get(agent["pool"])
        return pool.settings.tokenizer if pool else "cl100k_base"

    def _target(self, principal: Principal | None, agent_id: str | None) -> AgentView:
        principal = require(principal)
        if agent_id is None:
            if principal.is_operator:
                raise BadInput("agentId is required for the operator")
            agent_id = cast(str, principal.agent_id)   # not the operator: an agent
        require_self_or_operator(principal, agent_id)
        return self.service.agent_view(agent_id)

    def state(self, agent_id: str) -> ctx.AgentContext:
        return self.service.model.context_of(agent_id)

    # -- commands --------------------------------------------------------------------------
    async def append(self, principal: Principal | None, messages: Sequence[tuple[str, str, bool]],
                     agent_id: str | None = None) -> dict:
        agent = await self.service.fresh(self._target, principal, agent_id)
        if not messages:
            raise BadInput("at least one message is required")
        try:
            ctx.validate_append([(role, content) for role, content, _pinned in messages])
        except ctx.ContextLimitError as exc:
            raise BadInput(str(exc)) from None
        agent_id = agent["agent_id"]
        encoding = self._encoding(agent)
        # Counted before the agent's lock, and off the loop when long (count_messages).
        tokens = await count_messages([(role, content) for role, content, _pinned in messages], encoding)
        async with self.service.agent_lock(agent_id):
            if agent["hibernated"]:
                await self.service.set_hibernated_locked(principal, agent_id, False, {"reason": "context appended"})
            now = self.clock()  # under the lock, so one agent's appends carry increasing times
            for _attempt in range(3):
                state = self.state(agent_id)
                events = [NewEvent(context_stream(agent_id), ctx.CONTEXT_APPENDED,
                                   ev.ContextAppended(agent_id=agent_id, seq=state.last_seq + 1 + i, role=role,
                                                      content=content, pinned=bool(pinned),
                                                      tokens=tokens[i],
                                                      at=now, facts_at_append=True).to_dict(),
                                   {"actor": require(principal).actor, "correlation": agent_id})
                          for i, (role, content, pinned) in enumerate(messages)]
                try:
                    await self._record(events, {context_stream(agent_id): self._version(state)})
                    break
                except ConcurrencyError:
                    await self.projector.catch_up()  # another worker appended: renumber and retry
            else:
                raise Conflict("the context changed concurrently too often; try again")
        self._index_dirty.add(agent_id)
        self._index_wake.set()
        self._facts_pending.setdefault(agent_id, None)
        self._facts_wake.set()
        if ctx.plan_compaction(self.state(agent_id), self._budget(agent), self.compaction, now) is not None:
            self._compact_pending.setdefault(agent_id, None)  # a pending agent keeps its place
            self._compact_wake.set()
        return ctx.context_stats(self.state(agent_id))

    @staticmethod
    def _budget(agent: AgentView) -> int:
        return agent.get("context_budget_tokens") or 8192

    async def run_compactions(self) -> int:
        """Compact every agent handed over by an append until its plan is empty; returns
        how many compactions were recorded. The background worker calls it when woken; a
        caller that needs compaction settled (a test, a shutdown) awaits it too, and then
        also waits for any pass in flight.

        Round-robin: one compaction per agent per turn, agents in the order they became
        pending, and an agent whose plan is still not empty goes to the back. The
        background model's process runs one compaction at a time for every agent, so an
        agent that keeps appending large messages must not hold it for compaction after
        compaction: any agent waits for at most one compaction of each other pending agent
        (plus the one in progress)."""
        done = 0
        async with self._compacting:
            while self._compact_pending:
                agent_id = next(iter(self._compact_pending))
                recorded = await self._compact_once(agent_id)
                # Out of the queue (an append during the compaction may have queued it
                # again: this turn was its own), and back at its end if there is more to do.
                # One that recorded nothing (another compaction came first) waits for its
                # next append, so a compaction that cannot be recorded is not retried for ever.
                self._compact_pending.pop(agent_id, None)
                if recorded:
                    done += 1
                    if self._plan_pending(agent_id):
                        self._compact_pending[agent_id] = None
        return done

    async def _compact_once(self, agent_id: str) -> bool:
        """One background compaction of ``agent_id`` if its plan says so; whether one was
        recorded."""
        try:
            agent = self.service.agent_view(agent_id)
        except Exception:
            return False  # the agent is gone
        if agent["hibernated"]:
            return False
        return await self._maybe_compact(agent, self.compaction, None, self.clock(), lock=True) is not None

    def _plan_pending(self, agent_id: str) -> bool:
        """Whether ``agent_id`` (awake, still known) has a compaction to do now."""
        try:
            agent = self.service.agent_view(agent_id)
        except Exception:
            return False
        return not agent["hibernated"] and ctx.plan_compaction(
            self.state(agent_id), self._budget(agent), self.compaction, self.clock()) is not None

    async def _compact_loop(self) -> None:
        while True:
            await self._compact_wake.wait()
            self._compact_wake.clear()
            try:
                await self.run_compactions()
            except Exception as exc:
                log.warning("context compaction: %s", exc)

    async def compact(self, principal: Principal | None, agent_id: str | None = None) -> dict:
        """Compact now, whatever the watermarks say (all but the latest exchange)."""
        agent = await self.service.fresh(self._target, principal, agent_id)
        forced = ctx.CompactionSettings(mode=ctx.FIXED, high_watermark=2e-6, low_watermark=1e-6,
                                        max_high_shift=0.0, max_low_shift=0.0)
        async with self.service.agent_lock(agent["agent_id"]):
            if agent["hibernated"]:
                raise Conflict("agent is hibernated; wake it first")
            result = await self._maybe_compact(agent, forced, principal, self.clock(), lock=False)
        if result is None:
            state = self.state(agent["agent_id"])
            stats = ctx.context_stats(state)
            resident = stats["hot_tokens"] + stats["warm_tokens"]
            return {"agent_id": agent["agent_id"], "compacted": False, "tokens_before": resident,
                    "tokens_after": resident, "key_facts_kept": len(state.live_facts), "summarizer": None}
        return result

    def _version(self, state: ctx.AgentContext) -> int:
        # The context stream holds one event per appended message, one per compaction and
        # one per fact extraction.
        return state.last_seq + state.compactions + state.fact_events - 1

    # -- key facts at append time ---------------------------------------------------------
    async def run_fact_extraction(self) -> int:
        """Extract the key facts of every message pending extraction of the agents handed
        over by appends, until none is left; how many events were recorded. Round-robin:
        one batch (app.context.append_facts) per agent per turn, and one batch at a time in
        the fact process, so an agent with a backlog delays another's facts by at most one
        batch (its CPU budget plus one message) a turn."""
        done = 0
        async with self._extracting:
            while self._facts_pending:
                agent_id = next(iter(self._facts_pending))
                self._facts_pending.pop(agent_id, None)
                recorded, more = await self._extract_once(agent_id)
                done += recorded
                if more:
                    self._facts_pending[agent_id] = None
        return done

    async def _extract_once(self, agent_id: str) -> tuple[bool, bool]:
        """One batch of ``agent_id``'s pending messages: (whether an event was recorded,
        whether messages are still pending)."""
        try:
            agent = self.service.agent_view(agent_id)
        except Exception:
            return False, False  # the agent is gone
        state = self.state(agent_id)
        if agent["hibernated"] or state.hibernated or not state.unextracted:
            return False, False  # a wake re-queues it (see start)
        # In the fact process (which counts the facts' tokens too), off the server's interpreter.
        data = await asyncio.to_thread(self.fact_process.extract, state, pending_messages(state),
                                       self._encoding(agent), self.clock(), self.fact_budget_s)
        if data is None:
            return False, False
        event = ev.ContextFactsExtracted.from_dict(data).to_dict()
        async with self.service.agent_lock(agent_id):
            current = self.state(agent_id)
            if current.hibernated:
                return False, False
            if current.facts is not state.facts:
                # A compaction recorded facts meanwhile: supersession must be judged
                # against them, so extract again (cheap) rather than record a stale event.
                return False, bool(current.unextracted)
            try:
                await self._record([NewEvent(context_stream(agent_id), ctx.CONTEXT_FACTS_EXTRACTED, event,
                                             {"actor": "context-manager", "correlation": agent_id})],
                                   {context_stream(agent_id): self._version(current)})
            except ConcurrencyError:
                await self.projector.catch_up()   # another worker wrote: try again on fresh state
                return False, True
        return True, bool(self.state(agent_id).unextracted)

    async def _facts_loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._facts_wake.wait(), FACTS_SWEEP_SECONDS)
            if not self._facts_wake.is_set():
                # No append woke it: sweep for messages pending for a while, which no
                # append of this process handed over (appended through another worker
                # that stopped, or left pending by a wake through a turn request).
                self._facts_pending.update(dict.fromkeys(
                    self.pending_extraction(older_than=self.clock() - FACTS_SWEEP_SECONDS)))
            self._facts_wake.clear()
            try:
                await self.run_fact_extraction()
            except Exception as exc:
                log.warning("context facts: %s", exc)

    def pending_extraction(self, older_than: float | None = None) -> list[str]:
        """Awake agents with messages pending extraction (after a restart, say); with
        ``older_than``, only those whose oldest pending message was appended before it."""
        out = []
        for agent_id, doc in self.service.model.agents.items():
            state = self.state(agent_id)
            if doc["hibernated"] or not state.unextracted:
                continue
            if older_than is not None:
                oldest = next((m for m in state.hot + state.cold.messages if m.seq == state.unextracted[0]), None)
                if oldest is not None and oldest.at >= older_than:
                    continue   # the worker that took the append is on it
            out.append(agent_id)
        return out

    async def _record(self, events: Sequence[NewEvent], expected: dict[str, int]) -> list[RecordedEvent]:
        """Append at the expected stream version, then wait until the projection has folded
        the events, so that the state read next (stats, the compaction plan) includes them."""
        recorded = await self.store.append(events, expected)
        await self.projector.wait_position(recorded[-1].position)
        return recorded

    async def _maybe_compact(self, agent: AgentView, settings: ctx.CompactionSettings,
                             principal: Principal | None, now: float, *, lock: bool) -> dict | None:
        """Compact if ``settings`` say so at ``now``: the plan, the summary and the event's
        ``at`` all use that one time. The compaction runs in the background model's
        process without the agent's lock (appends go on meanwhile); with ``lock`` the event
        is then recorded under it, at the stream's current version, if the planned span is
        still hot and no other compaction came first (appends after the plan do not change
        what it moves)."""
        agent_id = agent["agent_id"]
        budget = self._budget(agent)
        state = self.state(agent_id)
        plan = ctx.plan_compaction(state, budget, settings, now)
        if plan is None:
            return None
        encoding = self._encoding(agent)
        llm = self._llm_summarizer()
        if llm is None:
            # In the background model's process, not a thread of ours: see app.context.model_process.
            data = await asyncio.to_thread(self.background_model.compact, state, plan, encoding, now)
        else:
            # An LLM summarizer waits on its server: in a thread of ours, where it holds up no
            # indexing batch in the model process.
            data = await asyncio.to_thread(_compact_here, state, plan, llm, encoding, now)
        data["budget_tokens"] = budget
        event = ev.ContextCompacted.from_dict(data).to_dict()
        meta = {"actor": require(principal).actor if principal else "context-manager", "correlation": agent_id}
        guard = self.service.agent_lock(agent_id) if lock else contextlib.nullcontext()
        async with guard:
            current = self.state(agent_id)
            hot = {m.seq for m in current.hot}
            if current.hibernated or current.compactions != state.compactions or not set(plan.seqs) <= hot:
                return None  # another compaction or a hibernation came first; re-plan later
            try:
                await self._record([NewEvent(context_stream(agent_id), ctx.CONTEXT_COMPACTED, event, meta)],
                                   {context_stream(agent_id): self._version(current)})
            except ConcurrencyError:
                return None  # another worker wrote meanwhile; the next append re-plans
        return {"agent_id": agent_id, "compacted": True, "tokens_before": data["tokens_before"],
                "tokens_after": data["tokens_after"], "key_facts_kept": len(self.state(agent_id).live_facts),
                "summarizer": data.get("summarizer")}

    async def set_hibernated(self, principal: Principal | None, agent_id: str, hibernated: bool,
                             extra: dict | None = None) -> AgentView:
        """The Service's, which takes the agent's lock (the one this service's appends take).
        A parked agent's caches leave memory with its context."""
        result = await self.service.set_hibernated(principal, agent_id, hibernated, extra)
        if hibernated:
            self.indexer.forget(agent_id)
        elif self.state(agent_id).unextracted:
            self._facts_pending.setdefault(agent_id, None)   # parked before its facts were all found
            self._facts_wake.set()
        return result

    # -- views -------------------------------------------------------------------------------
    async def view(self, principal: Principal | None, agent_id: str | None, budget_tokens: int,
                   query: str | None = None) -> ctx.ContextView:
        agent = await self.service.fresh(self._target, principal, agent_id)
        try:
            ctx.validate_budget(budget_tokens)
        except ctx.ContextLimitError as exc:
            raise BadInput(str(exc)) from None
        if query is not None and len(query) > ctx.MAX_MESSAGE_CHARS:
            raise BadInput(f"query may be at most {ctx.MAX_MESSAGE_CHARS} characters")
        state, position = self.state(agent["agent_id"]), self.service.model.position
        if state.hibernated:
            # Reading is not activity: show what a wake would restore, without waking (and
            # without keeping it: the context stays out of memory).
            state = ctx.restore(state, await archived_context(self.store, state.agent_id, position))
        await encoding_ready(self._encoding(agent))
        count, now = self.counts.counter(self._encoding(agent)), self.clock()  # one read per view
        if not query:
            # everything fits: show everything, not tiers chosen for a budget that is not short
            whole = ctx.whole_history_view(state, budget_tokens, count)
            if whole is not None:
                return whole
        ranking = await self.ranking(state, query) if query else None
        return ctx.assemble_view(state, budget_tokens, None, count, now, self.view_settings, ranking=ranking)

    async def view_at(self, principal: Principal | None, agent_id: str | None, budget_tokens: int,
                      position: int) -> ctx.ContextView:
        from app.replay import context_state_at
        agent = await self.service.fresh(self._target, principal, agent_id)
        try:
            ctx.validate_budget(budget_tokens)
        except ctx.ContextLimitError as exc:
            raise BadInput(str(exc)) from None
        if position < 0:
            raise BadInput("position must be >= 0")
        state = await context_state_at(self.store, agent["agent_id"], position)
        at = state.last_activity_at
        await encoding_ready(self._encoding(agent))
        count = self.counts.counter(self._encoding(agent))
        return ctx.whole_history_view(state, budget_tokens, count) or ctx.assemble_view(
            state, budget_tokens, None, count, at)

    async def ranking(self, state: ctx.AgentContext, query: str) -> list[int]:
        """The agent's message seqs for ``query``, most relevant first (hybrid: dense over
        the vectors indexed so far, BM25 over every message)."""
        messages = messages_of(state)
        if not messages:
            return []
        vectors = await self.indexer.load(state.agent_id, newest=messages[-1].seq)
        query_vector = await self.lane.query(query) if len(vectors.seqs) else None
        lexical_cache = self.indexer.lexical
        pairs = [(m.seq, m.content) for m in messages]
        if lexical_cache.missing(state.agent_id, pairs) > 8:
            # a first view (or one after a burst): tokenizing is the costly part, off the loop
            await asyncio.to_thread(lexical_cache.tokenize_new, state.agent_id, pairs)
        lexical = lexical_cache.index_of(state.agent_id, pairs)
        ranking = hybrid_ranking(query_vector, lexical_cache.tokenize(query), [m.seq for m in messages],
                                 vectors, lexical)
        if state.hibernated or self.state(state.agent_id).hibernated:
            self.indexer.forget(state.agent_id)  # read while parked: keep nothing in memory
        return ranking

    # -- background: index cold chunks, hibernate idle agents ------------------------------
    def over_watermark(self) -> list[str]:
        """Awake agents whose hot tier is past the high watermark now: after a restart
        they would otherwise wait for their next append to be compacted."""
        out = []
        now = self.clock()
        for agent_id, doc in self.service.model.agents.items():
            state = self.state(agent_id)
            if not doc["hibernated"] and state.hot and \
                    ctx.plan_compaction(state, self._budget(doc), self.compaction, now) is not None:
                out.append(agent_id)
        return out

    async def start(self) -> None:
        self.lane.open()
        self.background_model.open()
        self.fact_process.open()
        try:
            # Started before the server takes requests: spawned on the first append instead,
            # it kept the facts of the appends of its first seconds waiting (fact-lag p99
            # 2.6 s in a first repeat against 0.25 s in the next, at a load average of 7).
            await asyncio.to_thread(self.fact_process.warm)
        except Exception as exc:   # extraction retries on the next append; views show messages meanwhile
            log.warning("context facts: the fact process did not start: %s", exc)
        self._compact_pending.update(dict.fromkeys(self.over_watermark()))
        if self._compact_pending:
            self._compact_wake.set()
        self._facts_pending.update(dict.fromkeys(self.pending_extraction()))
        if self._facts_pending:
            self._facts_wake.set()
        self._tasks = [asyncio.create_task(self._index_loop(), name="context-indexer"),
                       asyncio.create_task(self._compact_loop(), name="context-compactor"),
                       asyncio.create_task(self._facts_loop(), name="context-facts"),
                       asyncio.create_task(self._hibernate_loop(), name="context-hibernator")]

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        await asyncio.to_thread(self.close_models)

    def close_models(self) -> None:
        """Stop the lane's threads, the background model's process and the fact process (a
        compaction or an extraction still running gets a few seconds to finish; one that
        does not, fails and records nothing)."""
        self.lane.close()
        self.background_model.close()
        self.fact_process.close()

    async def index_pending(self, only_appended: bool = False) -> int:
        """Embed the awake agents' messages that have no stored vector yet, across agents
        in shared batches; how many. With ``only_appended``, just the agents this process
        appended to since the last pass (cheap at any fleet size); the periodic full pass
        finds the rest (appends through other workers, agents known from before a restart)."""
        dirty, self._index_dirty = self._index_dirty, set()
        contexts = self.service.model.contexts
        states = [contexts[a] for a in sorted(dirty) if a in contexts] if only_appended \
            else list(contexts.values())
        return await self.indexer.index_many(self.indexer.pending(states))

    async def _index_loop(self) -> None:
        full_every, last_full = 5.0, 0.0
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._index_wake.wait(), full_every)
            self._index_wake.clear()
            full = time.monotonic() - last_full >= full_every
            try:
                await self.index_pending(only_appended=not full)
            except Exception as exc:
                log.warning("context indexer: %s", exc)
            if full:
                last_full = time.monotonic()

    async def hibernate_idle(self, now: float | None = None) -> list[str]:
        from app.auth import OPERATOR
        now = self.clock() if now is None else now
        parked = []
        for agent_id, doc in list(self.service.model.agents.items()):
            state = self.state(agent_id)
            idle_since = max(state.last_activity_at, doc.get("last_active_at") or 0.0)
            if doc["hibernated"] or now - idle_since < self.hibernate_idle_seconds:
                continue
            if any(t.agent_id == agent_id for p in self.service.model.pools.values() for t in p.turns.values()):
                continue  # a queued or running turn is activity
            with contextlib.suppress(Conflict, Forbidden):
                await self.set_hibernated(OPERATOR, agent_id, True, {"reason": "idle"})
                parked.append(agent_id)
                self.indexer.forget(agent_id)
        return parked

    async def _hibernate_loop(self) -> None:
        while True:
            await asyncio.sleep(min(30.0, max(1.0, self.hibernate_idle_seconds / 4)))
            try:
                await self.hibernate_idle()
            except Exception as exc:
                log.warning("hibernator: %s", exc)


def _compact_here(state, plan, summarizer, encoding: str, now: float) -> dict:
    from .compactor import FACT_EXTRACTION_BUDGET_S, compact
    return compact(state, plan, summarizer, lambda text: count_text(text, encoding), now,
                   extraction_budget_s=FACT_EXTRACTION_BUDGET_S)

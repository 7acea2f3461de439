"""The core read model: pools (with their live scheduler state), agents and turns.

A pure fold over the log. Every worker keeps one in memory, caught up by reading the
log, and serves queries from it; the projection runner persists it as documents in
`read_models` with a forward-only checkpoint. `rebuild` (fold from position 0) must give
exactly the persisted documents: that is what replayCheck compares.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from app.domain import context as ctx
from app.domain import events as ev
from app.domain import turn_history
from app.domain.apply import fold_pool
from app.domain.state import PoolState
from app.domain.streams import category_of, id_of
from app.eventstore.model import RecordedEvent

from .documents import AgentDoc, AgentView, PoolDoc, RequestIdKey, TurnDoc
from .resources import ResourceModel

PROJECTIONS = ("pools", "agents", "turns", "scheduler", "context", "resources", "leases")
_RESOURCE_CATEGORIES = frozenset({"resource", "lease", "access", "resources"})

_NEEDS_CONTEXT = frozenset({ctx.CONTEXT_APPENDED, ctx.CONTEXT_COMPACTED, ev.CONTEXT_FACTS_EXTRACTED, ev.AGENT_WOKEN})

# A turn's document: these fields of its history, in this order.
TURN_DOC = ("turn_id", "agent_id", "pool", "status", "level", "lane", "estimated_tokens",
            "max_output_tokens", "streams", "requested_at", "queued_at", "granted_at",
            "lease_expires_at", "finished_at", "outcome", "reason", "prompt_tokens",
            "completion_tokens", "reserved_tokens", "version")


# Turn inputs a client may retry with a requestId, and where the turn's document keeps it:
# the first completion's and cancel's, the latest heartbeat's (a heartbeat repeats).
_IDEMPOTENT_INPUTS: dict[str, RequestIdKey] = {
    ev.COMPLETION_REPORTED: "completion_request_id", ev.CANCEL_REQUESTED: "cancel_request_id",
    ev.HEARTBEAT_SENT: "heartbeat_request_id"}


# Kept in a turn's document only when set, so the documents of turns without one (every
# turn of a log written before runs) are what they always were.
TURN_DOC_WHEN_SET = ("run_id", "holder", "model")


def turn_doc(history: turn_history.TurnHistory) -> TurnDoc:
    doc = {name: getattr(history, name) for name in TURN_DOC}
    for name in TURN_DOC_WHEN_SET:
        if getattr(history, name) is not None:
            doc[name] = getattr(history, name)
    # Built by name, so untyped. This model starts a history only from a request, which
    # the service always sends with its pool, sizes and time: TurnDoc has them as set.
    return cast(TurnDoc, doc)


def turn_from_doc(doc: TurnDoc) -> turn_history.TurnHistory:
    fields: Mapping[str, Any] = doc   # read by name
    return turn_history.TurnHistory(**{name: fields[name] for name in TURN_DOC + TURN_DOC_WHEN_SET
                                       if name in fields})


@dataclass
class CoreModel:
    position: int = 0
    pools: dict[str, PoolState] = field(default_factory=dict)
    pool_docs: dict[str, PoolDoc] = field(default_factory=dict)
    agents: dict[str, AgentDoc] = field(default_factory=dict)
    turns: dict[str, TurnDoc] = field(default_factory=dict)          # documents of `histories`
    histories: dict[str, turn_history.TurnHistory] = field(default_factory=dict)
    token_index: dict[str, str] = field(default_factory=dict)
    contexts: dict[str, ctx.AgentContext] = field(default_factory=dict)
    resources: ResourceModel = field(default_factory=ResourceModel)
    dirty: set[tuple[str, str]] = field(default_factory=set)
    # Finished turns still in memory, oldest first: turn_id -> position of its end. They
    # leave memory once their final document is persisted (evict_finished); their history
    # stays in the log and in `read_models`, where recall_turn finds it again.
    finished: dict[str, int] = field(default_factory=dict)

    # -- the fold -----------------------------------------------------------------------
    def fold(self, event: RecordedEvent) -> None:
        if event.position <= self.position:
            return
        self.position = event.position
        category = category_of(event.stream)
        if category == "pool":
            self._fold_pool(event)
        elif category == "agent":
            self._fold_agent(event)
        elif category == "turn":
            self._fold_turn_input(event)
        elif category == "context":
            self._fold_context(event.data["agent_id"], event)
        elif category in _RESOURCE_CATEGORIES:
            self.resources.fold(event.stream, event.type, event.data, self.dirty)

    def context_of(self, agent_id: str) -> ctx.AgentContext:
        return self.contexts.get(agent_id) or ctx.new_context(agent_id)

    def parked_context_needed_by(self, event: RecordedEvent) -> str | None:
        """The agent whose hibernated context must be restored from the log before
        ``event`` can be folded (a wake, or an append or compaction that an old log or a
        race put after the hibernation), else None. Mirrors the dispatch of ``fold``."""
        if event.position <= self.position or event.type not in _NEEDS_CONTEXT:
            return None
        category = category_of(event.stream)
        agent_id: Any = event.data.get("agent_id") if isinstance(event.data, dict) else None   # as logged
        if category == "agent" and (event.type != ev.AGENT_WOKEN or agent_id not in self.agents):
            return None
        if category not in ("agent", "context"):
            return None
        state = self.contexts.get(agent_id)
        return agent_id if state is not None and state.hibernated else None

    def restore_context(self, agent_id: str, archived: ctx.AgentContext) -> None:
        """Replace a parked context by its fold from the log (checked by ctx.restore)."""
        self.contexts[agent_id] = ctx.restore(self.context_of(agent_id), archived)
        self.dirty.add(("context", agent_id))

    def _fold_context(self, agent_id: str, event: RecordedEvent) -> None:
        if event.type not in ctx.CONTEXT_EVENTS:
            return
        self.contexts[agent_id] = ctx.apply(self.context_of(agent_id), event.type, event.data)
        self.dirty.add(("context", agent_id))

    def _fold_pool(self, event: RecordedEvent) -> None:
        name = id_of(event.stream)
        if event.type == ev.POOL_CREATED:
            created = ev.PoolCreated.from_dict(event.data)
            # a creation always gives a state
            self.pools[name] = cast(PoolState, fold_pool(None, created, event.version, event.position))
            self.pool_docs[name] = {"name": name, "created_at": created.at,
                                    "upstream_api_key_fingerprint": created.upstream_api_key_fingerprint}
            self.dirty.add(("pools", name))
            self.dirty.add(("scheduler", name))
            return
        state = self.pools.get(name)
        if state is None or event.position <= state.position:
            return  # not created yet, or already folded into a loaded document
        # A type that is not a decision changes no state (as apply() has it), only the version.
        decision = ev.parse(event.type, event.data) if event.type in ev.DECISIONS else None
        fold_pool(state, decision, event.version, event.position)
        self.dirty.add(("scheduler", name))
        history = self.histories.get(getattr(decision, "turn_id", None))  # type: ignore[arg-type]  # none: None
        if history is not None and isinstance(decision, turn_history.RECORD_CHANGES):
            turn_history.fold(history, decision, event.position)
            self.turns[history.turn_id].update(turn_doc(history))
            self.dirty.add(("turns", history.turn_id))
            if history.finished:
                self.finished[history.turn_id] = event.position

    def _fold_agent(self, event: RecordedEvent) -> None:
        agent_id: Any = event.data.get("agent_id")   # as logged
        if event.type == ev.AGENT_REGISTERED:
            d = ev.AgentRegistered.from_dict(event.data)
            # The service registers an agent in a pool, at a time (AgentDoc has them as set).
            self.agents[agent_id] = {
                "agent_id": agent_id, "name": d.name, "pool": cast(str, d.pool),
                "priority_class": d.priority_class, "token_hash": d.token_hash,
                "context_budget_tokens": d.context_budget_tokens,
                "registered_at": cast(float, d.at), "hibernated": False, "last_active_at": cast(float, d.at)}
            self.token_index[d.token_hash] = agent_id  # type: ignore[index]  # a registration carries its hash
        elif agent_id not in self.agents:
            return
        elif event.type == ev.AGENT_HIBERNATED:
            self._fold_context(agent_id, event)
            # A hibernation whose resume point no longer matched the context (an append won
            # the race) folds as a no-op; the agent is hibernated only if its context is.
            self.agents[agent_id]["hibernated"] = self.context_of(agent_id).hibernated
        elif event.type == ev.AGENT_WOKEN:
            woken = ev.AgentWoken.from_dict(event.data)
            # update's keyword form is not typed for a TypedDict; the service stamps a wake
            self.agents[agent_id].update({"hibernated": False, "last_active_at": cast(float, woken.at)})
            self._fold_context(agent_id, event)
        elif event.type in (ev.AGENT_TOKEN_ROTATED, ev.AGENT_TOKEN_REVOKED):
            # One token per agent: the old one stops working the moment this is folded.
            doc = self.agents[agent_id]
            old = doc["token_hash"]   # None once revoked, and never a key of the index
            if old is not None and self.token_index.get(old) == agent_id:
                del self.token_index[old]
            doc["token_hash"] = event.data["token_hash"] if event.type == ev.AGENT_TOKEN_ROTATED else None
            if doc["token_hash"]:
                self.token_index[doc["token_hash"]] = agent_id
        else:
            return
        self.dirty.add(("agents", agent_id))

    def _fold_turn_input(self, event: RecordedEvent) -> None:
        if event.type == ev.TURN_REQUESTED:
            d = ev.TurnRequested.from_dict(event.data)
            # a request always starts a history
            history = self.histories[d.turn_id] = cast(turn_history.TurnHistory, turn_history.start(d, event.position))
            self.turns[d.turn_id] = turn_doc(history)
            self.dirty.add(("turns", d.turn_id))
            agent = self.agents.get(d.agent_id)
            if agent is not None:
                agent["last_active_at"] = cast(float, d.at)   # the service stamps a request
                self.dirty.add(("agents", d.agent_id))
        elif event.type in _IDEMPOTENT_INPUTS and isinstance(event.data.get("request_id"), str):
            # The client's id of the first such command, so that a retry finds its answer
            # (only when sent: documents of logs without ids are unchanged).
            doc = self.turns.get(event.data.get("turn_id"))  # type: ignore[arg-type]  # none: None
            if doc is not None:
                key = _IDEMPOTENT_INPUTS[event.type]
                if event.type == ev.HEARTBEAT_SENT:
                    doc[key] = event.data["request_id"]
                else:
                    doc.setdefault(key, event.data["request_id"])
                self.dirty.add(("turns", doc["turn_id"]))

    # -- memory ---------------------------------------------------------------------------
    def evict_finished(self, persisted: int, keep: int, also_dirty: Iterable[set[tuple[str, str]]] = ()) -> int:
        """Forget all but the `keep` most recently finished turns, of those whose final
        document is persisted (they ended at or before position `persisted` and have not
        changed since; `also_dirty`: more keys not stored yet). Returns how many left memory."""
        evicted = 0
        while len(self.finished) > keep:
            turn_id, ended = next(iter(self.finished.items()))
            key = ("turns", turn_id)
            if ended > persisted or key in self.dirty or any(key in keys for keys in also_dirty):
                break  # finished in position order: the rest are newer still
            del self.finished[turn_id]
            self.turns.pop(turn_id, None)
            self.histories.pop(turn_id, None)
            evicted += 1
        return evicted

    def recall(self, doc: TurnDoc) -> None:
        """Bring a finished turn's persisted document back (a client asked about it)."""
        turn_id = doc["turn_id"]
        if turn_id in self.turns:
            return
        self.turns[turn_id] = doc
        self.histories[turn_id] = turn_from_doc(doc)
        self.finished[turn_id] = -1  # clean and persisted: the first to go again

    # -- views the API needs -------------------------------------------------------------
    def agent_view(self, agent_id: str) -> AgentView | None:
        doc = self.agents.get(agent_id)
        if doc is None:
            return None
        sched = self.pools.get(doc["pool"])
        live = sched.agents.get(agent_id) if sched else None
        state = ev.HIBERNATED if doc["hibernated"] else ev.ACTIVE
        if live is not None and live.state == ev.QUARANTINED:
            state = ev.QUARANTINED
        level = live.level if live is not None else (
            sched.settings.entry_level(doc["priority_class"]) if sched else 0)
        return {**doc, "level": level, "state": state,
                "reaps": live.reaps if live else 0, "completions": live.completions if live else 0}

    # -- documents (persistence and replay comparison) ------------------------------------
    # The persistence path is generic over projections: a typed document is a dict[str, Any]
    # here (cast), and a loaded one is taken to be of its projection's shape.
    def doc(self, projection: str, key: str) -> dict | None:
        if projection == "pools":
            return cast(dict | None, self.pool_docs.get(key))
        if projection == "agents":
            return cast(dict | None, self.agents.get(key))
        if projection == "turns":
            return cast(dict | None, self.turns.get(key))
        if projection == "scheduler":
            state = self.pools.get(key)
            return state.to_dict() if state else None
        if projection == "context":
            context = self.contexts.get(key)
            return ctx.state_to_dict(context) if context else None
        if projection in ("resources", "leases"):
            return self.resources.doc(projection, key)
        raise KeyError(projection)

    def doc_to_save(self, projection: str, key: str):
        """What the periodic save encodes for a document: ``doc``'s dict, or for a context
        its state itself, which app.projections.doc_text encodes to the same text."""
        if projection == "context":
            return self.contexts.get(key)
        return self.doc(projection, key)

    def all_docs(self) -> dict[tuple[str, str], dict]:
        out: dict[tuple[str, str], dict] = {}
        for name, pool in self.pool_docs.items():
            out[("pools", name)] = cast(dict, pool)
        for name, state in self.pools.items():
            out[("scheduler", name)] = state.to_dict()
        for key, agent in self.agents.items():
            out[("agents", key)] = cast(dict, agent)
        for key, turn in self.turns.items():
            out[("turns", key)] = cast(dict, turn)
        for key, context in self.contexts.items():
            out[("context", key)] = ctx.state_to_dict(context)
        out.update(self.resources.docs())
        return out

    @classmethod
    def from_docs(cls, position: int, docs: dict[tuple[str, str], dict]) -> CoreModel:
        model = cls(position=position)
        for (projection, key), doc in docs.items():
            if projection == "pools":
                model.pool_docs[key] = cast(PoolDoc, doc)
            elif projection == "scheduler":
                model.pools[key] = PoolState.from_dict(doc)
            elif projection == "agents":
                model.agents[key] = cast(AgentDoc, doc)
                if doc["token_hash"]:   # None once revoked
                    model.token_index[doc["token_hash"]] = key
            elif projection == "turns":
                model.turns[key] = cast(TurnDoc, doc)
                model.histories[key] = turn_from_doc(model.turns[key])
                if doc.get("finished_at") is not None:
                    model.finished[key] = -1
            elif projection == "context":
                model.contexts[key] = ctx.state_from_dict(doc)
            elif projection in ("resources", "leases"):
                model.resources.load(projection, key, doc)
        return model


def canonical_hash(docs: dict[tuple[str, str], Any]) -> str:
    """sha256 over a canonical JSON serialisation of documents, sorted by key."""
    digest = hashlib.sha256()
    for (projection, key) in sorted(docs):
        digest.update(json.dumps([projection, key, docs[(projection, key)]], sort_keys=True,
                                 separators=(",", ":"), ensure_ascii=False).encode())
    return digest.hexdigest()

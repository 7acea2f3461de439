"""The per-pool writer: one leader per pool, elected through the Leadership port (a
PostgreSQL advisory lock in production, app/adapters/advisory_lock.py).

The leader folds the pool's inputs in log order through the pure core (decide) and
appends the decisions to `pool-<name>` with the stream's expected version. The advisory
lock makes a second leader unlikely; the expected version makes a double grant
impossible even if two processes both believe they lead (e.g. a paused process whose
session lock was lost): the loser's append fails and it steps down. The decision:
docs/architecture/decisions/one-writer-per-pool.md.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import cast

from app.adapters.advisory_lock import AdvisoryLockLeadership
from app.domain import events as ev
from app.domain import pool_access
from app.domain.access import AccessPolicy
from app.domain.decide import decide_many, next_deadline
from app.domain.state import PoolState
from app.domain.streams import id_of, pool_stream
from app.eventstore.model import ConcurrencyError, NewEvent, RecordedEvent
from app.ports import Clock, EventLog, Leadership, Lease, Wakeups
from app.scheduler.inbox import LogInbox
from app.scheduler.pool_fold import fold_pool_stream
from app.scheduler.writer import LostLeadership, next_batch, write_step
from app.tasks import cancel_all

log = logging.getLogger(__name__)

# What the inbox reads from the log: every input, and every type the pool's stream holds
# (an append of any other type to it would still bump its version, and our next append
# would fail on the expected version); and the access grants and revocations, which decide
# a turn request's pool capability in log order (app/domain/pool_access.py).
_FOLLOWED = ev.INPUTS | ev.DECISIONS | {ev.POOL_CREATED} | pool_access.CHANGES


class PoolScheduler:
    def __init__(self, pool: str, store: EventLog, url: str | None = None, *,
                 clock: Clock = time.time, retry_interval: float = 1.0,
                 leadership: Leadership | None = None, wakeups: Wakeups | None = None):
        self.pool = pool
        self.stream = pool_stream(pool)
        self.store = store
        self.clock = clock
        self.retry_interval = retry_interval
        # without a leadership given, the url is the lock's database (the caller passes one)
        self.leadership = leadership if leadership is not None else AdvisoryLockLeadership(cast(str, url))
        self.leading = asyncio.Event()
        self.state: PoolState | None = None
        self.access: AccessPolicy | None = None   # the pool capability policy as of our last batch
        self.wakeups = wakeups
        # Why each leadership term ended in a step-down (for operators and tests: a term
        # lost to another leader's write is normal in a failover, a run of them is not).
        self.step_downs: list[str] = []
        self._inbox: asyncio.Queue[RecordedEvent | None] | None = None
        self._log_inbox: LogInbox | None = None
        # Registered once (the port has no way to unregister); it feeds whichever inbox
        # the current leadership term has.
        store.on_append(self._offer)

    def tick(self) -> None:
        """The clock moved without real time passing (a manual clock): look at the timers
        now rather than at the end of the current wait."""
        if self._inbox is not None:
            self._inbox.put_nowait(None)

    async def run(self) -> None:
        while True:
            try:
                async with self.leadership.lead(self.pool) as lease:
                    if lease is not None:
                        await self._lead(lease)
            except asyncio.CancelledError:
                raise
            except (LostLeadership, ConcurrencyError) as exc:
                self.step_downs.append(str(exc))
                log.warning("scheduler for pool %s stepped down: %s", self.pool, exc)
            except Exception as exc:
                log.warning("scheduler for pool %s failed: %r", self.pool, exc)
            finally:
                self.leading.clear()
            await asyncio.sleep(self.retry_interval)

    def _relevant(self, event: RecordedEvent) -> bool:
        if event.stream == self.stream or event.type in pool_access.CHANGES:
            return True
        return event.type in ev.INPUTS and event.data.get("pool") == self.pool

    def _offer(self, appended: list[RecordedEvent]) -> None:
        if self._log_inbox is not None:
            self._log_inbox.offer(appended)

    async def _lead(self, lease: Lease) -> None:
        # The starting state is the fold of the pool's own stream up to the head, and the
        # inbox follows the log from that same head: every input after it exactly once.
        position = await self.store.head()
        state = await fold_pool_stream(self.store, self.pool, position)
        if state is None:
            return
        if self.wakeups is None:
            raise RuntimeError("a leading scheduler needs the log's wake-ups")
        self._log_inbox = LogInbox(self.store, self.wakeups, position, types=_FOLLOWED,
                                   relevant=self._relevant)
        inbox = self._inbox = self._log_inbox.queue
        follow = asyncio.create_task(self._log_inbox.follow(), name=f"scheduler-{self.pool}-inbox")
        self.state = state
        # The policy as of the last input a decision answered; the grants and revocations
        # after it come with the backlog, in log order with the requests.
        self.access = await self._access_through(state.inputs_through)
        self.leading.set()
        log.info("scheduler for pool %s leads from position %d", self.pool, position)
        try:
            # Inputs that arrived before we led and that no decision has answered yet.
            backlog = await self._unanswered(state.inputs_through, position)
            await self._process(state, backlog)
            while True:
                if not lease.held:
                    raise LostLeadership("lock session closed")
                if follow.done():
                    follow.result()  # the inbox failed: step down and start over
                    raise LostLeadership("inbox stopped following the log")
                batch = await self._next_batch(state, inbox)
                await self._process(state, batch)
        finally:
            self.leading.clear()   # at once: no longer leading while the inbox winds down
            await cancel_all([follow])
            self.state = self.access = None
            self._inbox = self._log_inbox = None

    async def _unanswered(self, after: int, up_to: int) -> list[RecordedEvent]:
        found: list[RecordedEvent] = []
        while after < up_to:
            events = await self.store.read(after, 1000, types=ev.INPUTS | pool_access.CHANGES, up_to=up_to)
            if not events:
                break
            found += [e for e in events if e.type in pool_access.CHANGES or e.data.get("pool") == self.pool]
            after = events[-1].position
        return found

    async def _access_through(self, position: int) -> AccessPolicy:
        policy, after = AccessPolicy(), 0
        while after < position:
            events = await self.store.read(after, 1000, types=pool_access.CHANGES, up_to=position)
            for event in events:
                pool_access.fold(policy, event.type, event.data)
            if len(events) < 1000:
                break
            after = events[-1].position
        return policy

    async def _next_batch(self, state: PoolState, inbox: asyncio.Queue) -> list[RecordedEvent]:
        now = self.clock()
        return await next_batch(inbox, next_deadline(state, now), now)

    async def _process(self, state: PoolState, batch: list[RecordedEvent]) -> None:
        def to_events(inputs, by_position: dict[int, RecordedEvent]) -> list[NewEvent]:
            # With no inputs this just fires the timers due and grants what now fits.
            # an input without a cause: get(None) is None
            return [NewEvent(self.stream, type_, data,
                             self._metadata(data, by_position.get(data.get("cause"))))  # type: ignore[arg-type]
                    for type_, data in decide_many(state, inputs, self.clock(), self.access)]

        recorded = await write_step(self.store, self.stream, state, batch, to_events)
        if recorded:
            state.position = recorded[-1].position

    def _metadata(self, data: dict, cause: RecordedEvent | None) -> dict:
        meta = {"actor": f"scheduler:{self.pool}",
                "causation": cause.position if cause is not None else "timer"}
        correlation = data.get("turn_id") or (cause.metadata.get("correlation") if cause else None)
        if correlation:
            meta["correlation"] = correlation
        return meta


class SchedulerSupervisor:
    """Runs one PoolScheduler per pool in the log; each competes for its pool's leadership.

    It learns of pools from the log itself (their PoolCreated events), not from a read
    model: the ones that exist when it starts, then each one as it is created."""

    def __init__(self, store: EventLog, url: str | None = None, **kwargs):
        self.store, self.url, self.kwargs = store, url, kwargs
        self.schedulers: dict[str, PoolScheduler] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._watch: asyncio.Task | None = None
        self._pool_inbox: LogInbox | None = None
        store.on_append(self._offer)   # once: the port has no way to unregister

    def _offer(self, appended: list[RecordedEvent]) -> None:
        if self._pool_inbox is not None:
            self._pool_inbox.offer(appended)

    def ensure(self, pool: str) -> None:
        if pool not in self._tasks:
            scheduler = PoolScheduler(pool, self.store, self.url, **self.kwargs)
            self.schedulers[pool] = scheduler
            self._tasks[pool] = asyncio.create_task(scheduler.run(), name=f"scheduler-{pool}")

    def tick(self) -> None:
        for scheduler in self.schedulers.values():
            scheduler.tick()

    async def start(self) -> None:
        head = await self.store.head()
        after = 0
        while True:  # every pool created up to now, before start() returns
            created = await self.store.read(after, 1000, types=[ev.POOL_CREATED], up_to=head)
            for event in created:
                self.ensure(id_of(event.stream))
            if len(created) < 1000:
                break
            after = created[-1].position
        self._watch = asyncio.create_task(self._watch_pools(head), name="scheduler-supervisor")

    async def _watch_pools(self, after: int) -> None:
        # An inbox rather than a subscription: handed this process's own appends, it does
        # not read the log once per append to find that none of them created a pool.
        wakeups = self.kwargs.get("wakeups")
        if wakeups is None:
            raise RuntimeError("the scheduler supervisor needs the log's wake-ups")
        inbox = self._pool_inbox = LogInbox(self.store, wakeups, after, types=[ev.POOL_CREATED],
                                            relevant=lambda e: e.type == ev.POOL_CREATED)
        follow = asyncio.create_task(inbox.follow(), name="scheduler-supervisor-inbox")
        try:
            while True:
                event = await inbox.queue.get()
                if event is not None:
                    self.ensure(id_of(event.stream))
        finally:
            self._pool_inbox = None
            await cancel_all([follow])

    async def stop(self) -> None:
        await cancel_all([*self._tasks.values(), self._watch])

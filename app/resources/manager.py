"""The resource manager's writer: one leader in the whole deployment (resources are shared
across pools, and deadlock detection needs the whole wait-for graph), elected through the
Leadership port like a pool's scheduler.

It folds the resource inputs in log order through the pure core (app.domain.resources)
and appends the decisions to `resources-decisions` with the stream's expected version, so
a second writer that believes it leads fails its append and steps down: no double grant.
Lease expiries are its timers, as a pool's are the scheduler's."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import cast

from app.adapters.advisory_lock import AdvisoryLockLeadership
from app.domain import resource_events as rev
from app.domain.resources import FOLDED, ResourceState, apply, decide, next_deadline
from app.domain.streams import ACCESS, LEASE, RESOURCE, RESOURCE_DECISIONS_STREAM, RESOURCES
from app.eventstore.model import ConcurrencyError, NewEvent, RecordedEvent
from app.ports import Clock, EventLog, Leadership, Lease, Wakeups
from app.scheduler.inbox import LogInbox
from app.scheduler.writer import LostLeadership, next_batch, write_step
from app.tasks import cancel_all

log = logging.getLogger(__name__)

# The name the manager leads under: never a pool's (pool names hold no ':').
LEADERSHIP_NAME = "resources:manager"
CATEGORIES = (RESOURCE, LEASE, ACCESS, RESOURCES)
_FOLLOWED = rev.RESOURCE_INPUTS | rev.RESOURCE_DECISIONS
PAGE = 5000


async def read_all(store: EventLog, up_to: int) -> list[RecordedEvent]:
    out: list[RecordedEvent] = []
    after = 0
    while True:
        page = await store.read(after, PAGE, categories=CATEGORIES, up_to=up_to)
        out += page
        if len(page) < PAGE:
            return out
        after = page[-1].position


def fold_for_writer(events: list[RecordedEvent]) -> tuple[ResourceState, list[RecordedEvent]]:
    """The writer's state as of its last decision, and the inputs no decision has answered
    yet (to be decided again, in order). Inputs after the last answered one are left out of
    the state so that the backlog sees the policy and definitions exactly as of its turn."""
    state = ResourceState()
    decisions = [e for e in events if e.stream == RESOURCE_DECISIONS_STREAM]
    through = max((e.data.get("cause") or 0 for e in decisions), default=0)
    backlog = []
    for e in events:
        if e.stream == RESOURCE_DECISIONS_STREAM:
            apply(state, e.type, e.data)
            state.version = e.version
        elif e.type in rev.RESOURCE_INPUTS and e.position > through:
            backlog.append(e)
        elif e.type in FOLDED:
            apply(state, e.type, e.data)
    state.inputs_through = through
    return state, backlog


class ResourceManager:
    def __init__(self, store: EventLog, url: str | None = None, *, clock: Clock = time.time,
                 retry_interval: float = 1.0, leadership: Leadership | None = None,
                 wakeups: Wakeups | None = None):
        self.store, self.clock, self.retry_interval = store, clock, retry_interval
        # without a leadership given, the url is the lock's database (the caller passes one)
        self.leadership = leadership if leadership is not None else AdvisoryLockLeadership(cast(str, url))
        self.wakeups = wakeups
        self.leading = asyncio.Event()
        self.state: ResourceState | None = None
        self._inbox: asyncio.Queue | None = None
        self._log_inbox: LogInbox | None = None
        self._task: asyncio.Task | None = None
        store.on_append(self._offer)

    def _offer(self, appended: list[RecordedEvent]) -> None:
        if self._log_inbox is not None:
            self._log_inbox.offer(appended)

    def tick(self) -> None:
        """The clock moved without real time passing (a manual clock): look at the timers."""
        if self._inbox is not None:
            self._inbox.put_nowait(None)

    async def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="resource-manager")

    async def stop(self) -> None:
        await cancel_all([self._task])

    async def run(self) -> None:
        while True:
            try:
                async with self.leadership.lead(LEADERSHIP_NAME) as lease:
                    if lease is not None:
                        await self._lead(lease)
            except asyncio.CancelledError:
                raise
            except (LostLeadership, ConcurrencyError) as exc:
                log.warning("resource manager stepped down: %s", exc)
            except Exception as exc:
                log.warning("resource manager failed: %r", exc)
            finally:
                self.leading.clear()
            await asyncio.sleep(self.retry_interval)

    @staticmethod
    def _relevant(event: RecordedEvent) -> bool:
        return event.stream == RESOURCE_DECISIONS_STREAM or event.type in rev.RESOURCE_INPUTS

    async def _lead(self, lease: Lease) -> None:
        if self.wakeups is None:
            raise RuntimeError("a leading resource manager needs the log's wake-ups")
        position = await self.store.head()
        state, backlog = fold_for_writer(await read_all(self.store, position))
        self._log_inbox = LogInbox(self.store, self.wakeups, position, types=_FOLLOWED, relevant=self._relevant)
        inbox = self._inbox = self._log_inbox.queue
        follow = asyncio.create_task(self._log_inbox.follow(), name="resource-manager-inbox")
        self.state = state
        self.leading.set()
        try:
            await self._process(state, backlog)
            while True:
                if not lease.held:
                    raise LostLeadership("lock session closed")
                if follow.done():
                    follow.result()
                    raise LostLeadership("inbox stopped following the log")
                await self._process(state, await self._next_batch(state, inbox))
        finally:
            await cancel_all([follow])
            self.state = None
            self._inbox = self._log_inbox = None

    async def _next_batch(self, state: ResourceState, inbox: asyncio.Queue) -> list[RecordedEvent]:
        now = self.clock()
        return await next_batch(inbox, next_deadline(state), now)

    async def _process(self, state: ResourceState, batch: list[RecordedEvent]) -> None:
        def to_events(inputs, by_position: dict[int, RecordedEvent]) -> list[NewEvent]:
            # a decision without a cause: get(None) is None
            return [NewEvent(RESOURCE_DECISIONS_STREAM, d.TYPE, d.to_dict(),
                             self._metadata(d, by_position.get(d.cause)))  # type: ignore[arg-type]
                    for d in decide(state, inputs, self.clock())]

        await write_step(self.store, RESOURCE_DECISIONS_STREAM, state, batch, to_events)

    @staticmethod
    def _metadata(d, cause: RecordedEvent | None) -> dict:
        return {"actor": "resource-manager", "causation": cause.position if cause is not None else "timer",
                "correlation": d.lease_id}

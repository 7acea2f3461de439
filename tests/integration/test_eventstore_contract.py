"""The EventLog contract on the PostgreSQL store, with its real LISTEN/NOTIFY wake-ups."""
from __future__ import annotations

import pytest

from app.eventstore.listener import LogListener
from app.eventstore.store import EventStore, create_pool
from tests.eventlog_contract import EventLogContract


class TestPostgresEventStore(EventLogContract):
    @pytest.fixture
    async def log(self, fresh_database):
        db = await create_pool(fresh_database, min_size=1, max_size=4)
        listener = LogListener(fresh_database)
        await listener.start()
        store = EventStore(db)
        store.use_wakeups(listener)
        yield store
        await listener.stop()
        await db.close()

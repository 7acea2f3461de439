"""The GatewayReplies contract on the PostgreSQL table (migration 0010)."""
from __future__ import annotations

import pytest

from app.adapters.pg_gateway_replies import PostgresGatewayReplies
from app.eventstore.store import create_pool
from tests.gateway_replies_contract import CAP, WINDOW, GatewayRepliesContract


class TestPostgresGatewayReplies(GatewayRepliesContract):
    @pytest.fixture
    async def replies(self, fresh_database):
        db = await create_pool(fresh_database, min_size=1, max_size=8)
        yield PostgresGatewayReplies(db, WINDOW, max_body_bytes=CAP)
        await db.close()

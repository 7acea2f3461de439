"""The GatewayReplies contract on the in-memory adapter."""
from __future__ import annotations

import pytest

from app.adapters.memory_gateway_replies import MemoryGatewayReplies
from tests.gateway_replies_contract import CAP, WINDOW, GatewayRepliesContract


class TestMemoryGatewayReplies(GatewayRepliesContract):
    @pytest.fixture
    async def replies(self):
        return MemoryGatewayReplies(WINDOW, max_body_bytes=CAP)

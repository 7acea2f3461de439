"""The EventLog contract on the in-memory adapter."""
from __future__ import annotations

import pytest

from app.adapters.memory_log import MemoryLog
from tests.eventlog_contract import EventLogContract


class TestMemoryLog(EventLogContract):
    @pytest.fixture
    async def log(self):
        yield MemoryLog()

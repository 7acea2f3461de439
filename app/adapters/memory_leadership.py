"""The in-memory adapter of the Leadership port: one process, so it always leads."""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator


class _Held:
    held = True


class AlwaysLeads:
    @contextlib.asynccontextmanager
    async def lead(self, pool: str) -> AsyncIterator[_Held]:
        yield _Held()

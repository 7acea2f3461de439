"""An event log (the in-memory one or the PostgreSQL store) that counts what a follower
asks of it: looks at the head (alone, or with what follows it in one statement) and reads."""
from __future__ import annotations


class CountingLog:
    def __init__(self, log):
        self.log, self.heads, self.reads = log, 0, 0

    async def head(self) -> int:
        self.heads += 1
        return await self.log.head()

    async def read(self, *args, **kwargs):
        self.reads += 1
        return await self.log.read(*args, **kwargs)

    async def read_to_head(self, *args, **kwargs):
        self.heads += 1   # a look at the head (with what follows it, in one statement)
        return await self.log.read_to_head(*args, **kwargs)

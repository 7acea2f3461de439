"""The client for synchronous code: the same calls, run on a private event loop thread.

    rm = SyncAgentRM(url, token)
    with rm.turn(estimated_tokens=800, max_output_tokens=256) as turn:
        for chunk in openai_client.chat.completions.create(..., stream=True):
            turn.chunk()
        turn.report(prompt_tokens=..., completion_tokens=...)
    rm.close()
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from .client import AgentRM, Turn, _TurnBlock
from .transport import Data

T = TypeVar("T")


class SyncTurn:
    def __init__(self, turn: Turn, loop: asyncio.AbstractEventLoop):
        self._turn, self._loop = turn, loop

    @property
    def id(self) -> str:
        return self._turn.id

    def chunk(self) -> None:
        """As Turn.chunk, from the thread that reads the stream."""
        self._loop.call_soon_threadsafe(self._turn.chunk)

    def report(self, usage: Any = None, **kw: Any) -> None:
        self._loop.call_soon_threadsafe(lambda: self._turn.report(usage, **kw))


class _SyncBlock:
    def __init__(self, owner: SyncAgentRM, block: _TurnBlock):
        self.owner, self.block = owner, block

    def __enter__(self) -> SyncTurn:
        return SyncTurn(self.owner._run(self.block.__aenter__()), self.owner._loop)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        # Let the loop run the chunk()/report() callbacks queued before the block ended.
        self.owner._run(asyncio.sleep(0))
        return self.owner._run(self.block.__aexit__(exc_type, exc, tb))


class SyncAgentRM:
    def __init__(self, url: str, token: str, *, timeout: float = 60.0):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentrm-client", daemon=True)
        self._thread.start()
        self._rm: AgentRM = self._run(self._make(url, token, timeout))

    @staticmethod
    async def _make(url: str, token: str, timeout: float) -> AgentRM:
        return AgentRM(url, token, timeout=timeout)   # its httpx client belongs to this loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def turn(self, estimated_tokens: int, max_output_tokens: int | None = None, **kw: Any) -> _SyncBlock:
        return _SyncBlock(self, self._rm.turn(estimated_tokens, max_output_tokens, **kw))

    def append(self, content: str, role: str = "user", *, pinned: bool = False) -> Data:
        return self._run(self._rm.append(content, role, pinned=pinned))

    def view(self, budget: int, query: str | None = None) -> Data:
        return self._run(self._rm.view(budget, query))

    def close(self) -> None:
        self._run(self._rm.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

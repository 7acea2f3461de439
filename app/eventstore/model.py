"""What the event store stores: new events going in, recorded events coming out."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# Expected-version sentinels for `EventStore.append`.
NO_STREAM = -1          # the stream must not exist yet
ANY_VERSION = None      # no check


@dataclass(frozen=True)
class NewEvent:
    stream: str
    type: str
    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedEvent:
    position: int
    stream: str
    version: int
    type: str
    data: dict[str, Any]
    metadata: dict[str, Any]
    recorded_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "stream": self.stream, "version": self.version,
                "type": self.type, "data": self.data, "metadata": self.metadata,
                "recorded_at": self.recorded_at.isoformat()}


class ConcurrencyError(Exception):
    """An append's expected stream version did not match: somebody else wrote first."""

    def __init__(self, stream: str, expected: int, actual: int):
        super().__init__(f"stream {stream!r} is at version {actual}, expected {expected}")
        self.stream, self.expected, self.actual = stream, expected, actual

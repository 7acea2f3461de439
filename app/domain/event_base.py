"""What every event is: a frozen dataclass with a type name, written to the log as JSON and
read back from it. The event types themselves are in events.py (the scheduler's, the context's)
and resource_events.py (the resource and access managers'); events.py also holds the catalogue
of every type by name, which decoding uses."""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, TypeVar, dataclass_transform


class EventError(ValueError):
    """Data that is not an event of the type it claims to be."""


# One frozen dataclass per event type. `to_dict()` gives the JSON the log stores, exactly
# as it always has: required fields always, optional fields (default None) only when set.
# `from_dict()` is the way back: it refuses data without a required field, and keeps keys
# it does not know (`extra`, written back by to_dict), so a log written by an older or newer
# version loads and round-trips unchanged. Values are taken as they are (no coercion): a
# fold must see the very numbers that were recorded.
@dataclass(frozen=True, kw_only=True)
class Event:
    TYPE: ClassVar[str] = ""
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()   # written only when not None
    _FIELDS: ClassVar[tuple[str, ...]] = ()
    _FIELD_SET: ClassVar[frozenset[str]] = frozenset()
    _REQUIRED: ClassVar[frozenset[str]] = frozenset()
    _DEFAULTS: ClassVar[dict[str, Any]] = {}
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def type(self) -> str:
        return self.TYPE

    def has(self, name: str) -> bool:
        """Whether the logged data has the key `name` (an optional field may be absent)."""
        return getattr(self, name, None) is not None or name in self.extra

    def to_dict(self) -> dict[str, Any]:
        out = {}
        for name in self._FIELDS:
            value = getattr(self, name)
            if value is None and name in self.OPTIONAL:
                continue
            out[name] = value
        if self.extra:
            out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, partial: bool = False) -> Self:
        """`partial` is for checkers that read forged or hand-written logs and judge each
        field themselves (the audit's verify and rate oracle): a required field that is
        missing reads as None instead of refusing the event. Never fold such an event."""
        if not isinstance(data, dict):
            raise EventError(f"{cls.TYPE} data must be an object, got {type(data).__name__}")
        names, optional = cls._FIELD_SET, cls.OPTIONAL
        values = dict(cls._DEFAULTS)
        extra = {}
        for key, value in data.items():
            if key in names and (value is not None or key not in optional):
                values[key] = value
            else:
                extra[key] = value   # unknown, or an optional field written as null: kept as is
        missing = cls._REQUIRED.difference(values)
        if missing:
            if not partial:
                raise EventError(f"{cls.TYPE} is missing {', '.join(sorted(missing))}")
            values.update(dict.fromkeys(missing))
        values["extra"] = extra
        # What the dataclass's __init__ would build (every field its value or its default,
        # no __post_init__: _seal checks), without a frozen __init__'s object.__setattr__
        # per field: every event read from the log is built this way, several times over
        # (the projector, the scheduler, the replies), so the setattr calls are a measurable share
        # of a worker's CPU (docs/benchmarks/performance-history.md).
        event = object.__new__(cls)
        event.__dict__.update(values)
        return event


_E = TypeVar("_E", bound=Event)


def _seal(cls: type[_E]) -> type[_E]:
    """Record a registered class's field names, required and optional, once."""
    fields = [f for f in dataclasses.fields(cls) if f.name != "extra"]
    names = tuple(f.name for f in fields)
    required = frozenset(f.name for f in fields
                         if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    cls._FIELDS, cls._FIELD_SET, cls._REQUIRED = names, frozenset(names), required
    cls.OPTIONAL = frozenset(f.name for f in fields if f.default is None)
    # from_dict builds an event without calling __init__: only sound while every field
    # that may be left out has a plain default and nothing runs after __init__.
    if any(f.default_factory is not dataclasses.MISSING for f in fields) or hasattr(cls, "__post_init__") \
            or hasattr(cls, "__slots__"):
        raise TypeError(f"{cls.__name__}: an event's fields take plain defaults, and no __post_init__")
    cls._DEFAULTS = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    return cls


@dataclass_transform(frozen_default=True, kw_only_default=True)   # so checkers see each event's fields
def event(cls: type[_E]) -> type[_E]:
    return _seal(dataclass(frozen=True, kw_only=True)(cls))


# -- decisions: each carries `at` (the scheduler's now) and, when an input caused it, the
# input's global position as `cause` ---------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Decided(Event):
    at: float
    cause: int | None = None

"""Stream names, the one place that spells them: message-db's rule `category-id`.

The category is everything before the first dash, so a category never holds a dash and an
id may (uuids do). A pool's stream holds its creation and every decision its scheduler
made; an agent's, a turn's and a context's hold the inputs about them."""
from __future__ import annotations

POOL, AGENT, TURN, CONTEXT = "pool", "agent", "turn", "context"


def stream_name(category: str, ident: str) -> str:
    if "-" in category:
        raise ValueError(f"a stream category cannot contain '-': {category!r}")
    return f"{category}-{ident}"


def category_of(stream: str) -> str:
    return stream.split("-", 1)[0]


def id_of(stream: str) -> str:
    """The id part of a stream name: everything after the first dash."""
    return stream.split("-", 1)[1]


def pool_stream(name: str) -> str:
    return stream_name(POOL, name)


def agent_stream(agent_id: str) -> str:
    return stream_name(AGENT, agent_id)


def turn_stream(turn_id: str) -> str:
    return stream_name(TURN, turn_id)


def context_stream(agent_id: str) -> str:
    return stream_name(CONTEXT, agent_id)


# -- resource and access managers -------------------------------------------------------
RESOURCE, LEASE, RESOURCES, ACCESS = "resource", "lease", "resources", "access"
# The resource manager's own stream: its decisions and nothing else.
RESOURCE_DECISIONS_STREAM = stream_name(RESOURCES, "decisions")


def resource_stream(name: str) -> str:
    return stream_name(RESOURCE, name)


def lease_stream(lease_id: str) -> str:
    return stream_name(LEASE, lease_id)


def access_stream(agent_id: str) -> str:
    return stream_name(ACCESS, agent_id)

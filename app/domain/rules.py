"""The rules a command must pass, each stated once.

The pool's scheduler (decide) applies them to the inputs it answers; the Service applies
the same ones before appending, so that a command bound to be refused gets a clear error
and appends nothing. Each rule gives a Refusal (a value, not an error): decide turns it into
the reason of a TurnCancelled, the Service into the API's error, each in its own words.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import events as ev


@dataclass(frozen=True)
class Refusal:
    kind: str
    need: int = 0           # TOO_BIG: the reservation asked for; QUEUE_FULL: turns it would make
    limit: int = 0          # TOO_BIG: the pool's tokens per minute; QUEUE_FULL: the cap
    status: str = ""        # NOT_GRANTED: the turn's status


# Refusal kinds.
UNKNOWN_AGENT = "UNKNOWN_AGENT"
QUARANTINED = "QUARANTINED"
TOO_BIG = "TOO_BIG"
NOT_GRANTED = "NOT_GRANTED"
NOT_QUARANTINED = "NOT_QUARANTINED"
QUEUE_FULL = "QUEUE_FULL"


def reservation(estimated_tokens: int, max_output_tokens: int | None) -> int:
    """The tokens a turn reserves from the pool's budget while it runs."""
    return estimated_tokens + (max_output_tokens or 0)


def reservation_refusal(need: int, tpm: int) -> Refusal | None:
    """A reservation larger than the pool's whole minute of tokens (or its whole window's,
    for a window shorter than a minute: limiter.token_capacity) could never be admitted."""
    return Refusal(TOO_BIG, need=need, limit=tpm) if need > tpm else None


def too_big_reason(refusal: Refusal, budget: str = "tpm") -> str:
    """`budget`: what the limit is, "tpm" or a window's tokens (limiter.budget_name)."""
    return f"reservation of {refusal.need} tokens exceeds the pool's {budget} of {refusal.limit}"


def agent_refusal(agent_state: str | None) -> Refusal | None:
    """Whether an agent in this state may ask for turns (None: not admitted to the pool)."""
    if agent_state is None:
        return Refusal(UNKNOWN_AGENT)
    return Refusal(QUARANTINED) if agent_state == ev.QUARANTINED else None


def report_refusal(turn_status: str | None) -> Refusal | None:
    """Heartbeats and completion reports are answered only for a turn that holds a lane."""
    return None if turn_status == ev.GRANTED else Refusal(NOT_GRANTED, status=turn_status or "")


def queue_refusal(queued: int, cap: int) -> Refusal | None:
    """Containment: an agent may have at most `cap` turns waiting at once, so one that floods
    requests fills its own queue, not the pool's."""
    return Refusal(QUEUE_FULL, need=queued + 1, limit=cap) if queued >= cap else None


QUEUE_FULL_REASON = "queue full"


def queue_full_reason(refusal: Refusal) -> str:
    """How the log words a request refused over the cap (the API answers LIMIT_EXCEEDED)."""
    return (f"{QUEUE_FULL_REASON}: the agent has {refusal.need - 1} turns waiting, "
            f"the most one agent may have is {refusal.limit}")


def is_queue_full_reason(reason: str | None) -> bool:
    return isinstance(reason, str) and reason.startswith(QUEUE_FULL_REASON + ":")


def release_refusal(agent_state: str | None) -> Refusal | None:
    """Only a quarantined agent can be released."""
    return None if agent_state == ev.QUARANTINED else Refusal(NOT_QUARANTINED)

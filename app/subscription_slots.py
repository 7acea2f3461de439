"""How many subscriptions each agent holds open at once, in this process.

Every live subscription is a follower of the log: it reads on its wake-ups and holds a
task and a socket's buffers. Without a cap one agent could open them by the thousand and
make every append cost that many reads. The operator is not counted: the console and
the operator's own tools are trusted, and an operator token is not handed to agents.
The count is per worker process: each worker follows the log on its own, so its cap
bounds its own work."""
from __future__ import annotations

from collections.abc import Callable

from app.auth import Principal
from app.errors import LimitExceeded


class SubscriptionSlots:
    def __init__(self, per_agent: int):
        self.per_agent = per_agent
        self._open: dict[str, int] = {}

    def held(self, agent_id: str) -> int:
        return self._open.get(agent_id, 0)

    def take(self, who: Principal) -> Callable[[], None]:
        """One slot for a subscription; the returned call gives it back (once). LimitExceeded
        when the agent holds all of its slots."""
        if who.is_operator or who.agent_id is None:
            return _nothing
        agent = who.agent_id
        if self._open.get(agent, 0) >= self.per_agent:
            raise LimitExceeded(f"an agent may hold at most {self.per_agent} subscriptions open at once; "
                                "close one first")
        self._open[agent] = self._open.get(agent, 0) + 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if given_back:
                return
            given_back = True
            left = self._open[agent] - 1
            if left:
                self._open[agent] = left
            else:
                del self._open[agent]
        return give_back


def _nothing() -> None:
    """The operator's slot: nothing to give back."""

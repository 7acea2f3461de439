"""A worker of `agentrm serve --workers N` leaves when its supervisor is gone.

uvicorn's supervisor stops its workers when it is told to (SIGTERM, SIGINT); killed outright
(SIGKILL, the OOM killer, a test's last resort), it cannot, and its workers would go on for
ever: serving on the shared socket, leading pools, holding connections and memory, with
nobody to restart or stop them. So `serve` names itself to its workers, and each worker
checks its parent once a second; once it has been re-parented, it stops itself the way
the supervisor would have stopped it (SIGTERM: uvicorn's graceful shutdown, the runtime's
stop). A single-process `serve` has no supervisor of its own and sets nothing."""
from __future__ import annotations

import asyncio
import logging
import os
import signal

log = logging.getLogger(__name__)

SUPERVISOR_ENV = "AGENTRM_SUPERVISOR_PID"
CHECK_SECONDS = 1.0


def supervisor_pid(env: dict | None = None) -> int | None:
    """The supervisor this process should outlive by nothing, if it is one's worker."""
    raw = (os.environ if env is None else env).get(SUPERVISOR_ENV, "")
    try:
        pid = int(raw)
    except ValueError:
        return None
    # Not compared with getppid() here: the supervisor may already be gone by the time a
    # worker gets this far, and that worker must stop too. (Processes a worker starts
    # inherit the variable, but none of them serves the app.)
    return pid if pid > 0 else None


async def stop_when_orphaned(parent: int, interval: float = CHECK_SECONDS) -> None:
    while True:
        await asyncio.sleep(interval)
        if os.getppid() != parent:
            log.warning("the supervisor (pid %d) is gone: this worker stops", parent)
            os.kill(os.getpid(), signal.SIGTERM)
            return

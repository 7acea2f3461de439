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
from collections.abc import Mapping

from app import config

log = logging.getLogger(__name__)

CHECK_SECONDS = 1.0


def supervisor_pid(env: Mapping[str, str] | None = None) -> int | None:
    """The supervisor this process should outlive by nothing, if it is one's worker
    (AGENTRM_SUPERVISOR_PID, which `serve` sets)."""
    # Not compared with getppid() here: the supervisor may already be gone by the time a
    # worker gets this far, and that worker must stop too. (Processes a worker starts
    # inherit the variable, but none of them serves the app.)
    return (config.load() if env is None else config.Settings.from_mapping(env)).supervisor_pid


async def stop_when_orphaned(parent: int, interval: float = CHECK_SECONDS) -> None:
    while True:
        await asyncio.sleep(interval)
        if os.getppid() != parent:
            log.warning("the supervisor (pid %d) is gone: this worker stops", parent)
            os.kill(os.getpid(), signal.SIGTERM)
            return

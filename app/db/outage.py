"""Which failures mean "the database is unreachable right now" (retriable), not a fault.

A PostgreSQL restart, a failover or a killed session surfaces as one of these while the
connection pool reconnects; the API answers them with `extensions.code = UNAVAILABLE` so
a client retries, and the background readers keep their positions and try again."""
from __future__ import annotations

import asyncpg

_OUTAGE = (
    asyncpg.PostgresConnectionError,       # class 08: connection lost, refused, never made
    asyncpg.CannotConnectNowError,         # 57P03: starting up or shutting down
    asyncpg.AdminShutdownError,            # 57P01: terminated by an operator or a restart
    asyncpg.CrashShutdownError,            # 57P02
    asyncpg.TooManyConnectionsError,       # 53300
    ConnectionError,                       # refused or reset at the socket
)


def is_outage(exc: BaseException | None) -> bool:
    for _ in range(5):  # an outage wrapped by another error is still an outage
        if exc is None:
            return False
        if isinstance(exc, _OUTAGE):
            return True
        if isinstance(exc, asyncpg.InterfaceError) and "closed" in str(exc):
            return True   # "connection is closed": the session went away under us
        if isinstance(exc, OSError) and exc.errno is not None:
            return True   # e.g. ECONNREFUSED from connect() while the server restarts
        exc = exc.__cause__ or exc.__context__
    return False


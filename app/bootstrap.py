"""The one reader of the environment, and the one place that wires adapters together.

Entry points (the CLI, the uvicorn factory, the benchmarks) ask this module for their
settings and their runtime; nothing else in the package reads `os.environ` for
configuration. (The tokenizer, summarizer and embedder read their own optional model
switches, which belong to those adapters.)"""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from app.domain.settings import PoolSettings

# Set by `agentrm serve` for its uvicorn workers, which are fresh processes.
RESOLVED_DATABASE_URL = "AGENTRM_RESOLVED_DATABASE_URL"
DEMO = "AGENTRM_DEMO"


def data_dir() -> Path:
    """Where the embedded cluster and local state live (AGENTRM_DATA_DIR, default .agentrm/)."""
    path = Path(os.environ.get("AGENTRM_DATA_DIR", ".agentrm")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def external_database_url() -> str | None:
    return os.environ.get("DATABASE_URL") or None


def database_url(start_embedded: bool = True) -> str:
    """DATABASE_URL when set; otherwise the embedded cluster in the data dir (started)."""
    url = external_database_url()
    if url:
        return url
    if not start_embedded:
        raise SystemExit("DATABASE_URL is not set and the embedded database was not started")
    from app.db.embedded import EmbeddedPostgres
    return EmbeddedPostgres(data_dir()).start()


def operator_token() -> str:
    """The operator bearer token: AGENTRM_OPERATOR_TOKEN, else one generated once and kept
    in the data dir so that `agentrm token` and a restarted server agree on it."""
    token = os.environ.get("AGENTRM_OPERATOR_TOKEN")
    if token:
        return token
    path = data_dir() / "operator.token"
    if not path.exists():
        path.write_text("op_" + secrets.token_urlsafe(24))
        path.chmod(0o600)
    return path.read_text().strip()


def default_pool_settings() -> PoolSettings:
    """The `default` pool, from the environment (AGENTRM_DEFAULT_LANES, _RPM, _TPM,
    _LEASE_SECONDS, _BOOST_SECONDS)."""
    env = os.environ.get
    return PoolSettings(
        name="default",
        lanes=int(env("AGENTRM_DEFAULT_LANES", "4")),
        rpm=int(env("AGENTRM_DEFAULT_RPM", "600")),
        tpm=int(env("AGENTRM_DEFAULT_TPM", "400000")),
        lease_seconds=float(env("AGENTRM_DEFAULT_LEASE_SECONDS", "30")),
        boost_seconds=float(env("AGENTRM_DEFAULT_BOOST_SECONDS", "60")),
    )


def introspection_enabled() -> bool:
    """GraphQL introspection (AGENTRM_INTROSPECTION, default on; 0/false/off for production)."""
    return os.environ.get("AGENTRM_INTROSPECTION", "1").strip().lower() not in ("0", "false", "off", "no")


def hot_documents_enabled() -> bool:
    """The compiled path for the turn documents (AGENTRM_HOT_DOCUMENTS, default on; 0 sends
    every request through the general executor, to compare the two: app/api/hot_documents.py)."""
    return os.environ.get("AGENTRM_HOT_DOCUMENTS", "1").strip().lower() not in ("0", "false", "off", "no")


def max_queued_turns_per_agent() -> int:
    """How many turns one agent may have queued at once (AGENTRM_MAX_QUEUED_PER_AGENT)."""
    return int(os.environ.get("AGENTRM_MAX_QUEUED_PER_AGENT", "32"))


def default_upstream() -> tuple[str | None, str | None]:
    """The `default` pool's upstream for the gateway: AGENTRM_UPSTREAM_BASE_URL and
    AGENTRM_UPSTREAM_API_KEY (other pools name theirs in createPool)."""
    return (os.environ.get("AGENTRM_UPSTREAM_BASE_URL") or None,
            os.environ.get("AGENTRM_UPSTREAM_API_KEY") or None)


def use_demo_upstream(host: str, port: int) -> str | None:
    """With the demo and no upstream configured, the `default` pool's upstream is the demo
    server's own echo model (app/gateway/demo_upstream.py), so the gateway works offline.
    Returns the URL it set, or None when an upstream was configured."""
    if os.environ.get("AGENTRM_UPSTREAM_BASE_URL"):
        return None
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    url = f"http://{local}:{port}/demo-upstream/v1"
    os.environ["AGENTRM_UPSTREAM_BASE_URL"] = url
    return url


def hibernate_idle_seconds() -> float:
    return float(os.environ.get("AGENTRM_HIBERNATE_IDLE_SECONDS", "1800"))


def leader_lease_seconds() -> float:
    """How long a pool's leader may stay silent before a standby ends its sessions and
    takes the pool over (AGENTRM_LEADER_LEASE_SECONDS, default 5: long enough that a busy
    event loop is not taken for a dead one, short enough that a stopped leader stalls its
    pool for seconds, not for as long as its connection lives)."""
    value = float(os.environ.get("AGENTRM_LEADER_LEASE_SECONDS", "5"))
    if not 0.2 <= value <= 600:
        raise SystemExit(f"AGENTRM_LEADER_LEASE_SECONDS must be between 0.2 and 600, got {value}")
    return value


def subscriber_send_timeout_seconds() -> float:
    """How long a subscriber may leave its socket full before it is cut off and told to
    resume (AGENTRM_SUBSCRIBER_SEND_TIMEOUT_SECONDS, default 30)."""
    value = float(os.environ.get("AGENTRM_SUBSCRIBER_SEND_TIMEOUT_SECONDS", "30"))
    if not 0.1 <= value <= 3600:
        raise SystemExit(f"AGENTRM_SUBSCRIBER_SEND_TIMEOUT_SECONDS must be between 0.1 and 3600, got {value}")
    return value


def worker_name() -> str:
    """This process's name in PostgreSQL (application_name, at most 63 bytes), unique per
    start: a standby ends the sessions of a silent worker by it."""
    import socket
    return f"agentrm:{socket.gethostname()[:24]}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass(frozen=True)
class ServeSettings:
    """What a uvicorn worker needs, handed over by `agentrm serve` through its environment."""
    database_url: str
    demo: bool

    def export(self) -> None:
        os.environ[RESOLVED_DATABASE_URL] = self.database_url
        os.environ[DEMO] = "1" if self.demo else "0"

    @classmethod
    def from_env(cls) -> ServeSettings:
        return cls(database_url=os.environ[RESOLVED_DATABASE_URL], demo=os.environ.get(DEMO, "1") == "1")


# -- wiring ---------------------------------------------------------------------------

async def postgres_runtime(url: str, *, run_schedulers: bool = True, pool_size: int = 10,
                           default_pool: PoolSettings | None = None):
    """The production wiring: PostgreSQL event log, LISTEN/NOTIFY, advisory-lock leaders."""
    from app.runtime import Runtime
    return await Runtime(url, run_schedulers=run_schedulers, pool_size=pool_size).start(default_pool)


async def memory_runtime(clock=None, *, default_pool: PoolSettings | None = None):
    """The application without a database: the in-memory log, a leader that always leads,
    and `clock` (a ManualClock in tests, whose moves wake the schedulers' timers)."""
    from app.runtime import MemoryRuntime
    return await MemoryRuntime(clock).start(default_pool)

"""The embedded PostgreSQL cluster: initdb on first use, then pg_ctl start/stop.

It lives in `<data dir>/pg`, listens on 127.0.0.1 only, on a port chosen once and kept
in `<data dir>/pg.port`, with a generated password (scram) kept in `<data dir>/pg.password`.
initdb refuses to run as root, so as root every server command runs as the `postgres`
user and the cluster directory is owned by it.
"""
from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
from pathlib import Path

from app.private_files import create_private

DATABASE = "agentrm"


class EmbeddedPostgresError(RuntimeError):
    pass


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    if candidates:
        return candidates[0]
    raise EmbeddedPostgresError(
        f"PostgreSQL binary {name!r} not found; run `make setup` (installs Debian's postgresql)")


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(_as_server_user(cmd), capture_output=True, text=True)
    if proc.returncode != 0:
        raise EmbeddedPostgresError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def _server_can_reach(path: Path) -> bool:
    """As root, the server runs as `postgres`, which may not be able to enter a checkout
    that lives below a private directory (a home folder, a CI workspace)."""
    if os.geteuid() != 0:
        return True
    return subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(path)],
                          capture_output=True).returncode == 0


def _fallback_dir(root: Path) -> Path:
    """A server-side home for a data dir the server user cannot reach, stable per data dir."""
    import hashlib
    base = Path("/var/tmp/agentrm-pg") / hashlib.sha256(str(root).encode()).hexdigest()[:16]
    base.mkdir(parents=True, exist_ok=True)
    for part in (base.parent, base):
        part.chmod(0o755)
    return base


class EmbeddedPostgres:
    def __init__(self, data_dir: Path):
        self.root = Path(data_dir).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        server_side = self.root if _server_can_reach(self.root) else _fallback_dir(self.root)
        self.cluster = server_side / "pg"
        self.socket_dir = server_side / "pg-socket"
        self.log_file = server_side / "pg.log"
        self.port_file = self.root / "pg.port"
        self.password_file = self.root / "pg.password"

    # -- paths and identity -------------------------------------------------------
    @property
    def port(self) -> int:
        if not self.port_file.exists():
            self.port_file.write_text(str(_free_port()))
        return int(self.port_file.read_text())

    @property
    def password(self) -> str:
        if not self.password_file.exists():
            create_private(self.password_file, secrets.token_urlsafe(18))
        return self.password_file.read_text().strip()

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql://agentrm:{self.password}@127.0.0.1:{self.port}/{database}"

    def _chown_to_server_user(self, path: Path) -> None:
        if os.geteuid() == 0:
            pg = pwd.getpwnam("postgres")
            os.chown(path, pg.pw_uid, pg.pw_gid)

    # -- lifecycle ----------------------------------------------------------------
    def initialised(self) -> bool:
        return (self.cluster / "PG_VERSION").exists()

    def init(self) -> None:
        if self.initialised():
            return
        self.cluster.mkdir(exist_ok=True)
        self.cluster.chmod(0o700)
        self._chown_to_server_user(self.cluster)
        pwfile = self.cluster.parent / "pg.initpw"  # the server user must read it, and no one else
        pwfile.unlink(missing_ok=True)              # left by an init that was killed
        create_private(pwfile, self.password + "\n")
        self._chown_to_server_user(pwfile)
        try:
            _run([_bin("initdb"), "-D", str(self.cluster), "-U", "agentrm", "--auth=scram-sha-256",
                  f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C.UTF-8"])
        finally:
            pwfile.unlink(missing_ok=True)
        with open(self.cluster / "postgresql.conf", "a") as conf:
            # Loopback only; small and friendly to a 2-core machine.
            conf.write("\nlisten_addresses = '127.0.0.1'\nmax_connections = 200\n"
                       "shared_buffers = 256MB\nfsync = on\n")

    def running(self) -> bool:
        if not self.initialised():
            return False
        proc = subprocess.run(_as_server_user([_bin("pg_ctl"), "-D", str(self.cluster), "status"]),
                              capture_output=True, text=True)
        return proc.returncode == 0

    def start(self) -> str:
        self.init()
        if not self.running():
            self.socket_dir.mkdir(exist_ok=True)
            self._chown_to_server_user(self.socket_dir)
            if not self.log_file.exists():
                self.log_file.touch()
            self._chown_to_server_user(self.log_file)
            _run([_bin("pg_ctl"), "-D", str(self.cluster), "-l", str(self.log_file), "-w", "-t", "60",
                  "-o", f"-p {self.port} -k {self.socket_dir}", "start"])
        self._ensure_database(DATABASE)
        return self.url()

    def stop(self) -> None:
        if self.running():
            _run([_bin("pg_ctl"), "-D", str(self.cluster), "-m", "fast", "-w", "stop"])

    def _ensure_database(self, name: str) -> None:
        ensure_database(self.url("postgres"), name)


def ensure_database(admin_url: str, name: str, *, recreate: bool = False) -> None:
    """Create database `name` if missing (or drop and create it when `recreate`).

    Runs its own event loop in a thread, so it works from sync code and from inside a
    running loop alike."""
    import asyncio
    import threading

    import asyncpg

    async def create() -> None:
        conn = await asyncpg.connect(admin_url)
        try:
            if recreate:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            found = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
            if not found:
                await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(create())
        except BaseException as exc:  # surfaced in the caller's thread
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if errors:
        raise errors[0]

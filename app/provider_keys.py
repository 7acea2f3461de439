"""Provider API keys at rest: sealed in `pool_secrets` under a key ring.

A stolen database dump or backup holds `pool_secrets`; sealed, its rows are useless without
the key-encryption key, which lives elsewhere (the environment, a mounted file, or a file of
the data dir readable by the server's user alone). The sealing is Fernet (AES-128-CBC with
an HMAC-SHA256, from the `cryptography` package), through MultiFernet: the first key seals,
every key of the ring opens, so a rotation adds a new key in front, re-seals every row
(`agentrm secrets rotate`) and only then drops the old one.

Where the ring comes from, first found wins:
- AGENTRM_SECRETS_KEY: Fernet keys separated by commas, the sealing one first;
- AGENTRM_SECRETS_KEY_FILE: a file of such keys, one a line, the sealing one first;
- `secrets.key` in the data dir, generated at the first need and created with its contents
  and mode 0600 in one step (app/private_files.py).

A sealed row reads `v1:<fernet token>`. A row without the prefix is one written before rows
were sealed: it is read as it is, and sealed at the next start (`seal_plaintext_rows`).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from app import config
from app.private_files import create_private, replace_private

SEALED = "v1:"
KEY_FILE_NAME = "secrets.key"
log = logging.getLogger("agentrm.secrets")


class SecretsKeyError(RuntimeError):
    """A sealed key cannot be opened by any key of the ring, or the ring is malformed."""


def new_key() -> str:
    return Fernet.generate_key().decode()


def _ring_of(keys: list[str], source: str) -> MultiFernet:
    if not keys:
        raise SecretsKeyError(f"{source} holds no key")
    try:
        return MultiFernet([Fernet(k.encode()) for k in keys])
    except ValueError:
        raise SecretsKeyError(f"{source}: each key must be 32 url-safe base64-encoded bytes "
                              "(`agentrm secrets new-key` makes one)") from None


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.replace(",", "\n").splitlines() if line.strip()]


def generated_key_file(data_dir: Path) -> Path:
    """The data dir's key file, created once with a fresh key if absent (whole and 0600 from
    its first byte; when two processes start together both keep the first one's key)."""
    path = data_dir / KEY_FILE_NAME
    if not path.exists():
        create_private(path, new_key() + "\n")
    return path


def write_key_file(path: Path, keys: list[str]) -> None:
    """Replace the key file at `path` by `keys`, atomically and readable by its owner alone."""
    replace_private(path, "".join(k + "\n" for k in keys))


def ring_source(settings: config.Settings, data_dir: Callable[[], Path]) -> tuple[str, Path | None]:
    """Where the ring is read from: a description for messages, and the file if it is one."""
    if settings.secrets_key:
        return "AGENTRM_SECRETS_KEY", None
    if settings.secrets_key_file:
        path = Path(settings.secrets_key_file)
        return f"AGENTRM_SECRETS_KEY_FILE ({path})", path
    path = generated_key_file(data_dir())
    return f"the generated key file {path}", path


def read_keys(settings: config.Settings, data_dir: Callable[[], Path]) -> tuple[list[str], str, Path | None]:
    source, path = ring_source(settings, data_dir)
    if path is None:
        return _lines(settings.secrets_key or ""), source, None
    try:
        return _lines(path.read_text()), source, path
    except OSError as exc:
        raise SecretsKeyError(f"{source} cannot be read: {exc.strerror}") from None


class ProviderKeys:
    """Seals and opens the rows of `pool_secrets`. The ring is read again once when a row
    does not open, so a key file rotated under a running server is picked up."""

    def __init__(self, load_keys: Callable[[], tuple[list[str], str]]):
        self._load_keys = load_keys
        self._ring, self.source = self._load()

    @classmethod
    def from_settings(cls, data_dir: Callable[[], Path]) -> ProviderKeys:
        def load() -> tuple[list[str], str]:
            keys, source, _ = read_keys(config.load(), data_dir)
            return keys, source
        return cls(load)

    @classmethod
    def of(cls, *keys: str) -> ProviderKeys:
        return cls(lambda: (list(keys), "the given keys"))

    def _load(self) -> tuple[MultiFernet, str]:
        keys, source = self._load_keys()
        return _ring_of(keys, source), source

    def seal(self, plain: str) -> str:
        return SEALED + self._ring.encrypt(plain.encode()).decode()

    def open(self, stored: str) -> str:
        if not stored.startswith(SEALED):
            return stored        # written before keys were sealed
        token = stored[len(SEALED):].encode()
        try:
            return self._ring.decrypt(token).decode()
        except InvalidToken:
            pass
        self._ring, self.source = self._load()
        try:
            return self._ring.decrypt(token).decode()
        except InvalidToken:
            raise SecretsKeyError(f"a stored provider key does not open with {self.source}: the secrets "
                                  "key differs from the one that sealed it (see 'Rotate the secrets key' "
                                  "in the runbook)") from None

    # -- the table ----------------------------------------------------------------------
    async def put(self, conn, pool: str, plain: str) -> None:
        await conn.execute("INSERT INTO pool_secrets (pool, api_key) VALUES ($1, $2) "
                           "ON CONFLICT (pool) DO UPDATE SET api_key = EXCLUDED.api_key", pool, self.seal(plain))

    async def get(self, db, pool: str) -> str | None:
        stored = await db.fetchval("SELECT api_key FROM pool_secrets WHERE pool = $1", pool)
        return None if stored is None else self.open(stored)

    async def reseal_all(self, db, *, only_plaintext: bool = False) -> int:
        """Seal every row under the ring's first key (or only the rows not yet sealed); how
        many rows were written. Each row is written only if unchanged since it was read, so
        a concurrent createPool or a second worker doing the same is never overwritten."""
        rows = await db.fetch("SELECT pool, api_key FROM pool_secrets")
        written = 0
        for row in rows:
            stored = row["api_key"]
            if only_plaintext and stored.startswith(SEALED):
                continue
            status = await db.execute("UPDATE pool_secrets SET api_key = $1 WHERE pool = $2 AND api_key = $3",
                                      self.seal(self.open(stored)), row["pool"], stored)
            written += status.endswith(" 1")
        return written

    async def seal_plaintext_rows(self, db) -> None:
        """At start: seal the rows written before sealing; say so if a sealed one does not open."""
        try:
            sealed = await self.reseal_all(db, only_plaintext=True)
            if sealed:
                log.info("sealed %d provider key(s) stored in plaintext", sealed)
            probe = await db.fetchval("SELECT api_key FROM pool_secrets WHERE api_key LIKE 'v1:%' LIMIT 1")
            if probe is not None:
                self.open(probe)
        except SecretsKeyError as exc:
            log.error("%s; the gateway answers 503 for the pools concerned", exc)


async def rotate(url: str, data_dir: Callable[[], Path], *, drop_old: bool = False) -> str:
    """`agentrm secrets rotate`: re-seal every row of `pool_secrets` under the ring's first
    key. A ring kept in a file gets a new first key here (the old ones stay in it, to read
    what running servers seal until they restart), and with `drop_old` loses every key but
    the first once every row is re-sealed. A ring in AGENTRM_SECRETS_KEY is the operator's
    to change: put the new key first, restart, rotate, then remove the old one. What was
    done, in one line."""
    import asyncpg

    keys, source, path = read_keys(config.load(), data_dir)
    if path is not None and not drop_old:
        keys = [new_key(), *keys]
        _ring_of(keys, source)
        write_key_file(path, keys)
    ring = ProviderKeys(lambda: (keys, source))
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            written = await ring.reseal_all(conn)
            left = await conn.fetchval("SELECT count(*) FROM pool_secrets")
    finally:
        await conn.close()
    done = f"re-sealed {written} of {left} provider key(s) under the first key of {source}"
    if path is not None and drop_old:
        write_key_file(path, keys[:1])
        return done + f"; dropped {len(keys) - 1} older key(s)"
    if path is not None:
        return done + "; restart the servers, then run `agentrm secrets rotate --drop-old`"
    return done + ("; remove the older keys from AGENTRM_SECRETS_KEY and restart" if len(keys) > 1 else "")

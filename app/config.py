"""Process-wide settings read from the environment (CONTRACT.md names them)."""
from __future__ import annotations

import os
import secrets
from pathlib import Path


def data_dir() -> Path:
    """Where the embedded cluster and local state live (AGENTRM_DATA_DIR, default .agentrm/)."""
    path = Path(os.environ.get("AGENTRM_DATA_DIR", ".agentrm")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def external_database_url() -> str | None:
    return os.environ.get("DATABASE_URL") or None


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

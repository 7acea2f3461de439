"""Files only their owner may read (tokens, passwords, keys), created whole.

Writing a file and then chmod-ing it leaves a window in which anyone may read it; writing
it in place leaves one in which a reader sees it empty or half written. So the contents go
into a file of the same directory created with mode 0600, which is then hard-linked to its
name: the name appears with its final contents and mode, or not at all, and when two
processes race the first one's file is the one both keep."""
from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def create_private(path: Path, text: str) -> bool:
    """Create `path` holding `text`, mode 0600, unless it exists; whether this call made it."""
    aside = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        try:
            os.link(aside, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            aside.unlink()


def replace_private(path: Path, text: str) -> None:
    """Put `text` at `path`, mode 0600, replacing what was there in one step."""
    aside = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(aside, path)

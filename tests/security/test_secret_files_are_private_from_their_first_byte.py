"""Threat-model row: secret files were written and then restricted, so for a moment (or for
good, under the umask) others could read them. The embedded cluster's initdb password file
was written with the umask's mode, and in a directory other users may enter. Every secret
file AgentRM writes is now created whole with mode 0600 (app/private_files.py)."""
from __future__ import annotations

import os
import stat

import app.db.embedded as embedded
from app import bootstrap
from app.private_files import create_private


def test_the_initdb_password_file_is_never_readable_by_others(tmp_path, monkeypatch):
    os.umask(umask := os.umask(0o022))          # the usual umask, whatever the runner's
    seen = {}

    def fake_run(cmd):
        if "initdb" in cmd[0]:
            pwfile = next(a.split("=", 1)[1] for a in cmd if a.startswith("--pwfile="))
            seen["mode"] = stat.S_IMODE(os.stat(pwfile).st_mode)
            seen["text"] = open(pwfile).read()
        return ""
    monkeypatch.setattr(embedded, "_run", fake_run)
    monkeypatch.setattr(embedded, "_server_can_reach", lambda _path: True)
    try:
        pg = embedded.EmbeddedPostgres(tmp_path)
        pg.init()
    finally:
        os.umask(umask)
    assert seen["mode"] == 0o600, oct(seen["mode"])
    assert seen["text"].strip() == pg.password
    assert stat.S_IMODE(pg.password_file.stat().st_mode) == 0o600
    assert not (tmp_path / "pg.initpw").exists()


def test_a_secret_file_appears_whole_and_private_and_a_second_writer_keeps_the_first(tmp_path):
    path = tmp_path / "operator.token"
    bootstrap.write_secret(path, "op_first")
    assert not create_private(path, "op_second")
    assert path.read_text() == "op_first"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["operator.token"]

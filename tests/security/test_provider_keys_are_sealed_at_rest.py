"""Threat-model row: the pools' upstream API keys sat in plaintext in `pool_secrets`, so a
database dump or backup handed over every provider key. They are sealed under a key ring
that lives outside the database (app/provider_keys.py); the gateway still sends the right
key upstream, rows written before sealing still work and are sealed at the next start, a
rotation re-seals every row, and a wrong secrets key fails that pool's calls with a clear
503 while the server goes on."""
from __future__ import annotations

import os
import subprocess
import sys

import asyncpg
import httpx
from cryptography.fernet import Fernet

from tests.client import GraphQLClient
from tests.conftest import OPERATOR_TOKEN, ROOT, Server
from tests.integration.test_gateway import MESSAGES, UPSTREAM_KEY, make_agent, make_pool, upstream  # noqa: F401


def new_key() -> str:
    return Fernet.generate_key().decode()


async def stored_row(url: str, pool: str) -> str:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval("SELECT api_key FROM pool_secrets WHERE pool = $1", pool)
    finally:
        await conn.close()


async def chat(server, token: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
        return await http.post("/v1/chat/completions", json={"model": "fake-gpt", "messages": MESSAGES},
                               headers={"authorization": f"Bearer {token}"})


class Started:
    """A server of the test's own on `url`, stopped at the end of the block."""

    def __init__(self, url: str):
        self.url = url

    async def __aenter__(self) -> Server:
        self.server = await Server(self.url).start()
        return self.server

    async def __aexit__(self, *exc) -> None:
        await self.server.stop()


async def test_the_stored_row_does_not_hold_the_key_and_the_gateway_still_sends_it(
        server, operator, upstream):  # noqa: F811
    pool = await make_pool(operator, upstream)
    stored = await stored_row(server.url, pool)
    assert stored and UPSTREAM_KEY not in stored and stored.startswith("v1:")
    _, token = await make_agent(operator, pool, "sealed-key-user")
    answer = await chat(server, token)
    assert answer.status_code == 200, answer.text
    assert upstream.seen[-1].api_key == UPSTREAM_KEY


async def test_a_plaintext_row_of_older_code_still_works_and_is_sealed_at_the_next_start(
        fresh_database, upstream):  # noqa: F811
    async with Started(fresh_database) as first:
        async with GraphQLClient(first, OPERATOR_TOKEN) as operator:
            pool = await make_pool(operator, upstream)
            _, token = await make_agent(operator, pool, "old-row-user")
    conn = await asyncpg.connect(fresh_database)   # what the code before sealing wrote
    try:
        await conn.execute("UPDATE pool_secrets SET api_key = $1 WHERE pool = $2", UPSTREAM_KEY, pool)
    finally:
        await conn.close()
    async with Started(fresh_database) as second:
        stored = await stored_row(fresh_database, pool)
        assert UPSTREAM_KEY not in stored and stored.startswith("v1:")
        answer = await chat(second, token)
        assert answer.status_code == 200, answer.text
        assert upstream.seen[-1].api_key == UPSTREAM_KEY


async def test_rotation_reseals_every_row_and_the_gateway_still_forwards(
        fresh_database, upstream, monkeypatch):  # noqa: F811
    old, new = new_key(), new_key()
    monkeypatch.setenv("AGENTRM_SECRETS_KEY", old)
    async with Started(fresh_database) as first:
        async with GraphQLClient(first, OPERATOR_TOKEN) as operator:
            pool = await make_pool(operator, upstream)
            _, token = await make_agent(operator, pool, "rotated-key-user")
    before = await stored_row(fresh_database, pool)
    # The runbook's steps: the new key first beside the old, rotate, then the new one alone.
    env = {**os.environ, "AGENTRM_SECRETS_KEY": f"{new},{old}", "DATABASE_URL": fresh_database,
           "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in (".", "bench", "clients/python"))}
    done = subprocess.run([sys.executable, "-m", "app.cli", "secrets", "rotate"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "re-sealed 1 of 1" in done.stdout
    after = await stored_row(fresh_database, pool)
    assert after != before and after.startswith("v1:") and UPSTREAM_KEY not in after
    monkeypatch.setenv("AGENTRM_SECRETS_KEY", new)
    async with Started(fresh_database) as second:
        answer = await chat(second, token)
        assert answer.status_code == 200, answer.text
        assert upstream.seen[-1].api_key == UPSTREAM_KEY


async def test_a_wrong_secrets_key_is_a_clear_503_and_the_server_goes_on(
        fresh_database, upstream, monkeypatch):  # noqa: F811
    monkeypatch.setenv("AGENTRM_SECRETS_KEY", new_key())
    async with Started(fresh_database) as first:
        async with GraphQLClient(first, OPERATOR_TOKEN) as operator:
            pool = await make_pool(operator, upstream)
            _, token = await make_agent(operator, pool, "wrong-key-user")
    monkeypatch.setenv("AGENTRM_SECRETS_KEY", new_key())
    async with Started(fresh_database) as second:
        seen = len(upstream.seen)
        answer = await chat(second, token)
        assert answer.status_code == 503, answer.text
        assert "AGENTRM_SECRETS_KEY" in answer.json()["error"]["message"]
        assert len(upstream.seen) == seen                 # nothing went upstream without its key
        async with httpx.AsyncClient(base_url=second.base, timeout=30) as http:
            assert (await http.get("/healthz")).status_code == 200
        async with GraphQLClient(second, OPERATOR_TOKEN) as operator:   # the other pools still work
            other = await make_pool(operator, upstream)
            _, other_token = await make_agent(operator, other, "right-key-user")
        assert (await chat(second, other_token)).status_code == 200
        assert upstream.seen[-1].api_key == UPSTREAM_KEY


def test_the_generated_key_file_is_its_owners_alone_from_the_start(tmp_path):
    from app.provider_keys import generated_key_file
    path = generated_key_file(tmp_path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert Fernet(path.read_text().strip().encode())            # a usable key, whole
    assert generated_key_file(tmp_path).read_text() == path.read_text()   # made once
    assert [p.name for p in tmp_path.iterdir()] == [path.name]            # nothing left aside


async def test_rotating_a_key_file_under_a_running_server_keeps_its_pools_working(
        fresh_database, upstream, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.delenv("AGENTRM_SECRETS_KEY", raising=False)
    monkeypatch.delenv("AGENTRM_SECRETS_KEY_FILE", raising=False)
    monkeypatch.setenv("AGENTRM_DATA_DIR", str(tmp_path))
    key_file = tmp_path / "secrets.key"
    env = {**os.environ, "DATABASE_URL": fresh_database,
           "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in (".", "bench", "clients/python"))}

    def agentrm(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "app.cli", *args], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    async with Started(fresh_database) as running:
        first_key = key_file.read_text()
        assert len(first_key.split()) == 1 and key_file.stat().st_mode & 0o777 == 0o600
        async with GraphQLClient(running, OPERATOR_TOKEN) as operator:
            pool = await make_pool(operator, upstream)   # sealed under the first key, not read yet
            _, token = await make_agent(operator, pool, "file-rotated-user")
        assert "re-sealed 1 of 1" in agentrm("secrets", "rotate")
        keys = key_file.read_text().split()
        assert len(keys) == 2 and keys[1] == first_key.strip()
        # The running server holds only the first key: it reads the file again and opens the row.
        answer = await chat(running, token)
        assert answer.status_code == 200, answer.text
        assert upstream.seen[-1].api_key == UPSTREAM_KEY
    assert "dropped 1 older key" in agentrm("secrets", "rotate", "--drop-old")
    assert key_file.read_text().split() == keys[:1]
    async with Started(fresh_database) as restarted:
        answer = await chat(restarted, token)
        assert answer.status_code == 200, answer.text
        assert upstream.seen[-1].api_key == UPSTREAM_KEY

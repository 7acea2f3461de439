"""Shared fixtures: a real embedded PostgreSQL, a migrated database, a real server.

The cluster lives in `.agentrm/test-cluster` (kept between runs, so only the first run
pays for initdb); each test session gets a freshly created database in it."""
from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest
import pytest_asyncio

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The fake providers listen on loopback, which a pool's upstream may name only when allowed.
os.environ.setdefault("AGENTRM_UPSTREAM_ALLOWED_HOSTS", "127.0.0.1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def pg_admin_url():
    external = os.environ.get("DATABASE_URL")
    if external:
        yield external.rsplit("/", 1)[0] + "/postgres"
        return
    from app.db.embedded import EmbeddedPostgres
    pg = EmbeddedPostgres(ROOT / ".agentrm" / "test-cluster")
    pg.start()
    yield pg.url("postgres")
    pg.stop()  # leave no server running behind the test run


def make_database(pg_admin_url: str, name: str) -> str:
    from app.db.embedded import ensure_database
    from app.db.migrate import upgrade
    ensure_database(pg_admin_url, name, recreate=True)
    url = pg_admin_url.rsplit("/", 1)[0] + f"/{name}"
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def database_url(pg_admin_url) -> str:
    return make_database(pg_admin_url, "agentrm_test")


@pytest.fixture
def fresh_database(pg_admin_url, request) -> str:
    """A database of the test's own, for tests that need an empty log."""
    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]
    return make_database(pg_admin_url, name)


OPERATOR_TOKEN = "op_test_token_7f3a9c1e5b"


class Server:
    def __init__(self, url: str, **app_options):
        self.url = url
        self.app_options = app_options
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.http = f"{self.base}/graphql"
        self.ws = f"ws://127.0.0.1:{self.port}/graphql"

    async def start(self) -> Server:
        import uvicorn

        from app.api.app import KEEP_ALIVE_SECONDS, create_app
        self.app = create_app(self.url, op_token=OPERATOR_TOKEN, **self.app_options)
        # A bounded graceful shutdown: a request or socket still open at the end of the
        # session (a client that never closed) must not hang the teardown; uvicorn then
        # cancels it and logs how many it cancelled.
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                ws="websockets-sansio", lifespan="on", timeout_graceful_shutdown=10,
                                timeout_keep_alive=KEEP_ALIVE_SECONDS)
        self.server = uvicorn.Server(config)
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            if self.task.done():
                self.task.result()
            await asyncio.sleep(0.05)
        return self

    @property
    def runtime(self):
        return self.app.state.holder.runtime

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task


@pytest_asyncio.fixture(scope="session")
async def server(database_url):
    srv = await Server(database_url).start()
    yield srv
    await srv.stop()


@pytest_asyncio.fixture
async def operator(server):
    from tests.client import GraphQLClient
    async with GraphQLClient(server, OPERATOR_TOKEN) as client:
        yield client

"""Where each pool's calls go: base URL, API key and one HTTP connection pool per upstream.

The base URL comes from the pool's settings (`upstreamBaseUrl` on createPool; for the
`default` pool AGENTRM_UPSTREAM_BASE_URL; for the demo fleet's pool `demo`, the demo echo
model when the server serves it: its URL depends on the port of each start, so it is
never written into the pool's settings). The API key is never in the event log: the log
keeps a fingerprint, and the key itself sits sealed in the `pool_secrets` table
(app/provider_keys.py), written in the same transaction as the pool's creation
(Service.create_pool); for `default` it comes from AGENTRM_UPSTREAM_API_KEY. It is read
here only to be sent upstream, and is never logged or returned by any query. A key that
does not open (the secrets key is not the one that sealed it) fails that pool's calls with
503 and a line in the log; the server and the other pools go on.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import httpx

from app.demo import DEMO_POOL
from app.errors import NotFound, Unavailable
from app.provider_keys import SecretsKeyError

log = logging.getLogger("agentrm.gateway")

# No read timeout: a hung call is the scheduler's to reap (start deadline, lease), and the
# gateway then closes the request. A timer here would be a second, uncoordinated reaper.
TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=30.0, pool=None)
# An idle upstream connection is dropped after 4 s, before the 5 s keep-alive of the
# servers that host models locally (uvicorn under vLLM and others, Node). Equal timeouts
# race: a call sent on a connection the provider is closing fails with a read error.
LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=4.0)
# httpcore looks at every connection of a client's pool when a request starts and when a
# response ends (a readability poll of each idle socket, a scan of the pool per queued
# request), so one pool's cost per call grows with the calls in flight: at 128 it was a
# fifth of the gateway's CPU. Each upstream gets CLIENT_SHARDS clients, taken in turn, so
# a pool holds about 1/CLIENT_SHARDS of the connections. This also keeps each pool under
# max_keepalive_connections, past which httpcore closes every idle connection it finds
# (it counts all of the pool's connections against that bound, not the idle ones).
CLIENT_SHARDS = 8
# How long an upstream's 404 for an optional path (/v1/responses, /v1/messages/count_tokens)
# is believed: within it the path is not asked again; after it, once, in case it was added.
ABSENT_FOR_S = 3600.0


@dataclass(frozen=True)
class Upstream:
    base_url: str
    api_key: str | None
    client: httpx.AsyncClient

    def url(self, path: str) -> str:
        """`path` (`/v1/...`) under the base URL, which may or may not end in /v1."""
        base = self.base_url.rstrip("/")
        if base.endswith("/v1") and path.startswith("/v1/"):
            base = base[:-3]
        return base + path


class Upstreams:
    def __init__(self, runtime, default_base_url: str | None = None, default_api_key: str | None = None,
                 demo_base_url: str | None = None):
        self.runtime = runtime
        self.default_base_url, self.default_api_key = default_base_url, default_api_key
        self.demo_base_url = demo_base_url
        self._clients: dict[str, list[httpx.AsyncClient]] = {}
        self._turn = 0
        self._keys: dict[str, str | None] = {}
        self._absent: dict[tuple[str, str], float] = {}

    def client_for(self, base_url: str) -> httpx.AsyncClient:
        """One of the upstream base URL's AsyncClients (connection pools, kept alive), in turn."""
        clients = self._clients.get(base_url)
        if clients is None:
            clients = self._clients[base_url] = [httpx.AsyncClient(timeout=TIMEOUT, limits=LIMITS)
                                                 for _ in range(CLIENT_SHARDS)]
        self._turn = (self._turn + 1) % CLIENT_SHARDS
        return clients[self._turn]

    async def for_pool(self, pool: str) -> Upstream:
        state = self.runtime.projector.model.pools.get(pool)
        if state is None:
            raise NotFound(f"no pool named {pool!r}")
        base = state.settings.upstream_base_url or {"default": self.default_base_url,
                                                     DEMO_POOL.name: self.demo_base_url}.get(pool)
        if not base:
            raise Unavailable(f"pool {pool!r} has no upstream: set upstreamBaseUrl on createPool"
                           + (" or AGENTRM_UPSTREAM_BASE_URL" if pool == "default" else ""))
        return Upstream(base, await self._api_key(pool), self.client_for(base))

    async def _api_key(self, pool: str) -> str | None:
        if pool not in self._keys:
            key = None
            db = getattr(getattr(self.runtime, "store", None), "pool", None)
            provider_keys = getattr(self.runtime, "provider_keys", None)
            if db is not None and provider_keys is not None:
                try:
                    key = await provider_keys.get(db, pool)
                except SecretsKeyError as exc:
                    log.error("pool %r: %s", pool, exc)
                    raise Unavailable(f"pool {pool!r}: its upstream key cannot be read with this server's "
                                      "secrets key; the operator must fix AGENTRM_SECRETS_KEY") from None
            if key is None and pool == "default":
                key = self.default_api_key
            self._keys[pool] = key
        return self._keys[pool]

    def lacks(self, base_url: str, path: str) -> bool:
        """The upstream at `base_url` answered 404 for `path` less than ABSENT_FOR_S ago."""
        since = self._absent.get((base_url, path))
        return since is not None and time.monotonic() - since < ABSENT_FOR_S

    def note_absent(self, base_url: str, path: str) -> None:
        self._absent[(base_url, path)] = time.monotonic()

    async def close(self) -> None:
        for clients in self._clients.values():
            for client in clients:
                await client.aclose()
        self._clients.clear()

"""The gateways `agentrm bench peers` compares: each installed (pinned) or found, started on
loopback in front of the benchmark's fake provider, and described by what it was configured
with and where that setting is documented.

- direct: the client calls the fake provider itself (the floor every gateway adds to).
- LiteLLM proxy, PyPI `litellm[proxy]` 1.106.12, in a virtualenv of its own under
  .agentrm/peers/litellm: never in the project's (its proxy extra is a large dependency set).
  From 1.108 the proxy extra needs a `litellm-proxy` package the index does not serve, and
  1.107.0 was withdrawn: 1.106.12 is the newest that installs.
- Portkey gateway, npm `@portkey-ai/gateway` 1.15.2, under .agentrm/peers/portkey, run by node.
  It listens on every interface and has no option to choose one (its start-server calls
  @hono/node-server's `serve({fetch, port})` without a hostname), so it is started with a
  preload that binds its listener to 127.0.0.1.
- AgentRM: `agentrm serve --no-demo` on a database of its own, a pool per provider.

A peer that cannot be installed or started is skipped with one line saying why.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.config import foreign_environment

from .processes import stop_process

ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = ROOT / ".agentrm" / "peers"
LITELLM_VERSION = "1.106.12"
PORTKEY_VERSION = "1.15.2"
# The gateway asks for @hono/node-server ^1.3.3, and npm resolves that to the newest 1.x,
# whose Response wrapper keeps a fetched response's immutable headers: every streamed call
# then fails in the gateway's updateHeaders with "TypeError: immutable" (Portkey-AI/gateway
# issue 1389, said there to start after 1.14.2; here 1.14.2 fails too, 1.13.8 streams).
HONO_NODE_SERVER = "1.13.8"
PORTKEY_PACKAGE = {"name": "agentrm-peers-portkey", "private": True,
                   "dependencies": {"@portkey-ai/gateway": PORTKEY_VERSION},
                   "overrides": {"@hono/node-server": HONO_NODE_SERVER}}
MODEL = "fake-model"
READY_TIMEOUT_S = 180.0

# Node preload: @hono/node-server listens on every interface; this makes any listen() with
# a port but no host listen on loopback only (the benchmark's peers must not be reachable
# from outside the machine).
LOOPBACK_PRELOAD = """\
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' && typeof args[1] !== 'string') args.splice(1, 0, '127.0.0.1');
  else if (args[0] && typeof args[0] === 'object' && args[0].port !== undefined && !args[0].host)
    args[0] = { ...args[0], host: '127.0.0.1' };
  return listen.apply(this, args);
};
"""


class PeerUnavailable(Exception):
    """The peer cannot run here; the message is the one line the report gives."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Target:
    """One way to reach the provider: an OpenAI base URL (ending in /v1) and what to send."""
    name: str
    base: str
    headers: dict
    version: str
    config: dict
    model: str = MODEL
    procs: list[subprocess.Popen] = field(default_factory=list)
    extra_pids: list[int] = field(default_factory=list)   # counted for CPU, not ours to stop

    def cpu_roots(self) -> list[int]:
        return [p.pid for p in self.procs] + self.extra_pids

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc, grace=10.0)
        self.procs.clear()


def _wait_http(proc: subprocess.Popen, url: str, log: Path, what: str, headers: dict | None = None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:   # a real process must come up: poll it, with a deadline
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
            raise PeerUnavailable(f"{what} exited at start (code {proc.returncode}): {tail.strip()[-300:]}")
        try:
            if httpx.get(url, timeout=2, headers=headers).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            stop_process(proc, grace=5.0)
            raise PeerUnavailable(f"{what} did not answer {url} within {READY_TIMEOUT_S:g} s")
        time.sleep(0.3)


# -- LiteLLM ---------------------------------------------------------------------------------
def litellm_bin(install: bool) -> Path:
    venv = PEERS_DIR / "litellm"
    exe = venv / "bin" / "litellm"
    if exe.exists() and litellm_version() == LITELLM_VERSION:
        return exe
    if not install:
        raise PeerUnavailable(f"litellm[proxy]=={LITELLM_VERSION} is not installed in {venv} "
                              "(run without --no-install)")
    print(f"peers: installing litellm[proxy]=={LITELLM_VERSION} into its own venv {venv}", file=sys.stderr)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"],
                       check=True, capture_output=True, timeout=1800)
    except (subprocess.SubprocessError, OSError) as exc:
        raise PeerUnavailable(f"could not install litellm[proxy]=={LITELLM_VERSION}: {exc}") from exc
    return exe


def litellm_version() -> str:
    python = PEERS_DIR / "litellm" / "bin" / "python"
    try:
        return subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
                              capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _yaml(value, indent: int = 0) -> str:
    """The little YAML LiteLLM's config needs (JSON scalars are valid YAML)."""
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)):
                lines.append(f"{pad}{key}:")
                lines.append(_yaml(item, indent + 2))
            else:
                lines.append(f"{pad}{key}: {json.dumps(item)}")
    else:
        for item in value:
            body = _yaml(item, indent + 2).lstrip()
            lines.append(f"{pad}- {body}")
    return "\n".join(lines)


def litellm_config(models: Mapping[str, tuple[str, int | None]], *, rate_limited: bool) -> dict:
    """`models`: model name -> (provider base URL, rpm or None)."""
    model_list = []
    for name, (base, rpm) in models.items():
        params: dict = {"model": f"openai/{MODEL}", "api_base": f"{base}/v1", "api_key": "sk-fake"}
        if rpm is not None:
            params["rpm"] = rpm
        model_list.append({"model_name": name, "litellm_params": params})
    router: dict = {"num_retries": 0}
    if rate_limited:
        router["routing_strategy"] = "usage-based-routing-v2"
    return {"model_list": model_list, "router_settings": router,
            "litellm_settings": {"num_retries": 0, "request_timeout": 600},
            "general_settings": {"master_key": "sk-bench-master"}}


LITELLM_DOCS = {
    "model_list[].litellm_params.model, api_base, api_key": "https://docs.litellm.ai/docs/proxy/configs "
    "(openai/<model> with api_base: an OpenAI-compatible endpoint)",
    "model_list[].litellm_params.rpm": "https://docs.litellm.ai/docs/proxy/load_balancing "
    "(rpm on the deployment; enforced by the usage-based routing strategies)",
    "router_settings.routing_strategy: usage-based-routing-v2": "https://docs.litellm.ai/docs/routing "
    "(Advanced - Routing Strategies: usage-based-routing-v2, the Redis-backed rpm/tpm check)",
    "num_retries: 0": "https://docs.litellm.ai/docs/proxy/reliability (router retries; off so a 429 "
    "is counted where it happens, as for the other gateways)",
    "general_settings.master_key": "https://docs.litellm.ai/docs/proxy/virtual_keys (master key auth, no DB)",
    "LITELLM_LOCAL_MODEL_COST_MAP=True": "https://docs.litellm.ai/docs/proxy/outbound_requests "
    "(no fetch of the cost map from GitHub at start: the machine is offline)",
}


def start_litellm(name: str, config: dict, install: bool, workdir: Path) -> Target:
    exe = litellm_bin(install)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{name}.yaml"
    path.write_text(_yaml(config) + "\n")
    port = free_port()
    log = workdir / f"{name}.log"
    env = foreign_environment(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_OFFLINE_MODE="true", LITELLM_LOG="ERROR",
                              LITELLM_MODE="PRODUCTION", DISABLE_ADMIN_UI="True")
    proc = subprocess.Popen([str(exe), "--config", str(path), "--host", "127.0.0.1", "--port", str(port),
                             "--num_workers", "1"], cwd=workdir, env=env, stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    _wait_http(proc, f"http://127.0.0.1:{port}/health/liveliness", log, "the LiteLLM proxy")
    return Target(name, f"http://127.0.0.1:{port}/v1", {"Authorization": "Bearer sk-bench-master"},
                  litellm_version(), {"file": config, "docs": LITELLM_DOCS, "cli": "litellm --config FILE "
                                      "--host 127.0.0.1 --port PORT --num_workers 1"},
                  procs=[proc])


# -- Portkey ---------------------------------------------------------------------------------
def portkey_entry(install: bool) -> Path:
    home = PEERS_DIR / "portkey"
    entry = home / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    if entry.exists() and portkey_version() == PORTKEY_VERSION and hono_version() == HONO_NODE_SERVER:
        return entry
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise PeerUnavailable("node and npm are needed for the Portkey gateway")
    if not install:
        raise PeerUnavailable(f"@portkey-ai/gateway@{PORTKEY_VERSION} is not installed in {home} "
                              "(run without --no-install)")
    print(f"peers: installing @portkey-ai/gateway@{PORTKEY_VERSION} into {home}", file=sys.stderr)
    home.mkdir(parents=True, exist_ok=True)
    try:
        (home / "package.json").write_text(json.dumps(PORTKEY_PACKAGE, indent=2) + "\n")
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=home, check=True,
                       capture_output=True, timeout=1800)
    except (subprocess.SubprocessError, OSError) as exc:
        raise PeerUnavailable(f"could not install @portkey-ai/gateway@{PORTKEY_VERSION}: {exc}") from exc
    return entry


def portkey_version() -> str:
    return _npm_version("@portkey-ai/gateway")


def hono_version() -> str:
    return _npm_version("@hono/node-server")


def _npm_version(name: str) -> str:
    package = PEERS_DIR / "portkey" / "node_modules" / name / "package.json"
    try:
        return json.loads(package.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return ""


PORTKEY_DOCS = {
    "x-portkey-config: {provider: openai, custom_host, api_key}": "https://portkey.ai/docs/product/ai-gateway/"
    "universal-api and .../configs (custom_host: an OpenAI-compatible endpoint; 127.0.0.1 is in the default "
    "TRUSTED_CUSTOM_HOSTS of build/start-server.js)",
    "retry: {attempts: 3, on_status_codes: [429]} (rate workloads)": "https://portkey.ai/docs/product/ai-gateway/"
    "automatic-retries (exponential backoff; the open-source gateway has no rate limiter of its own)",
    "retry.use_retry_after_header: not used": "in 1.15.2 a call that meets a 429 with it on answers 500: "
    "TypeError: Cannot set properties of undefined (setting '_timeouts')",
    f"@hono/node-server pinned to {HONO_NODE_SERVER} (npm overrides)": "Portkey-AI/gateway issue 1389: newer "
    "versions fail every streamed call with TypeError: immutable",
    "--port=PORT --headless": "build/start-server.js (the only flags it reads; no host flag: bound to "
    "127.0.0.1 by a node preload)",
}


def portkey_headers(provider_url: str, retry: bool) -> dict:
    config: dict = {"provider": "openai", "custom_host": f"{provider_url}/v1", "api_key": "sk-fake"}
    if retry:
        config["retry"] = {"attempts": 3, "on_status_codes": [429]}
    return {"x-portkey-config": json.dumps(config)}


def start_portkey(install: bool, workdir: Path) -> Target:
    entry = portkey_entry(install)
    workdir.mkdir(parents=True, exist_ok=True)
    preload = workdir / "loopback.cjs"
    preload.write_text(LOOPBACK_PRELOAD)
    port = free_port()
    log = workdir / "portkey.log"
    env = foreign_environment(NODE_ENV="production")
    proc = subprocess.Popen(["node", "--require", str(preload), str(entry), f"--port={port}", "--headless"],
                            cwd=workdir, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    _wait_http(proc, f"http://127.0.0.1:{port}/", log, "the Portkey gateway")
    return Target("portkey", f"http://127.0.0.1:{port}/v1", {}, portkey_version(),
                  {"headers": "x-portkey-config per request (see docs)", "docs": PORTKEY_DOCS,
                   "cli": "node --require loopback.cjs start-server.js --port=PORT --headless"}, procs=[proc])

"""AgentRM's settings: every environment variable it reads, in one table, parsed at start.

This is the only module of app/ and bench/ that touches ``os.environ``, to read it or to
write it. Everything else asks for a ``Settings`` (``load()``, or ``Settings.from_mapping``
for a mapping of its own) or calls one of the writers below.

The table is the ``Settings`` dataclass itself: each field is declared with ``setting(...)``,
which records the variable's name, kind (what it parses to and what it accepts), default
and meaning. That one table drives the parsing, the error messages and the reference page
(``reference_markdown()``, committed as docs/reference/configuration.md). It is a table of
our own, not pydantic-settings, because it adds no dependency for a few dozen flat values
and keeps the accepted ranges and their one-line errors in our words.

Rules every variable follows:
- unset or empty (spaces only): the default;
- a bad value raises ``ConfigError`` with one line naming the variable, the value and what
  is accepted, e.g. ``AGENTRM_LEADER_LEASE_SECONDS='abc': a number of seconds between 0.2
  and 600``; ``agentrm`` prints that line and exits 2.

Settings are read when an entry point starts (the CLI's ``main``, ``create_app``, a runtime),
never at import, so a variable set before the start (a test's ``monkeypatch.setenv``)
takes effect. Internal variables carry settings from ``agentrm serve`` to its uvicorn
workers, which are fresh processes; nobody sets them by hand.

Run ``python -m app.config`` to print the reference page."""
from __future__ import annotations

import base64
import binascii
import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.domain.settings import MAX_LANES


class ConfigError(ValueError):
    """A variable's value is not one it accepts; the message is the one line to show."""


@dataclass(frozen=True)
class Kind:
    """What a variable parses to: its type (for the reference page), what it accepts (for
    errors and the page), and the parser, which raises ValueError outside that."""
    type: str
    accepted: str
    parse: Callable[[str], Any]


def _shown(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else str(x)


def number(low: float, high: float | None = None, *, above: bool = False, unit: str = "seconds") -> Kind:
    """A number (a float) from `low` (or above it) up to `high` (inclusive; None: no top)."""
    if high is not None:
        accepted = f"a number of {unit} between {_shown(low)} and {_shown(high)}"
    elif above:
        accepted = f"a number of {unit} above {_shown(low)}"
    else:
        accepted = f"a number of {unit}, {_shown(low)} or more"

    def parse(raw: str) -> float:
        value = float(raw)
        low_ok = value > low if above else value >= low
        if not (low_ok and (high is None or value <= high)):   # also refuses nan
            raise ValueError(raw)
        return value
    return Kind("number", accepted, parse)


def whole(low: int, high: int | None = None) -> Kind:
    """A whole number from `low` up to `high` (inclusive; None: no top)."""
    accepted = (f"a whole number between {_shown(low)} and {_shown(high)}" if high is not None
                else f"a whole number, {_shown(low)} or more")

    def parse(raw: str) -> int:
        value = int(raw)
        if value < low or (high is not None and value > high):
            raise ValueError(raw)
        return value
    return Kind("whole number", accepted, parse)


_TRUE, _FALSE = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


def _flag(raw: str) -> bool:
    word = raw.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(raw)


def choice(*options: str) -> Kind:
    def parse(raw: str) -> str:
        if raw.strip() not in options:
            raise ValueError(raw)
        return raw.strip()
    return Kind("choice", "one of " + ", ".join(options), parse)


def _pid(raw: str) -> int | None:
    value = int(raw)
    return value if value > 0 else None


# Words that a copied example or a forgotten template leaves in a secret: a token that is
# one of them (or short, or of few distinct characters) is guessable, so it is refused.
_PLACEHOLDERS = ("changeme", "change-me", "change_me", "placeholder", "replace", "example", "secret",
                 "password", "xxxx", "todo", "fixme")
MIN_TOKEN_CHARS = 20


def _strong_token(raw: str) -> str:
    token = raw.strip()
    lowered = token.lower()
    if len(token) < MIN_TOKEN_CHARS or len(set(token)) < 8 or any(p in lowered for p in _PLACEHOLDERS):
        raise ValueError("weak")
    return token


def _fernet_keys(raw: str) -> str:
    """Keys separated by commas, each 32 bytes in url-safe base64 (a Fernet key); the text is
    kept as given and split where it is used (app/provider_keys.py)."""
    keys = [k.strip() for k in raw.split(",") if k.strip()]
    try:
        if not keys or any(len(base64.urlsafe_b64decode(k.encode())) != 32 for k in keys):
            raise ValueError("not a key")
    except (binascii.Error, ValueError):
        raise ValueError("not a key") from None
    return ",".join(keys)


def _hosts(raw: str) -> frozenset[str]:
    hosts = frozenset(h.strip().lower().rstrip(".") for h in raw.split(",") if h.strip())
    if any(not h or "/" in h or " " in h for h in hosts):
        raise ValueError(raw)
    return hosts


FLAG = Kind("flag", "1, true, on or yes; 0, false, off or no", _flag)
HOSTS = Kind("host list", "host names or addresses, separated by commas", _hosts)
SECRET = Kind("secret", f"a secret of at least {MIN_TOKEN_CHARS} characters, not a placeholder"
              " (e.g. the output of `openssl rand -hex 32`)", _strong_token)
SECRETS_KEYS = Kind("key list", "Fernet keys (32 bytes in url-safe base64, `agentrm secrets new-key`) "
                   "separated by commas, the one that seals first", _fernet_keys)
TEXT = Kind("text", "any text", str)
PATH = Kind("path", "a directory, relative to the working directory or absolute", str)
PID = Kind("process id", "a whole number (0 or less: none)", _pid)


@dataclass(frozen=True)
class Variable:
    """One row of the table."""
    name: str
    kind: Kind
    default: Any
    meaning: str
    internal: bool = False
    shown_default: str | None = None   # the default in words, when the value alone says too little

    def parse(self, raw: str | None) -> Any:
        if raw is None or raw.strip() == "":
            return self.default
        try:
            return self.kind.parse(raw)
        except ValueError:
            secret = self.kind in (SECRET, SECRETS_KEYS)
            shown = self.name if secret else f"{self.name}={raw!r}"   # a secret is never echoed
            raise ConfigError(f"{shown}: {self.kind.accepted}") from None

    @property
    def default_text(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        if isinstance(self.default, (int, float)):
            return _shown(self.default)
        return "unset" if self.default is None else str(self.default)


def setting(name: str, kind: Kind, default: Any, meaning: str, *, internal: bool = False,
            shown_default: str | None = None) -> Any:
    """A field of Settings that is read from the variable `name`."""
    variable = Variable(name, kind, default, meaning, internal, shown_default)
    return dataclasses.field(default=default, metadata={"variable": variable})


@dataclass(frozen=True)
class Settings:
    """Every setting AgentRM reads; each field is one row of the table (``setting``)."""

    # -- the database and local state
    database_url: str | None = setting(
        "DATABASE_URL", TEXT, None,
        "the PostgreSQL to use; unset: the embedded cluster in the data dir, started on demand",
        shown_default="unset (embedded)")
    data_dir: str = setting(
        "AGENTRM_DATA_DIR", PATH, ".agentrm",
        "where the embedded cluster and the generated operator token live")
    operator_token: str | None = setting(
        "AGENTRM_OPERATOR_TOKEN", SECRET, None,
        "the operator's bearer token; unset: one generated once and kept in the data dir",
        shown_default="unset (generated)")
    secrets_key: str | None = setting(
        "AGENTRM_SECRETS_KEY", SECRETS_KEYS, None,
        "the key ring that seals provider API keys in the database; every key opens, the first seals "
        "(rotation: the runbook); unset: AGENTRM_SECRETS_KEY_FILE, else a key generated once in the data dir",
        shown_default="unset (a file)")
    secrets_key_file: str | None = setting(
        "AGENTRM_SECRETS_KEY_FILE", TEXT, None,
        "a file holding that key ring, one key a line (a mounted secret); used when AGENTRM_SECRETS_KEY "
        "is unset", shown_default="unset (generated in the data dir)")
    # -- the `default` pool, created at the first start
    default_lanes: int = setting(
        "AGENTRM_DEFAULT_LANES", whole(1, MAX_LANES), 4, "the default pool's lanes (concurrent calls)")
    default_rpm: int = setting(
        "AGENTRM_DEFAULT_RPM", whole(1, 10_000_000), 600, "the default pool's requests per minute")
    default_tpm: int = setting(
        "AGENTRM_DEFAULT_TPM", whole(1, 10_000_000_000), 400_000, "the default pool's tokens per minute")
    default_lease_seconds: float = setting(
        "AGENTRM_DEFAULT_LEASE_SECONDS", number(1, 3600), 30.0,
        "the default pool's lease: a call silent for this long is reaped")
    default_boost_seconds: float = setting(
        "AGENTRM_DEFAULT_BOOST_SECONDS", number(0, above=True), 60.0,
        "the default pool's boost period (every agent back to its entry level)")
    # -- the gateway
    upstream_base_url: str | None = setting(
        "AGENTRM_UPSTREAM_BASE_URL", TEXT, None,
        "the default pool's provider for the gateway; unset under `agentrm serve`: the demo echo model")
    upstream_api_key: str | None = setting(
        "AGENTRM_UPSTREAM_API_KEY", TEXT, None, "the key sent to the default pool's provider")
    upstream_allowed_hosts: frozenset[str] | None = setting(
        "AGENTRM_UPSTREAM_ALLOWED_HOSTS", HOSTS, None,
        "hosts a pool's upstreamBaseUrl may name although they are loopback, private or plain "
        "http (a model server inside the network, a local test double); others must be public https",
        shown_default="none")
    idempotency_window_seconds: float = setting(
        "AGENTRM_IDEMPOTENCY_WINDOW_SECONDS", number(1, 2_592_000), 86400.0,
        "how long after its first call a gateway answer is kept for a retry with the same "
        "Idempotency-Key (up to 30 days)")
    gateway_max_body_bytes: int = setting(
        "AGENTRM_GATEWAY_MAX_BODY_BYTES", whole(64 * 1024, 1024 * 1024 * 1024), 16 * 1024 * 1024,
        "the largest request body the gateway reads (a larger one is refused with 413 before it "
        "is decoded); the default admits a long context with images, as the GraphQL API's cap does")
    # -- the API
    introspection: bool = setting(
        "AGENTRM_INTROSPECTION", FLAG, True,
        "GraphQL introspection for the operator (the console reads it); agents and anonymous callers "
        "never have it (0: no one)")
    graphiql: bool = setting(
        "AGENTRM_GRAPHIQL", FLAG, False,
        "serve the GraphiQL IDE at GET /graphql to browsers (it loads its scripts from a CDN)")
    metrics_public: bool = setting(
        "AGENTRM_METRICS_PUBLIC", FLAG, False,
        "serve /metrics without a token (0: the operator's bearer token is required, as Prometheus "
        "sends it with `authorization: credentials_file`)")
    hot_documents: bool = setting(
        "AGENTRM_HOT_DOCUMENTS", FLAG, True,
        "the compiled path for the turn documents (0: every request through the general executor)")
    max_queued_per_agent: int = setting(
        "AGENTRM_MAX_QUEUED_PER_AGENT", whole(1), 32, "how many turns one agent may have queued at once")
    max_subscriptions_per_agent: int = setting(
        "AGENTRM_MAX_SUBSCRIPTIONS_PER_AGENT", whole(1), 8,
        "how many subscriptions one agent may hold open at once on one worker (the operator has no cap)")
    subscriber_send_timeout_seconds: float = setting(
        "AGENTRM_SUBSCRIBER_SEND_TIMEOUT_SECONDS", number(0.1, 3600), 30.0,
        "how long a subscriber may leave its socket full before it is cut off and told to resume")
    # -- leadership and context
    leader_lease_seconds: float = setting(
        "AGENTRM_LEADER_LEASE_SECONDS", number(0.2, 600), 5.0,
        "how long a pool's leader may stay silent before a standby takes the pool over")
    hibernate_idle_seconds: float = setting(
        "AGENTRM_HIBERNATE_IDLE_SECONDS", number(0), 1800.0,
        "how long an agent may stay idle before its context hibernates (inf: never)")
    token_encoding: str = setting(
        "AGENTRM_TOKEN_ENCODING", choice("cl100k_base", "o200k_base"), "cl100k_base",
        "the tokenizer used when neither the pool nor the agent chooses one")
    embedding_threads: int = setting(
        "AGENTRM_EMBEDDING_THREADS", whole(1), 1, "torch threads of the embedding model")
    embedding_nice: int = setting(
        "AGENTRM_EMBEDDING_NICE", whole(0, 19), 10,
        "the CPU niceness of the background processes, the embedding model's and the fact "
        "extractor's (0: the server's priority)")
    summarizer_url: str | None = setting(
        "AGENTRM_SUMMARIZER_URL", TEXT, None,
        "an OpenAI-compatible endpoint for LLM summaries (with AGENTRM_SUMMARIZER_MODEL); "
        "unset: the extractive summarizer")
    summarizer_model: str | None = setting(
        "AGENTRM_SUMMARIZER_MODEL", TEXT, None, "the model of the LLM summarizer")
    summarizer_api_key: str | None = setting(
        "AGENTRM_SUMMARIZER_API_KEY", TEXT, None, "the key sent to the LLM summarizer")
    # -- diagnostics
    debug: bool = setting(
        "AGENTRM_DEBUG", FLAG, False, "`agentrm` shows tracebacks instead of one-line errors (as --debug)")
    timing_stamps: bool = setting(
        "AGENTRM_TIMING_STAMPS", FLAG, False,
        "each TurnRequested's metadata records the worker's process id (bench grant_timing)")
    # -- internal: from `agentrm serve` to its uvicorn workers
    resolved_database_url: str | None = setting(
        "AGENTRM_RESOLVED_DATABASE_URL", TEXT, None, "the database the workers use", internal=True)
    demo: bool = setting(
        "AGENTRM_DEMO", FLAG, True, "whether the workers drive the demo fleet", internal=True)
    demo_upstream_url: str | None = setting(
        "AGENTRM_DEMO_UPSTREAM_URL", TEXT, None,
        "the demo echo model the workers serve, the `demo` pool's upstream (unset: not served)", internal=True)
    supervisor_pid: int | None = setting(
        "AGENTRM_SUPERVISOR_PID", PID, None,
        "the supervisor a worker stops without (app/orphan_watch.py)", internal=True)

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> Settings:
        """Every variable of the table from `env`; ConfigError on the first bad value."""
        values = {}
        for field in dataclasses.fields(cls):
            variable = field.metadata["variable"]
            values[field.name] = variable.parse(env.get(variable.name))
        return cls(**values)


VARIABLES: tuple[Variable, ...] = tuple(field.metadata["variable"] for field in dataclasses.fields(Settings))
_BY_FIELD = {field.name: field.metadata["variable"] for field in dataclasses.fields(Settings)}


def load() -> Settings:
    """The settings of this process's environment, read now."""
    return Settings.from_mapping(os.environ)


# -- writers ------------------------------------------------------------------------------

def export_for_workers(*, database_url: str | None = None, demo: bool | None = None,
                       upstream_base_url: str | None = None, demo_upstream_url: str | None = None,
                       supervisor_pid: int | None = None) -> None:
    """Hand settings to the uvicorn workers of `agentrm serve`, which are fresh processes and
    inherit this process's environment. Only the arguments given are written."""
    given = {"resolved_database_url": database_url, "demo": None if demo is None else ("1" if demo else "0"),
             "upstream_base_url": upstream_base_url, "demo_upstream_url": demo_upstream_url,
             "supervisor_pid": supervisor_pid}
    for field, value in given.items():
        if value is not None:
            os.environ[_BY_FIELD[field].name] = str(value)


def allow_loopback_upstreams() -> None:
    """Let pools of this process call an upstream on loopback, unless the allowlist is set
    already: what a benchmark needs for its fake provider on 127.0.0.1."""
    os.environ.setdefault(_BY_FIELD["upstream_allowed_hosts"].name, "127.0.0.1")


def export_embedding_threads(threads: int) -> None:
    """The embedding model's thread count for this process (the model process, which builds
    its embedder the way the server does: from the environment)."""
    os.environ[_BY_FIELD["embedding_threads"].name] = str(threads)


def set_model_hub_offline() -> None:
    """Tell transformers and huggingface_hub never to reach the hub (HF_HUB_OFFLINE,
    TRANSFORMERS_OFFLINE): the model ships in a package, and a lookup would hang on DNS.
    They read these when first imported, so this runs before that."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def child_environment(overrides: Mapping[str, str] | None = None, /, **more: str) -> dict[str, str]:
    """The environment for a child process: this process's, with `overrides` and `more`
    (variable name to value) on top."""
    return {**os.environ, **(overrides or {}), **more}


def foreign_environment(**more: str) -> dict[str, str]:
    """The environment for another program's process (a peer gateway a benchmark runs):
    this process's without AgentRM's own variables, with `more` on top."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith(("AGENTRM_", "DATABASE_URL"))}, **more}


# -- the reference page ---------------------------------------------------------------------

def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(variables: list[Variable]) -> list[str]:
    lines = ["| Variable | Type | Default | Accepted | Meaning |", "|---|---|---|---|---|"]
    lines += [f"| `{v.name}` | {v.kind.type} | {_cell(v.default_text)} | {_cell(v.kind.accepted)} "
              f"| {_cell(v.meaning)} |" for v in variables]
    return lines


def reference_markdown() -> str:
    """docs/reference/configuration.md, rendered from the table."""
    lines = [
        "# Configuration",
        "",
        "Generated from the table in `app/config.py` by `docs/generate.py`; "
        "`tests/unit/test_reference_docs.py` fails when it drifts (regenerate with `python docs/generate.py`).",
        "",
        "AgentRM reads these environment variables when it starts.",
        "",
        "An unset or empty variable takes its default. A value outside what is accepted stops",
        "the start with one line naming the variable, the value and what is accepted (`agentrm`",
        "exits 2).",
        "",
        *_table([v for v in VARIABLES if not v.internal]),
        "",
        "## Internal",
        "",
        "`agentrm serve` sets these for its uvicorn workers, which are fresh processes; they are",
        "not set by hand.",
        "",
        *_table([v for v in VARIABLES if v.internal]),
        "",
        "Before loading the embedding model, AgentRM also sets `HF_HUB_OFFLINE=1` and",
        "`TRANSFORMERS_OFFLINE=1` for its libraries: the model ships in a package, never from the hub.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference_markdown(), end="")

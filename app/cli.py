"""agentrm: a resource manager for fleets of LLM agents.

Every command has --help. Errors are one line with the fix; --debug shows the traceback."""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from app import bootstrap
from app.bootstrap import database_url
from app.config import ConfigError, export_for_workers, load

BENCHMARKS = {
    "scheduler": "scheduling quality: every policy on the same seeded trace (simulated clock)",
    "system": "the real stack on PostgreSQL: append and read rates, grant latency",
    "context": "context retention after compaction (key facts, LoCoMo-style questions)",
    "extractor": "key-fact extraction per sentence on a held-out split: recall and precision per kind",
    "managed-context": "a conversation outgrowing its model's window through the gateway (LoCoMo)",
    "fact-lag": "append to key facts in views (p50/p99 lag), append and view latency, held-out planted facts",
    "live": "the scheduler benchmark's workload through the real service, checked against the simulation",
    "load": "many concurrent agents over HTTP against several workers: turns/s, grant latency, verify",
    "first-call": "README example 1's gateway call under `make run` (demo fleet on): p50/p90/max",
    "abuse": "honest agents' grant and view P95 with four abusers in their pool; RSS under hostile requests",
    "peers": "AgentRM beside the LiteLLM proxy and the Portkey gateway: overhead and rate limits",
    "all": "every benchmark, writing bench/results/",
}


def cmd_serve(args) -> int:
    import uvicorn

    from app.db.migrate import upgrade
    from app.demo import DEMO_POOL, FLEET
    from app.observability import logs
    log_config = logs.configure(args.log_format, args.log_level)
    url = database_url()
    if not args.no_migrate:
        upgrade(url)
    demo_upstream = bootstrap.use_demo_upstream(args.host, args.port, fleet=not args.no_demo)
    export_for_workers(database_url=url, demo=not args.no_demo)
    token = bootstrap.operator_token()
    base = f"http://{args.host}:{args.port}"
    print(f"AgentRM on {base}/  (GraphQL at /graphql, gateway at /v1, metrics at /metrics)", flush=True)
    if bootstrap.operator_token_given() or args.log_format == "json":
        # A deployment's token, or output bound for a log collector: a log line outlives the
        # terminal and is read by more people than the operator, so it names the token only.
        print(f"console:  {base}/  (operator token {bootstrap.fingerprint(token)}, from "
              f"{'AGENTRM_OPERATOR_TOKEN' if bootstrap.operator_token_given() else '`agentrm token`'})", flush=True)
    else:
        # A token generated here for a local run: the one who ran `serve` is the operator. It
        # rides in the URL fragment, which browsers never send; the console keeps it per session.
        print(f"console:  {base}/#token={token}\n"
              f"operator token: `agentrm token` (stored in {bootstrap.data_dir()})", flush=True)
    if demo_upstream:
        print(f"default pool upstream: the demo echo model at {demo_upstream} "
              "(set AGENTRM_UPSTREAM_BASE_URL for a real provider)", flush=True)
    if not args.no_demo:
        print(f"demo fleet: {len(FLEET)} simulated agents in pool `{DEMO_POOL.name}` (the console's pool menu; "
              "--no-demo stops them)", flush=True)
    if args.workers > 1:   # its workers leave if it is killed outright (app/orphan_watch.py)
        export_for_workers(supervisor_pid=os.getpid())
    from app.api.app import KEEP_ALIVE_SECONDS
    uvicorn.run("app.api.main:app_from_env", factory=True, host=args.host, port=args.port,
                workers=args.workers, log_level=args.log_level, log_config=log_config, ws="websockets-sansio",
                timeout_keep_alive=KEEP_ALIVE_SECONDS)
    return 0


def cmd_db(args) -> int:
    from app.db.embedded import EmbeddedPostgres
    from app.db.migrate import upgrade
    if args.action == "up":
        print(database_url())
    elif args.action == "down":
        if bootstrap.external_database_url():
            print("DATABASE_URL is set: nothing embedded to stop")
        else:
            EmbeddedPostgres(bootstrap.data_dir()).stop()
            print("stopped")
    elif args.action == "migrate":
        upgrade(database_url())
        print("migrated")
    elif args.action == "url":
        print(database_url())
    return 0


def cmd_token(_args) -> int:
    print(bootstrap.operator_token())
    return 0


def cmd_secrets(args) -> int:
    from app import provider_keys
    if args.action == "new-key":
        print(provider_keys.new_key())
        return 0
    import asyncio
    print(asyncio.run(provider_keys.rotate(database_url(), bootstrap.data_dir, drop_old=args.drop_old)))
    return 0


def cmd_schema(_args) -> int:
    from app.api.schema import schema
    sys.stdout.write(schema.as_str() + "\n")
    return 0


def cmd_bench(args) -> int:
    which, rest = args.which, args.rest
    if which in (None, "-h", "--help") or which not in BENCHMARKS:
        lines = ["usage: agentrm bench {" + ",".join(BENCHMARKS) + "} [options]", "",
                 "benchmarks (each has --help):"]
        lines += [f"  {name:<10} {text}" for name, text in BENCHMARKS.items()]
        if which not in (None, "-h", "--help"):
            print(f"agentrm bench: unknown benchmark {which!r}; choose one of {', '.join(BENCHMARKS)}",
                  file=sys.stderr)
            return 2
        print("\n".join(lines))
        return 0
    # Found by name: the service depends on nothing of the benchmarks, and installs without them.
    try:
        bench_main = importlib.import_module("agentrm_bench.cli").main
    except ImportError as exc:
        raise SystemExit(f"agentrm bench needs the benchmark package ({exc}); run `make setup`, "
                         "or `pip install -e '.[bench]'`") from None
    if any(flag in rest for flag in ("-h", "--help")):
        return bench_main([which, *rest])
    from app.progress import working
    with working(f"agentrm bench {which}"):
        return bench_main([which, *rest])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentrm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve GraphQL, the gateway, metrics and the console on one port",
                           description="Serve GraphQL (/graphql), the OpenAI/Anthropic gateway (/v1), "
                                       "/metrics, /healthz, /readyz and the console (/).")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    serve.add_argument("--no-demo", action="store_true",
                       help="do not drive the demo fleet (the demo model still serves the default pool "
                            "when no upstream is configured)")
    serve.add_argument("--no-migrate", action="store_true", help="do not apply pending migrations")
    serve.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                       help="level of library logs; AgentRM's own are at info (default warning)")
    serve.add_argument("--log-format", default="text", choices=["text", "json"],
                       help="one line per record, plain or JSON (default text)")
    serve.set_defaults(func=cmd_serve)

    db = sub.add_parser("db", help="start, stop or migrate the database",
                        description="up: start the embedded cluster (or use DATABASE_URL) and print its URL; "
                                    "down: stop it; migrate: apply migrations; url: print the URL.")
    db.add_argument("action", choices=["up", "down", "migrate", "url"])
    db.set_defaults(func=cmd_db)

    sub.add_parser("token", help="print the operator token",
                   description="Print the operator token (AGENTRM_OPERATOR_TOKEN, or the one kept in "
                               "the data dir).").set_defaults(func=cmd_token)
    keys = sub.add_parser(
        "secrets", help="make a secrets key, or re-seal the stored provider keys under a new one",
        description="new-key: print a fresh key for AGENTRM_SECRETS_KEY. rotate: re-seal every provider "
                    "key in the database under the first key of the ring (AGENTRM_SECRETS_KEY; with a key "
                    "file, a new key is put first in it). The runbook's 'Rotate the secrets key' has the steps.")
    keys.add_argument("action", choices=["new-key", "rotate"])
    keys.add_argument("--drop-old", action="store_true",
                      help="rotate: with a key file, re-seal under its first key and remove the others")
    keys.set_defaults(func=cmd_secrets)
    sub.add_parser("schema", help="print the GraphQL SDL",
                   description="Print the GraphQL SDL; schema/agentrm.graphql must match it.").set_defaults(
        func=cmd_schema)

    # The benchmarks parse their own options: everything after the name is theirs, --help
    # included (add_help=False, or `agentrm bench live --help` would print this parser's help).
    bench = sub.add_parser("bench", help="run benchmarks: " + " | ".join(BENCHMARKS), add_help=False,
                           description="Run a benchmark; `agentrm bench NAME --help` for its options.")
    bench.add_argument("which", nargs="?", metavar="NAME")
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(func=cmd_bench)

    from app.audit.cli import add_commands as add_audit_commands
    add_audit_commands(sub)
    return parser


def one_line(exc: BaseException) -> str:
    """An error as one line, with the fix when we know it."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    name = type(exc).__name__
    if isinstance(exc, (ConnectionRefusedError, OSError)) and "connect" in str(exc).lower() \
            or name in ("CannotConnectNowError", "ConnectionDoesNotExistError", "InvalidCatalogNameError"):
        return (f"cannot reach the database ({text}); start it with `agentrm db up` "
                "or point DATABASE_URL at a running PostgreSQL")
    if name in ("InvalidPasswordError", "InvalidAuthorizationSpecificationError"):
        return f"the database refused the credentials ({text}); check DATABASE_URL"
    if isinstance(exc, FileNotFoundError):
        return f"{text}; check the path"
    if isinstance(exc, PermissionError):
        return f"{text}; check the file's permissions or AGENTRM_DATA_DIR"
    return f"{name}: {text}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command == "bench" and args.which is None:
        args.which, args.rest = unknown[0], unknown[1:] + args.rest   # `agentrm bench --help`
    elif unknown:
        parser.error(f"unrecognised arguments: {' '.join(unknown)}")
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = load()   # every variable, so that a bad one stops any command at its start
    except ConfigError as exc:
        print(f"agentrm: error: {exc}", file=sys.stderr)
        return 2
    debug = args.debug or settings.debug
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - the one place that turns failures into one line
        if debug:
            raise
        print(f"agentrm: error: {one_line(exc)}  (--debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

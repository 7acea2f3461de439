"""`agentrm`: serve, manage the database, print the token, export the schema, benchmark."""
from __future__ import annotations

import argparse
import logging
import sys

from app import bootstrap as config
from app.bootstrap import database_url  # noqa: F401  (kept for `from app.cli import database_url`)


def cmd_serve(args) -> int:
    import uvicorn

    from app.db.migrate import upgrade
    url = database_url()
    if not args.no_migrate:
        upgrade(url)
    config.ServeSettings(database_url=url, demo=not args.no_demo).export()  # for the workers
    token = config.operator_token()
    # The token rides in the URL fragment, which browsers never send to the server; the
    # console keeps it in local storage. Whoever runs `serve` is the operator anyway.
    print(f"AgentRM on http://{args.host}:{args.port}/  (GraphQL at /graphql)\n"
          f"console:  http://{args.host}:{args.port}/#token={token}\n"
          f"operator token: `agentrm token` (stored in {config.data_dir()})", flush=True)
    uvicorn.run("app.api.main:app_from_env", factory=True, host=args.host, port=args.port,
                workers=args.workers, log_level=args.log_level, ws="websockets-sansio")
    return 0


def cmd_db(args) -> int:
    from app.db.embedded import EmbeddedPostgres
    from app.db.migrate import upgrade
    if args.action == "up":
        print(database_url())
    elif args.action == "down":
        if config.external_database_url():
            print("DATABASE_URL is set: nothing embedded to stop")
        else:
            EmbeddedPostgres(config.data_dir()).stop()
            print("stopped")
    elif args.action == "migrate":
        upgrade(database_url())
        print("migrated")
    elif args.action == "url":
        print(database_url())
    return 0


def cmd_token(_args) -> int:
    print(config.operator_token())
    return 0


def cmd_schema(_args) -> int:
    from app.api.schema import schema
    sys.stdout.write(schema.as_str() + "\n")
    return 0


def cmd_bench(args, rest: list[str]) -> int:
    try:
        from agentrm_bench.cli import main as bench_main
    except ImportError as exc:  # the service installs without the benchmarks
        raise SystemExit(f"agentrm bench needs the benchmark package ({exc}); run `make setup`, "
                         "or `pip install -e '.[bench]'`") from None
    return bench_main([args.which, *rest])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentrm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the GraphQL API and console")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--no-demo", action="store_true", help="do not drive the demo fleet")
    serve.add_argument("--no-migrate", action="store_true", help="do not apply pending migrations")
    serve.add_argument("--log-level", default="warning")
    serve.set_defaults(func=cmd_serve)

    db = sub.add_parser("db", help="manage the database")
    db.add_argument("action", choices=["up", "down", "migrate", "url"])
    db.set_defaults(func=cmd_db)

    sub.add_parser("token", help="print the operator token").set_defaults(func=cmd_token)
    sub.add_parser("schema", help="print the GraphQL SDL").set_defaults(func=cmd_schema)

    bench = sub.add_parser("bench", help="run benchmarks: scheduler | system | context | live | load | all")
    bench.add_argument("which")

    from app.audit.cli import add_commands as add_audit_commands
    add_audit_commands(sub)

    args, rest = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "bench":
        return cmd_bench(args, rest)
    if rest:
        parser.error(f"unrecognised arguments: {' '.join(rest)}")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

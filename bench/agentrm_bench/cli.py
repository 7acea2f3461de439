"""`agentrm bench scheduler|system|context|live|all [--out DIR] [...]`."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_OUT = Path("bench/results")


def _system(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="agentrm bench system")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from app.bootstrap import database_url
    from app.db.embedded import ensure_database
    from app.db.migrate import upgrade

    from .system_bench import run, to_markdown
    # A database of its own: the benchmark writes tens of thousands of events.
    base = database_url()
    admin = base.rsplit("/", 1)[0] + "/postgres"
    ensure_database(admin, "agentrm_bench", recreate=True)
    url = base.rsplit("/", 1)[0] + "/agentrm_bench"
    upgrade(url)
    result = run(args.out, url, quick=args.quick)
    print(json.dumps(result, sort_keys=True, default=str) if args.json else to_markdown(result))
    return 0


def _context(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="agentrm bench context")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--sessions", type=int, default=3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--locomo", type=Path, metavar="DIR",
                   help="also report evidence recall on the LoCoMo-format conversations (*.json) in DIR")
    p.add_argument("--scale", action="store_true",
                   help="also report memory, view latency and indexer lag for --agents x --tokens")
    p.add_argument("--agents", type=int, default=1_000)
    p.add_argument("--tokens", type=int, default=30_000)
    p.add_argument("--skip-planted", action="store_true", help="only the --locomo and --scale parts")
    args = p.parse_args(argv)
    if args.locomo is not None and not args.locomo.is_dir():
        p.error(f"--locomo {args.locomo}: not a directory")
    if args.agents < 1 or args.tokens < 100:
        p.error("--agents must be >= 1 and --tokens >= 100")
    from .context_bench import run
    args.out.mkdir(parents=True, exist_ok=True)
    result = {} if args.skip_planted else run(args.out, sessions=args.sessions, seed=args.seed, quick=args.quick)
    report = "" if args.skip_planted else (args.out / "context.md").read_text()
    if args.locomo is not None:
        from . import locomo
        try:
            result["locomo"] = locomo.run(args.locomo)
        except locomo.LoCoMoFormatError as exc:
            p.error(str(exc))
        report += "\n" + locomo.render_markdown(result["locomo"])
    if args.scale:
        from . import context_scale
        result["scale"] = context_scale.run(agents=args.agents, tokens=args.tokens)
        report += "\n" + context_scale.render_markdown(result["scale"])
    (args.out / "context.md").write_text(report, encoding="utf-8")
    (args.out / "context.json").write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    if args.json:
        print(json.dumps(result, sort_keys=True, default=str))
    else:
        print((args.out / "context.md").read_text())
    return 0


def _scheduler(argv: list[str]) -> int:
    from .scheduler_bench import main
    return main(argv)


def _live(argv: list[str]) -> int:
    from .live_check import main
    return main(argv)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("scheduler", "system", "context", "live", "all"):
        print("usage: agentrm bench scheduler|system|context|live|all [options]", file=sys.stderr)
        return 2
    which, rest = argv[0], argv[1:]
    if which == "live":
        return _live(rest)
    if which == "scheduler":
        return _scheduler(rest)
    if which == "system":
        return _system(rest)
    if which == "context":
        return _context(rest)
    p = argparse.ArgumentParser(prog="agentrm bench all")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(rest)
    out = ["--out", str(args.out)]
    from .scenarios import SCENARIO_NAMES
    code = 0
    for name in SCENARIO_NAMES:
        quick = ["--seeds", "1", "--set", "agents=30", "--set", "minutes=3"] if args.quick else []
        code |= _scheduler(out + ["--scenario", name] + quick)
    from .report import write_summary
    write_summary(args.out, SCENARIO_NAMES)
    code |= _system(out + (["--quick"] if args.quick else []))
    code |= _context(out + (["--quick"] if args.quick else []))
    code |= _live(out + (["--minutes", "3", "--agents", "12"] if args.quick else []))
    print(f"results in {args.out}/")
    return code

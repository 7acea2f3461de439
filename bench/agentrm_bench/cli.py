"""`agentrm bench NAME [--out DIR] [...]`: scheduler, system, context, extractor, managed-context, fact-lag,
live, load, first-call, abuse, peers or all."""
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
    p.add_argument("--repeat", type=int, default=3, help="runs; the spread of the key figures is reported")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
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
    result = run(args.out, url, quick=args.quick, repeat=args.repeat)
    print(json.dumps(result, sort_keys=True, default=str) if args.json else to_markdown(result))
    return 0


def _bench_database(name: str, *, migrate: bool = True) -> str:
    """A database of the benchmark's own beside the configured one, created afresh (and
    migrated by this checkout, unless `migrate` is false: the server that uses it will)."""
    from app.bootstrap import database_url
    from app.db.embedded import ensure_database
    from app.db.migrate import upgrade
    base = database_url()
    ensure_database(base.rsplit("/", 1)[0] + "/postgres", name, recreate=True)
    url = base.rsplit("/", 1)[0] + "/" + name
    if migrate:
        upgrade(url)
    return url


def _load(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="agentrm bench load")
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    p.add_argument("--repeat", type=int, default=3, help="runs of the three phases; the figures are medians")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true", help="50 agents, 3 s phases, one run")
    p.add_argument("--client", choices=("raw", "httpx"), default="raw",
                   help="the driver's HTTP client (raw: pre-encoded HTTP/1.1, the cheapest in CPU)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.agents, args.seconds, args.repeat = min(args.agents, 50), 3.0, 1
    if args.agents < 1 or args.workers < 1 or args.seconds <= 0 or args.repeat < 1:
        p.error("--agents, --workers and --repeat must be at least 1, --seconds positive")
    from .load_bench import JSON_KEYS, run, to_markdown
    result = run(args.out, _bench_database("agentrm_bench_load"), agents=args.agents, workers=args.workers,
                 seconds=args.seconds, repeat=args.repeat, seed=args.seed, client=args.client)
    if args.json:
        print(json.dumps({k: result[k] for k in JSON_KEYS}, sort_keys=True))
    else:
        print(to_markdown(result))
    return 0 if result["verify_ok"] else 1


def _first_call(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="agentrm bench first-call",
                                description="README example 1's gateway call under `make run` (the demo fleet on)")
    p.add_argument("--calls", type=int, default=20, help="calls per round")
    p.add_argument("--repeat", type=int, default=3, help="rounds of calls; the spread is reported")
    p.add_argument("--warmup", type=float, default=240.0, help="seconds the fleet works before the first round")
    p.add_argument("--gap", type=float, default=30.0, help="seconds between rounds")
    p.add_argument("--tree", type=Path, default=None, help="serve this checkout instead (a before/after run)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true", help="10 calls, one round, 5 s of warm-up")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.calls, args.repeat, args.warmup = min(args.calls, 10), 1, 5.0
    if args.calls < 1 or args.repeat < 1 or args.warmup < 0 or args.gap < 0:
        p.error("--calls and --repeat must be at least 1, --warmup and --gap not negative")
    if args.tree is not None and not (args.tree / "app" / "cli.py").is_file():
        p.error(f"--tree {args.tree}: not an AgentRM checkout")
    from .first_call import run, to_markdown
    result = run(args.out, _bench_database("agentrm_bench_first_call", migrate=False), calls=args.calls,
                 repeat=args.repeat, warmup_s=args.warmup, gap_s=args.gap, tree=args.tree)
    print(json.dumps(result, sort_keys=True) if args.json else to_markdown(result))
    return 0 if result["target_met"] else 1


def _peers(argv: list[str]) -> int:
    from .peers_suite import ALL_PEERS, ALL_WORKLOADS, run, to_markdown
    p = argparse.ArgumentParser(prog="agentrm bench peers",
                                description="AgentRM beside the LiteLLM proxy and the Portkey gateway, each in front "
                                            "of one fake provider: overhead, rate limits, faults, priority, three "
                                            "replicas of each, and the simulator's LiteLLM model against the real "
                                            "proxy")
    p.add_argument("--peers", default=",".join(ALL_PEERS),
                   help=f"comma-separated, of {', '.join(ALL_PEERS)} (default: all)")
    p.add_argument("--repeat", type=int, default=3, help="runs of every workload; the spread is reported")
    p.add_argument("--workloads", default=",".join(ALL_WORKLOADS),
                   help=f"comma-separated, of {', '.join(ALL_WORKLOADS)} (default: all)")
    p.add_argument("--rate-seconds", type=float, default=None,
                   help="length of each rate-limit phase (30 s; quick 12 s)")
    p.add_argument("--no-install", action="store_true",
                   help="use the peers already installed under .agentrm/peers; skip those that are not")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true", help="1 and 8 clients, short phases, one run")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    chosen = tuple(n.strip() for n in args.peers.split(",") if n.strip())
    if not chosen or any(n not in ALL_PEERS for n in chosen):
        p.error(f"--peers takes names of {', '.join(ALL_PEERS)}")
    workloads = tuple(n.strip() for n in args.workloads.split(",") if n.strip())
    if not workloads or any(n not in ALL_WORKLOADS for n in workloads):
        p.error(f"--workloads takes names of {', '.join(ALL_WORKLOADS)}")
    if args.quick:
        args.repeat = 1
    if args.repeat < 1 or (args.rate_seconds is not None and args.rate_seconds <= 0):
        p.error("--repeat must be at least 1, --rate-seconds positive")
    database = _bench_database("agentrm_bench_peers") if "agentrm" in chosen else None
    result = run(args.out, database, peers=chosen, quick=args.quick, repeat=args.repeat,
                 install=not args.no_install, rate_seconds=args.rate_seconds, workloads=workloads)
    print(json.dumps(result, sort_keys=True, default=str) if args.json else to_markdown(result))
    return 0 if all(p["status"] == "ok" for p in result["peers"].values()) else 1


def _abuse(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="agentrm bench abuse",
                                description="honest agents' grant and view P95 with four abusers in their pool "
                                            "against without; server RSS over 1,000 hostile requests")
    p.add_argument("--agents", type=int, default=8, help="honest agents")
    p.add_argument("--seconds", type=float, default=30.0, help="length of each clean and each abuse phase")
    p.add_argument("--repeat", type=int, default=3, help="clean/abuse pairs, alternated; the spread is reported")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--hostile", type=int, default=200, help="hostile requests of each of the five kinds")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true", help="10 s phases, one pair")
    p.add_argument("--only", choices=("flooder", "junk", "subscriber", "claimant"),
                   help="a diagnostic: only this abuser plays (written to abuse-only-NAME.*, not the headline)")
    p.add_argument("--server-root", type=Path, metavar="DIR",
                   help="serve another checkout's code (a baseline), same client and scenario")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds, args.repeat = min(args.seconds, 10.0), 1
    if args.agents < 1 or args.repeat < 1 or args.hostile < 1 or args.seconds <= 0:
        p.error("--agents, --repeat and --hostile must be at least 1, --seconds positive")
    if args.server_root is not None and not (args.server_root / "app").is_dir():
        p.error(f"--server-root {args.server_root}: no app/ there")
    from .abuse_bench import run, to_markdown
    result = run(args.out, _bench_database("agentrm_bench_abuse"), agents=args.agents, seconds=args.seconds,
                 repeat=args.repeat, seed=args.seed, hostile_per_kind=args.hostile, only=args.only,
                 server_root=args.server_root)
    print(json.dumps(result, sort_keys=True, default=str) if args.json else to_markdown(result))
    return 0 if result["verdicts"]["all_met"] else 1


def _fact_lag(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="agentrm bench fact-lag",
                                description="the lag from an append to its key facts in views (p50/p99), append "
                                            "and view latency, and held-out planted facts in a query-less view")
    p.add_argument("--agents", type=int, default=4, help="agents appending at once")
    p.add_argument("--rate", type=float, default=5.0, help="appends/s of each agent")
    p.add_argument("--seconds", type=float, default=30.0, help="length of the appending phase")
    p.add_argument("--views", type=int, default=10, help="views per agent, with and without a query each")
    p.add_argument("--repeat", type=int, default=3, help="repeats on fresh agents; the spread is reported")
    p.add_argument("--seed", type=int, default=29, help="the chatter's and the probe session's seed")
    p.add_argument("--no-probe", action="store_true", help="skip the planted-facts probe")
    p.add_argument("--facts", choices=("heldout", "dev", "dev2"), default="heldout",
                   help="the probe's planted facts: the held-out set, or a development set (optimistic)")
    p.add_argument("--server-root", type=Path, metavar="DIR",
                   help="serve another checkout's code (a baseline), same client and scenario")
    p.add_argument("--name", default="fact_lag", help="results file name (NAME.json, NAME.md)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true", help="one repeat of 10 s")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    if args.quick:
        args.repeat, args.seconds = 1, min(args.seconds, 10.0)
    if args.agents < 1 or args.repeat < 1 or args.views < 1 or args.rate <= 0 or args.seconds <= 0:
        p.error("--agents, --repeat and --views must be at least 1, --rate and --seconds positive")
    if args.server_root is not None and not (args.server_root / "app").is_dir():
        p.error(f"--server-root {args.server_root}: no app/ there")
    import asyncio

    from .fact_lag import render_markdown, run_async
    from .fact_probe import FACT_SETS
    result = asyncio.run(run_async(_bench_database("agentrm_bench_fact_lag"), agents=args.agents, rate=args.rate,
                                   seconds=args.seconds, views=args.views, repeat=args.repeat, seed=args.seed,
                                   server_root=args.server_root, probe=not args.no_probe,
                                   facts_path=FACT_SETS[args.facts]))
    args.out.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(result)
    (args.out / f"{args.name}.md").write_text(markdown, encoding="utf-8")
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    print(json.dumps(result, sort_keys=True, default=str) if args.json else markdown)
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
    p.add_argument("--latency", action="store_true",
                   help="also measure append and view latency and indexer lag through the service over HTTP")
    p.add_argument("--repeat", type=int, default=3, help="repeats of the --latency phases")
    p.add_argument("--latency-agents", type=int, default=2)
    p.add_argument("--rate", type=float, default=10.0, help="appends/s of the --latency lag phase")
    p.add_argument("--style-seeds", type=int, default=3,
                   help="generator seeds per session style for the per-style table (0: none)")
    p.add_argument("--skip-planted", action="store_true", help="only the --locomo, --scale and --latency parts")
    args = p.parse_args(argv)
    if args.locomo is not None and not args.locomo.is_dir():
        p.error(f"--locomo {args.locomo}: not a directory")
    if args.style_seeds < 0:
        p.error("--style-seeds must be >= 0")
    if args.agents < 1 or args.tokens < 100:
        p.error("--agents must be >= 1 and --tokens >= 100")
    if args.repeat < 1 or args.latency_agents < 1 or args.rate <= 0:
        p.error("--repeat and --latency-agents must be >= 1, --rate positive")
    from .context_bench import run
    args.out.mkdir(parents=True, exist_ok=True)
    result = {} if args.skip_planted else run(args.out, sessions=args.sessions, seed=args.seed, quick=args.quick,
                                                 style_seeds=args.style_seeds)
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
        scale_md = context_scale.render_markdown(result["scale"])
        report += "\n" + scale_md
        (args.out / "context_scale.md").write_text(scale_md, encoding="utf-8")
        (args.out / "context_scale.json").write_text(json.dumps(result["scale"], indent=2, default=str),
                                                     encoding="utf-8")
    if args.latency:
        import asyncio

        from . import context_latency
        result["latency"] = asyncio.run(context_latency.run_async(
            _bench_database("agentrm_bench_context"), agents=args.latency_agents, tokens=args.tokens,
            repeat=1 if args.quick else args.repeat, rate=args.rate, views=6 if args.quick else 20,
            seconds=5.0 if args.quick else 20.0))
        latency_md = context_latency.render_markdown(result["latency"])
        report += "\n" + latency_md
        (args.out / "context_latency.md").write_text(latency_md, encoding="utf-8")
        (args.out / "context_latency.json").write_text(json.dumps(result["latency"], indent=2, default=str),
                                                       encoding="utf-8")
    (args.out / "context.md").write_text(report, encoding="utf-8")
    (args.out / "context.json").write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    if args.json:
        print(json.dumps(result, sort_keys=True, default=str))
    else:
        print((args.out / "context.md").read_text())
    return 0


def _extractor(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="agentrm bench extractor",
                                description="key-fact extraction, sentence by sentence, on a held-out split: "
                                            "the extractor before this work against the current one")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--locomo", type=Path, metavar="DIR",
                   help="also score the LoCoMo conversations (*.json) in DIR, labelled from their observations")
    p.add_argument("--baseline", default=None, metavar="REV",
                   help="git revision of the 'before' extractor (default: the one the split was fixed against)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.locomo is not None and not args.locomo.is_dir():
        p.error(f"--locomo {args.locomo}: not a directory")
    from .extractor_bench import BASELINE_REF, render_markdown, run
    result = run(args.locomo, args.baseline or BASELINE_REF)
    args.out.mkdir(parents=True, exist_ok=True)
    report = render_markdown(result)
    (args.out / "extractor.md").write_text(report, encoding="utf-8")
    (args.out / "extractor.json").write_text(json.dumps(result, indent=2, sort_keys=True), encoding="utf-8")
    print(json.dumps(result, sort_keys=True) if args.json else report)
    return 0


def _managed_context(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="agentrm bench managed-context",
                                description="A conversation that outgrows its model's window, through the gateway: "
                                            "managed context against the client's last-N truncation and none.")
    p.add_argument("--locomo", type=Path, metavar="DIR", required=True,
                   help="the LoCoMo-format conversations (*.json) to play")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3],
                   help="repeats: each draws the call cadence and the planted facts")
    p.add_argument("--window", type=int, default=4096, help="the model's context window, in tokens")
    p.add_argument("--facts", type=int, default=10, help="planted facts per conversation")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not args.locomo.is_dir():
        p.error(f"--locomo {args.locomo}: not a directory")
    if args.window < 1024 or not 1 <= args.facts <= 16:
        p.error("--window must be >= 1024 and --facts between 1 and 16")
    import asyncio

    from .managed_context_bench import render_markdown, run_async
    result = asyncio.run(run_async(_bench_database("agentrm_bench_managed"), args.locomo, seeds=args.seeds,
                                   window=args.window, facts=args.facts))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "managed-context.md").write_text(render_markdown(result), encoding="utf-8")
    (args.out / "managed-context.json").write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    print(json.dumps(result, sort_keys=True, default=str) if args.json else render_markdown(result))
    return 0


def _scheduler(argv: list[str]) -> int:
    from .scheduler_bench import main
    return main(argv)


def _live(argv: list[str]) -> int:
    if any(a == "--scenario" or a.startswith("--scenario=") for a in argv):
        # one frozen scenario of benchmark v2
        from .live_scenarios import main as scenario_main
        return scenario_main(argv)
    from .live_check import main
    return main(argv)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("scheduler", "system", "context", "extractor", "managed-context", "fact-lag", "live",
                                   "load", "first-call", "abuse", "peers", "all"):
        print("usage: agentrm bench scheduler|system|context|extractor|managed-context|fact-lag|live|load|first-call|"
              "abuse|peers|all [options]",
              file=sys.stderr)
        return 2
    which, rest = argv[0], argv[1:]
    if which == "fact-lag":
        return _fact_lag(rest)
    if which == "peers":
        return _peers(rest)
    if which == "abuse":
        return _abuse(rest)
    if which == "first-call":
        return _first_call(rest)
    if which == "load":
        return _load(rest)
    if which == "live":
        return _live(rest)
    if which == "scheduler":
        return _scheduler(rest)
    if which == "system":
        return _system(rest)
    if which == "context":
        return _context(rest)
    if which == "extractor":
        return _extractor(rest)
    if which == "managed-context":
        return _managed_context(rest)
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
    code |= _fact_lag(out + (["--quick"] if args.quick else []))
    code |= _live(out + (["--minutes", "3", "--agents", "12"] if args.quick else []))
    code |= _first_call(out + (["--quick"] if args.quick else []))
    code |= _abuse(out + (["--quick"] if args.quick else []))
    print(f"results in {args.out}/")
    return code

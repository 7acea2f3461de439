"""`agentrm replay ...` and `agentrm audit ...`: thin shells over app.replay and app.audit.

Each handler resolves the database with app.bootstrap.database_url(), opens a small pool, runs
one pure analysis over what it reads, prints, and returns the exit code (1 when a check
fails, so scripts and CI can gate on it)."""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator

from app.domain import events as ev
from app.domain.apply import apply, new_pool
from app.domain.decide import available
from app.domain.state import PoolState
from app.domain.streams import pool_stream, turn_stream

from . import Record, load_records, workload_records
from .access import access_story, render_access
from .explain import explain_turn, when
from .export import export
from .resource_verify import CATEGORIES as RESOURCE_CATEGORIES
from .resource_verify import verify_resources
from .verify import verify
from .whatif import counterfactual_settings, extract_workload, report_dict, what_if


@contextlib.asynccontextmanager
async def _store(url: str) -> AsyncIterator:
    from app.eventstore.store import EventStore, create_pool
    pool = await create_pool(url, min_size=1, max_size=2)
    try:
        yield EventStore(pool)
    finally:
        await pool.close()


def _url() -> str:
    from app.bootstrap import database_url
    return database_url()


# -- rendering (pure) ---------------------------------------------------------------------

def render_state(state: PoolState, now: float | None = None) -> str:
    now = state.clock if now is None else now
    requests, tokens = available(state, now)
    s = state.settings
    rows = [f"pool {s.name} at position {state.position} (scheduler time {when(state.clock)})",
            f"  lanes ({len([t for t in state.lanes if t])}/{s.lanes} busy):"]
    for i, turn_id in enumerate(state.lanes):
        if turn_id is None:
            rows.append(f"    {i:>3}  free")
        else:
            turn = state.turns.get(turn_id)
            lease = when(turn.lease_expires_at) if turn else "?"
            rows.append(f"    {i:>3}  turn {turn_id[:8]}  agent {turn.agent_id[:8] if turn else '?'}  "
                        f"level {turn.level if turn else '?'}  lease until {lease}")
    rows.append("  levels:")
    for level, queue in enumerate(state.queues):
        queued = ", ".join(f"{t[:8]}(agent {state.turns[t].agent_id[:8]})" for t in queue) or "-"
        rows.append(f"    {level:>3}  {len(queue)} queued: {queued}")
    paused = when(state.paused_until) if state.paused_until and state.paused_until > now else "no"
    rows.append(f"  rate budget: {requests:.1f}/{s.rpm} requests, {tokens:,.0f}/{s.tpm:,} tokens, "
                f"rate factor {state.rate_factor:.2f}, paused: {paused}")
    return "\n".join(rows)


def summary_line(state: PoolState) -> str:
    busy = [f"{i}:{t[:8]}" for i, t in enumerate(state.lanes) if t]
    queues = " ".join(f"L{i}={len(q)}" for i, q in enumerate(state.queues))
    requests, tokens = available(state, state.clock)
    paused = " PAUSED" if state.paused_until and state.paused_until > state.clock else ""
    return (f"    lanes [{', '.join(busy) or 'all free'}]  queued {queues}  "
            f"budget {requests:.1f} req / {tokens:,.0f} tok{paused}")


def describe(r: Record) -> str:
    d = r.data
    keys = [k for k in ("turn_id", "agent_id", "lane", "level", "outcome", "reason", "until", "from_level",
                        "to_level") if d.get(k) is not None]
    detail = " ".join(f"{k}={str(d[k])[:8] if k.endswith('_id') else d[k]}" for k in keys)
    return f"#{r.position} {r.type:<19} {r.stream[:24]:<24} {detail}"


def render_whatif(report) -> str:
    a, w = report.actual, report.whatif
    s, rs = report.settings, report.recorded_settings

    def fmt(v, unit=""):
        if v is None:
            return "-"
        return f"{v:.3f}{unit}" if isinstance(v, float) else f"{v}{unit}"

    rows = [("lanes", rs.lanes, s.lanes), ("policy", rs.policy, s.policy), ("levels", rs.levels, s.levels),
            ("lease s", rs.lease_seconds, s.lease_seconds), ("boost s", rs.boost_seconds, s.boost_seconds),
            ("turns", a.turns, w.turns), ("finished", a.finished, w.finished),
            ("OK completions", a.completed_ok, w.completed_ok), ("429s (RATE_LIMITED)", a.rate_limited, w.rate_limited),
            ("reaped", a.reaped, w.reaped), ("unfinished", a.unfinished, w.unfinished),
            ("latency p50 s", a.latency_p50, w.latency_p50), ("latency p90 s", a.latency_p90, w.latency_p90),
            ("latency p99 s", a.latency_p99, w.latency_p99), ("latency max s", a.latency_max, w.latency_max),
            ("lane-seconds held", a.lane_seconds, w.lane_seconds), ("lane waste", a.lane_waste, w.lane_waste),
            ("OK per minute", a.throughput_per_minute, w.throughput_per_minute)]
    out = [f"what-if for pool {report.pool}, positions {report.from_position}..{report.to_position}",
           f"{'':<22}{'recorded':>14}{'what-if':>14}"]
    out += [f"{name:<22}{fmt(x):>14}{fmt(y):>14}" for name, x, y in rows]
    order = "identical" if report.same_grant_order else f"differs ({report.first_divergence})"
    out.append(f"grant order and lanes of {report.grants_compared} turns with known durations: {order}")
    if not report.simulation_complete:
        out.append("note: the counterfactual did not finish every turn before its horizon")
    return "\n".join(out)


# -- handlers -------------------------------------------------------------------------------

async def _replay_check(url: str, args) -> int:
    from app.eventstore.listener import LogListener
    from app.projections.runner import Projector
    from app.replay import replay_check
    async with _store(url) as store:
        projector = Projector(store, LogListener(url))
        await projector.load()
        report = await replay_check(store, projector, args.pool)
    print(f"events replayed: {report.events_replayed} (through position {report.position})")
    print(f"live hash:       {report.live_hash}")
    print(f"replay hash:     {report.replay_hash}")
    print(f"match:           {'yes' if report.matches else 'NO'}")
    for difference in report.differences:
        print(f"  differs: {difference}")
    return 0 if report.matches else 1


async def _replay_at(url: str, args) -> int:
    from app.replay import pool_state_at
    async with _store(url) as store:
        state = await pool_state_at(store, args.pool, args.position)
    if state is None:
        print(f"pool {args.pool!r} did not exist at position {args.position}", file=sys.stderr)
        return 1
    print(render_state(state))
    return 0


async def _replay_step(url: str, args) -> int:
    async with _store(url) as store:
        history = await load_records(store, 0, args.start - 1, streams=[pool_stream(args.pool)])
        ahead = await load_records(store, args.start - 1, None)
    state = None
    for r in history:
        state = new_pool(r.data) if r.type == ev.POOL_CREATED else (apply(state, r.type, r.data) if state else None)
    shown = 0
    for r in ahead:
        if shown >= args.count:
            break
        if r.stream != pool_stream(args.pool) and r.data.get("pool") != args.pool:
            continue
        shown += 1
        if r.stream == pool_stream(args.pool):
            if r.type == ev.POOL_CREATED:
                state = new_pool(r.data)
            elif state is not None:
                apply(state, r.type, r.data)
            if state is not None:
                state.position = r.position
        print(describe(r))
        if state is not None:
            print(summary_line(state))
    if shown == 0:
        print(f"no events of pool {args.pool!r} from position {args.start}")
    return 0


async def _whatif(url: str, args) -> int:
    async with _store(url) as store:
        records = await workload_records(store, args.pool)
    try:
        workload = extract_workload(records, args.pool, args.start, args.end)
        allot = tuple(float(x) for x in args.allotment_seconds.split(",")) if args.allotment_seconds else None
        slack = tuple(float(x) for x in args.class_slack.split(",")) if args.class_slack else None
        settings = counterfactual_settings(workload.settings, lanes=args.lanes, policy=args.policy,
                                           lease_seconds=args.lease, levels=args.levels,
                                           boost_seconds=args.boost, allotment_seconds=allot,
                                           class_slack_seconds=slack, run_slack_per_service=args.run_slack,
                                           run_slack_cap_seconds=args.run_slack_cap,
                                           size_slack_per_ktoken=args.size_slack,
                                           size_slack_cap_seconds=args.size_slack_cap,
                                           output_credit_per_ktoken=args.output_credit,
                                           output_credit_cap_seconds=args.output_credit_cap,
                                           agent_backlog_slack_seconds=args.backlog_slack,
                                           agent_backlog_slack_cap_seconds=args.backlog_slack_cap)
    except ValueError as exc:
        print(f"what-if: {exc}", file=sys.stderr)
        return 2
    report = what_if(workload, settings)
    print(json.dumps(report_dict(report), indent=2, default=str) if args.json else render_whatif(report))
    return 0


async def _export(url: str, args) -> int:
    async with _store(url) as store:
        if args.out:
            with open(args.out, "w", encoding="utf-8") as out:
                count = await export(store, out, args.start, args.end)
            print(f"wrote {count} events to {args.out}", file=sys.stderr)
        else:
            count = await export(store, sys.stdout, args.start, args.end)
    return 0


async def _explain(url: str, args) -> int:
    async with _store(url) as store:
        turn_records = await load_records(store, streams=[turn_stream(args.turn)])
        pool = next((r.data["pool"] for r in turn_records if r.type == ev.TURN_REQUESTED), None)
        pool_records = await load_records(store, streams=[pool_stream(pool)]) if pool else []
    lines = explain_turn(args.turn, turn_records, pool_records)
    print("\n".join(lines))
    return 0 if pool else 1


async def _verify(url: str, args) -> int:
    async with _store(url) as store:
        streams = [pool_stream(args.pool)] if args.pool else None
        records = await load_records(store, streams=streams)
    if not args.pool:
        records = [r for r in records if r.stream.startswith("pool-")]
    report = verify(records, args.pool)
    print(f"checked {report.decisions_checked} decisions of {len(report.pools)} pool(s) "
          f"({', '.join(report.pools) or 'none'})")
    if report.ok:
        print("all invariants hold: lanes within capacity, no double grant or completion, grants within "
              "the rate budget, reaps after lease expiry, demotions after exhausted allotments")
    else:
        print(f"VIOLATION at {report.first}")
        return 1
    if args.pool:
        return 0
    async with _store(url) as store:
        resource_records = await _resource_records(store)
    resources = verify_resources(resource_records)
    print(f"checked {resources.decisions_checked} resource decisions ({resources.grants_checked} grants)")
    if resources.ok:
        print("all resource invariants hold: exclusive holds never overlap, shared holds within capacity, "
              "no double grant, reaps after lease expiry, admissions allowed by the access policy")
        return 0
    print(f"VIOLATION at {resources.first}")
    return 1


async def _resource_records(store) -> list[Record]:
    out, after = [], 0
    while True:
        page = await store.read(after, 5000, categories=RESOURCE_CATEGORIES)
        out += [Record(e.position, e.stream, e.version, e.type, e.data) for e in page]
        if len(page) < 5000:
            return out
        after = page[-1].position


async def _cancellations_of(store, agent_id: str) -> list[Record]:
    """The agent's cancelled turns: some are refusals by pool capability, made by the
    pool's scheduler in log order (app/domain/pool_access.py)."""
    out, after = [], 0
    while True:
        page = await store.read(after, 5000, types=[ev.TURN_CANCELLED], data={"agent_id": agent_id})
        out += [Record(e.position, e.stream, e.version, e.type, e.data) for e in page]
        if len(page) < 5000:
            return out
        after = page[-1].position


async def _access(url: str, args) -> int:
    async with _store(url) as store:
        story = access_story(await _resource_records(store) + await _cancellations_of(store, args.agent),
                             args.agent)
    print(json.dumps(story, indent=2) if args.json else render_access(story))
    return 0


# -- argparse wiring -------------------------------------------------------------------------

def _runner(handler, label: str):
    def run(args) -> int:
        from app.progress import working
        url = _url()
        with working(label):
            return asyncio.run(handler(url, args))
    return run


def add_commands(subparsers) -> None:
    replay = subparsers.add_parser("replay", help="rebuild, time travel, step, what-if")
    rsub = replay.add_subparsers(dest="replay_command", required=True)

    check = rsub.add_parser("check", help="rebuild read models from position 0 and compare with the live ones")
    check.add_argument("--pool", help="only this pool (default: every pool)")
    check.set_defaults(func=_runner(_replay_check, "replaying the log from position 0"))

    at = rsub.add_parser("at", help="a pool's queues, lanes and rate budget as of a past position")
    at.add_argument("--position", type=int, required=True, help="the log position to look at")
    at.add_argument("--pool", default="default", help="the pool (default: default)")
    at.set_defaults(func=_runner(_replay_at, "folding the pool up to the position"))

    step = rsub.add_parser("step", help="print events one by one with the resulting lane/queue summary")
    step.add_argument("--from", dest="start", type=int, required=True, help="first position to show")
    step.add_argument("--count", type=int, default=20, help="how many events (default 20)")
    step.add_argument("--pool", default="default", help="the pool (default: default)")
    step.set_defaults(func=_runner(_replay_step, "reading the log"))

    whatif = rsub.add_parser("whatif", help="run the recorded workload again under other settings")
    whatif.add_argument("--pool", default="default", help="the pool whose workload is re-run")
    whatif.add_argument("--from", dest="start", type=int, default=0, help="first position of the workload")
    whatif.add_argument("--to", dest="end", type=int, help="last position of the workload (default: the end)")
    whatif.add_argument("--lanes", type=int, help="lanes in the counterfactual")
    whatif.add_argument("--policy", choices=["fifo", "mlfq", "deadline"], help="scheduling policy")
    whatif.add_argument("--lease", type=float, help="lease seconds")
    whatif.add_argument("--levels", type=int, help="MLFQ levels")
    whatif.add_argument("--boost", type=float, help="boost period in seconds")
    whatif.add_argument("--allotment-seconds", help="comma-separated lane-seconds per level, e.g. 10,60")
    # The deadline order's terms (docs/concepts/grant-order.md); they apply under --policy deadline.
    whatif.add_argument("--class-slack", help="seconds of slack for interactive,batch,background, e.g. 0,6,12")
    whatif.add_argument("--run-slack", type=float, help="seconds of slack per lane-second the run has used")
    whatif.add_argument("--run-slack-cap", type=float, help="the most run slack, in seconds")
    whatif.add_argument("--size-slack", type=float, help="seconds of slack per 1,000 reserved tokens")
    whatif.add_argument("--size-slack-cap", type=float, help="the most size slack, in seconds")
    whatif.add_argument("--output-credit", type=float,
                        help="seconds earlier per 1,000 max-output tokens while the rate budget binds (0: off)")
    whatif.add_argument("--output-credit-cap", type=float, help="the most output credit, in seconds")
    whatif.add_argument("--backlog-slack", type=float,
                        help="seconds of slack per turn an agent holds or has queued beyond one (0: off)")
    whatif.add_argument("--backlog-slack-cap", type=float, help="the most backlog slack, in seconds")
    whatif.add_argument("--json", action="store_true", help="print the report as JSON")
    whatif.set_defaults(func=_runner(_whatif, "running the recorded workload again"))

    audit = subparsers.add_parser("audit", help="export, explain a turn, verify invariants")
    asub = audit.add_subparsers(dest="audit_command", required=True)

    exp = asub.add_parser("export", help="events of a position range as JSON Lines")
    exp.add_argument("--from", dest="start", type=int, default=1, help="first position (default 1)")
    exp.add_argument("--to", dest="end", type=int, help="last position (default: the end)")
    exp.add_argument("--out", help="write to this file instead of stdout")
    exp.set_defaults(func=_runner(_export, "exporting events"))

    explain = asub.add_parser("explain", help="a turn's story in plain words")
    explain.add_argument("--turn", required=True, help="the turn id")
    explain.set_defaults(func=_runner(_explain, "reading the turn's history"))

    ver = asub.add_parser("verify", help="check the scheduler's and the resource manager's invariants "
                                         "over the whole log")
    ver.add_argument("--pool", help="only this pool's decisions (the resource check is skipped)")
    ver.set_defaults(func=_runner(_verify, "checking every decision"))

    acc = asub.add_parser("access", help="what an agent could reach (grants) and what it did (acquires, "
                                         "refusals with the rule that refused)")
    acc.add_argument("--agent", required=True, help="the agent id")
    acc.add_argument("--json", action="store_true", help="print the report as JSON")
    acc.set_defaults(func=_runner(_access, "reading the agent's grants and resource history"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentrm")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

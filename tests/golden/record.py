"""Records the golden logs and what the code of the time computes from them.

    python -m tests.golden.record            # both logs, then the expected outputs
    python -m tests.golden.record --expected # only recompute the expected outputs

Run it only to pin a new behaviour on purpose: tests/unit/test_golden.py folds the
recorded logs with today's code and must get exactly the recorded hashes. The API log is
a real run: the real server on the embedded PostgreSQL, driven over GraphQL, exported as
JSON Lines the way `agentrm audit export` writes them."""
from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path

from tests.golden import expected
from tests.golden.scripted import run as scripted_run

DATA = Path(__file__).resolve().parents[1] / "data"
SCRIPTED, API, EXPECTED = DATA / "golden_scripted.jsonl", DATA / "golden_api.jsonl", DATA / "golden_expected.json"


def write_lines(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
                            for line in lines))


async def _drive(server) -> None:
    from tests.client import CANCEL, COMPLETE, CREATE_POOL, HEARTBEAT, TURN_FIELDS, GraphQLClient, register
    from tests.conftest import OPERATOR_TOKEN
    streaming = f"""mutation($est: Int!, $out: Int, $wait: Float!) {{
      requestTurn(input: {{estimatedTokens: $est, maxOutputTokens: $out, waitSeconds: $wait, streams: true}}) {{
        {TURN_FIELDS} }} }}"""
    plain = f"""mutation($est: Int!, $out: Int, $wait: Float!) {{
      requestTurn(input: {{estimatedTokens: $est, maxOutputTokens: $out, waitSeconds: $wait}}) {{ {TURN_FIELDS} }} }}"""
    append = """mutation($content: String!) { appendContext(input: {role: "user", content: $content, pinned: false}) {
      hotTokens } }"""
    async with GraphQLClient(server, OPERATOR_TOKEN) as op:
        await op(CREATE_POOL, name="gold", lanes=2, rpm=6000, tpm=1_000_000, lease=1.5, boost=None)
        agents = [await register(op, "a0", "gold", "INTERACTIVE"), await register(op, "a1", "gold", "BATCH"),
                  await register(op, "a2", "gold", "BACKGROUND", budget=4096)]
        clients = [await GraphQLClient(server, token).__aenter__() for _, token in agents]
        try:
            a0, a1, a2 = clients
            await a0(append, content="Remember: the golden log has three agents.")
            t = (await a0(streaming, est=300, out=100, wait=30))["requestTurn"]
            await a0(HEARTBEAT, id=t["id"])
            await a0(COMPLETE, id=t["id"], outcome="OK", p=280, c=90,
                     headers={"x-ratelimit-remaining-requests": "5990", "x-ratelimit-remaining-tokens": "990000",
                              "x-ratelimit-limit-tokens": "1000000"})
            t = (await a1(plain, est=500, out=200, wait=30))["requestTurn"]
            await a1(COMPLETE, id=t["id"], outcome="RATE_LIMITED", p=0, c=0, retry=0.2)
            for client in (a0, a1, a2):
                t = (await client(plain, est=200, out=50, wait=30))["requestTurn"]
                await client(COMPLETE, id=t["id"], outcome="OK", p=190, c=40)
            t = (await a2(plain, est=200, out=50, wait=30))["requestTurn"]
            await a2(COMPLETE, id=t["id"], outcome="ERROR", p=10, c=0)
            # Two lanes held, a third turn queued and cancelled by its agent.
            g1 = (await a0(plain, est=100, out=10, wait=30))["requestTurn"]
            g2 = (await a1(plain, est=100, out=10, wait=30))["requestTurn"]
            q = (await a2(plain, est=100, out=10, wait=0))["requestTurn"]
            await a2(CANCEL, id=q["id"])
            await a1(COMPLETE, id=g2["id"], outcome="OK", p=90, c=5)
            # g1 hangs: reaped by lease.
            async with a0.subscribe("subscription($id: ID!) { turn(turnId: $id) { status } }", id=g1["id"]) as sub:
                status = (await sub.next())["turn"]["status"]
                while status != "REAPED":
                    status = (await sub.next(timeout=30))["turn"]["status"]
            hung = (await a2(streaming, est=100, out=10, wait=30))["requestTurn"]
            async with a2.subscribe("subscription($id: ID!) { turn(turnId: $id) { status } }", id=hung["id"]) as sub:
                status = (await sub.next())["turn"]["status"]
                while status != "REAPED":
                    status = (await sub.next(timeout=30))["turn"]["status"]
            agent_id = agents[2][0]
            await op("mutation($id: ID!) { hibernateAgent(agentId: $id) { state } }", id=agent_id)
            t = (await a2(plain, est=100, out=10, wait=30))["requestTurn"]   # wakes it
            await a2(COMPLETE, id=t["id"], outcome="OK", p=80, c=8)
        finally:
            for client in clients:
                await client.__aexit__(None, None, None)


async def _record(url: str) -> list[dict]:
    from app.audit.export import export
    from tests.conftest import Server
    server = await Server(url).start()
    try:
        await _drive(server)
        rt = server.runtime
        await rt.projector.catch_up()
        out = io.StringIO()
        await export(rt.store, out)
    finally:
        await server.stop()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def record_api() -> list[dict]:
    from app.db.embedded import EmbeddedPostgres
    from tests.conftest import ROOT, make_database
    pg = EmbeddedPostgres(ROOT / ".agentrm" / "test-cluster")
    pg.start()
    try:
        url = make_database(pg.url("postgres"), "golden_record")   # migrations outside the loop
        return asyncio.run(_record(url))
    finally:
        pg.stop()


def main(argv: list[str]) -> None:
    if "--expected" not in argv:
        write_lines(SCRIPTED, scripted_run())
        write_lines(API, record_api())
    EXPECTED.write_text(json.dumps({"scripted": expected.compute(SCRIPTED, "golden"),
                                    "api": expected.compute(API, "gold")}, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])

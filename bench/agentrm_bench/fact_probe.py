"""A planted-facts probe in phrasings this project never wrote, and the agent chatter it is
buried in.

The facts (``data/heldout_planted_facts.json``) are held out: written blind for this probe,
by someone who had read neither the extractor nor the earlier sets' misses, and never used
to tune it (a separate, labelled set does that). Each earlier held-out set became a
development set once its misses were examined to improve the extractor and the facts
block (``data/dev_planted_facts.json``, then ``data/dev2_planted_facts.json``); their
scores are optimistic. Each fact is one message in the way a person or a tool would
put it, inside ~300 messages (~29k tokens) of ordinary agent work on a payments ledger:
tool output, narration, questions, small talk. The chatter is generated from a seed, so
every run sees the same session.

A fact counts as present in a view when every string of its ``present_if`` occurs in the
view's text (the agent could copy the value from there), in any item: the key-facts block,
a message, a summary, a chunk.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "heldout_planted_facts.json"
DEV_DATA = DATA.with_name("dev_planted_facts.json")
DEV2_DATA = DATA.with_name("dev2_planted_facts.json")
FACT_SETS = {"heldout": DATA, "dev": DEV_DATA, "dev2": DEV2_DATA}

_SERVICES = ["ledger-api", "payouts-worker", "recon-batch", "fx-rates", "notifier", "audit-export"]
_MODULES = ["ledger/balances.py", "ledger/transfers.py", "payouts/batch.py", "payouts/retry.py",
            "recon/matcher.py", "recon/report.py", "common/money.py", "api/views.py"]
_FUNCS = ["apply_batch", "match_entries", "build_file", "settle", "round_half_even", "post_journal",
          "load_rates", "diff_balances"]
_PEOPLE = ["Marta", "Jonas", "Aisha", "Ken", "Olu", "Bea"]
_TESTS = ["test_rounding", "test_partial_refund", "test_currency_mismatch", "test_idempotent_retry",
          "test_empty_batch", "test_negative_balance"]


@dataclass(frozen=True)
class PlantedFact:
    id: int
    kind: str
    role: str
    message: str
    present_if: tuple[str, ...]


def planted_facts(path: Path = DATA) -> list[PlantedFact]:
    raw = json.loads(path.read_text(encoding="utf-8"))["facts"]
    return [PlantedFact(f["id"], f["kind"], f["role"], f["message"], tuple(f["present_if"])) for f in raw]


def chatter(rng: random.Random, turn: int) -> tuple[str, str]:
    """One ordinary message of the session (none of it a planted fact)."""
    mod, fn, svc = rng.choice(_MODULES), rng.choice(_FUNCS), rng.choice(_SERVICES)
    test, person = rng.choice(_TESTS), rng.choice(_PEOPLE)
    roll = rng.random()
    if roll < 0.14:
        return "user", rng.choice([
            f"How's it going with {fn}? No rush, just checking before my next call.",
            f"Can you look at why {test} is flaky on CI? It passed twice and failed once this morning.",
            "Looks fine to me. Go ahead with the next part.",
            f"{person} asked whether the {svc} change needs a migration. Does it?",
            f"Could you give me a two-line status on {svc} that I can forward?",
            "Hmm, not sure about that approach. What are the alternatives?",
            f"Let's not overthink {fn}; a straightforward version is fine for now.",
        ])
    if roll < 0.46:
        return "assistant", " ".join(rng.sample([
            f"I'm reading {mod} to see how {fn} handles an empty batch. It builds the whole list in "
            f"memory first and then walks it twice, once to validate and once to post, which is probably "
            f"why memory spikes on large days.",
            f"I'll split {fn} into a validation pass and a posting pass so the posting one can stream. "
            f"That should bring peak memory down noticeably on the bigger merchants without changing "
            f"the output.",
            f"The failing assertion in {test} compares floats after a currency conversion; it looks like a "
            f"rounding-order issue rather than a logic bug. I'll check how common/money.py rounds before "
            f"changing the test.",
            f"Next step: update the two callers of {fn} in {svc} and rerun its tests.",
            f"Running the {svc} suite again with the change to {fn} applied.",
            f"I compared the {svc} config between staging and production; apart from log levels and "
            f"replica counts they match, so the difference we saw is not a config drift.",
            f"That works. I'll keep the old code path behind the existing switch for one release so we can "
            f"roll back quickly if {person} sees anything odd in the reports.",
            f"Summary so far: {fn} is refactored, its tests pass locally, and I still need to look at the "
            f"callers in {svc}. Nothing blocking.",
        ], 2))
    if roll < 0.66:
        passed, failed = rng.randint(40, 380), rng.randint(0, 2)
        lines = [f"$ pytest tests/{svc.replace('-', '_')} -q",
                 f"{'.' * rng.randint(20, 60)}{'F' * failed}{'.' * rng.randint(5, 30)}"]
        for _ in range(failed):
            lines += [f"FAILED tests/{svc.replace('-', '_')}/{test}.py::{test}_case_{rng.randint(1, 9)} - "
                      f"assert {rng.randint(100, 999)}.{rng.randint(10, 99)} == "
                      f"{rng.randint(100, 999)}.{rng.randint(10, 99)}"]
        if rng.random() < 0.6:
            lines += ["", "=============== warnings summary ===============",
                      f"tests/{svc.replace('-', '_')}/conftest.py:{rng.randint(10, 90)}: DeprecationWarning: "
                      f"datetime.utcnow() is deprecated and scheduled for removal in a future version. Use "
                      f"timezone-aware objects to represent datetimes in UTC.",
                      "  -- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html"]
        lines.append(f"{passed} passed, {failed} failed in {rng.uniform(2, 40):.2f}s")
        return "tool", "\n".join(lines)
    if roll < 0.80:
        entries = [f"{rng.choice(['-rw-r--r--', 'drwxr-xr-x'])} 1 dev dev {rng.randint(200, 90000):>6} "
                   f"{rng.choice(['Jan', 'Feb', 'Mar'])} {rng.randint(1, 28):>2} "
                   f"{rng.choice(_MODULES).split('/')[-1].replace('.py', '')}_{rng.randint(1, 40)}.py"
                   for _ in range(rng.randint(8, 16))]
        return "tool", f"$ ls -l {mod.rsplit('/', 1)[0]}/\n" + "\n".join(entries)
    if roll < 0.90:
        commits = [f"{rng.getrandbits(28):07x} {rng.choice(['fix', 'refactor', 'test', 'docs', 'chore'])}: "
                   f"{rng.choice(['tidy', 'simplify', 'cover', 'rename', 'document'])} {rng.choice(_FUNCS)} "
                   f"in {rng.choice(_SERVICES)}"
                   for _ in range(rng.randint(8, 14))]
        return "tool", "$ git log --oneline -n 14\n" + "\n".join(commits)
    return "assistant", rng.choice([
        f"Quick note on naming: {fn} is used for two slightly different things in {svc}, which made the "
        f"diff harder to read than it should be. I left it alone for now to keep this change small.",
        f"I had a look at the open pull requests touching {svc}; none of them overlaps with this work, "
        f"so we should not get conflicts.",
        f"The dashboard for {svc} shows the usual daily shape: a bump at the morning batch, quiet "
        f"afterwards. Nothing unusual in the last week.",
    ])


@dataclass(frozen=True)
class ProbeSession:
    messages: tuple[tuple[str, str], ...]      # (role, content)
    planted_at: dict[int, int]                 # fact id -> message index


def probe_session(seed: int = 29, messages: int = 300, facts: list[PlantedFact] | None = None) -> ProbeSession:
    """``messages`` messages with the planted facts (the 22 held-out ones unless given) at
    seeded, evenly spread places (none among the last 15, which any view shows verbatim)."""
    facts = planted_facts() if facts is None else facts
    rng = random.Random(seed)
    step = (messages - 20) / len(facts)
    places = {int(4 + i * step + rng.uniform(0, step - 1)): f for i, f in enumerate(facts)}
    out: list[tuple[str, str]] = []
    planted: dict[int, int] = {}
    for index in range(messages):
        fact = places.get(index)
        if fact is not None:
            planted[fact.id] = index
            out.append((fact.role, fact.message))
        else:
            out.append(chatter(rng, index))
    for _role, content in (m for i, m in enumerate(out) if i not in planted.values()):
        for fact in facts:
            clash = [s for s in fact.present_if if s in content]
            if clash:   # chatter must never "contain" a planted fact
                raise AssertionError(f"chatter contains {clash} of fact {fact.id}: {content[:80]}")
    return ProbeSession(tuple(out), planted)


def present(view_text: str, facts: list[PlantedFact] | None = None) -> dict[int, bool]:
    return {f.id: all(s in view_text for s in f.present_if) for f in facts or planted_facts()}

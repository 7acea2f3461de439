"""Retention benchmark: does the agent still see what matters after hundreds of turns?

``agentrm bench context`` runs three context strategies over the SAME seeded synthetic
sessions at budgets of 2k, 4k and 8k tokens:

- ``truncation``: a sliding window, the pinned system prompt plus the most recent messages
  that fit. What a naive agent loop does when it hits the window.
- ``running-summary``: one running summary plus the recent messages, the common approach
  of agent tools (see RunningSummary for its sources), re-written with the same extractive
  summarizer AgentRM uses, so the comparison is about the policy, not the model.
- ``agentrm``: hot / warm (summaries + key facts) / cold (chunks, embedded) tiers with
  adaptive compaction and ``assemble_view``, the probe question as the retrieval query.

Synthetic sessions (published parameters, ``SessionParameters``): a coding agent's session
of user requests, assistant narration and tool output (test runs, listings, logs, grep
hits, tracebacks: they carry plenty of *incidental* paths, numbers and errors, so the key
facts must be found among look-alikes). Planted into it, at random positions, are key facts
of several kinds (instructions, identifiers, paths, numbers with units, a URL, an error,
and decisions / settings that are later superseded), each with an exact answer string and
a probe question.

Metrics (per strategy and budget, averaged over sessions):
- key-fact retention: at four checkpoints (25/50/75/100 % of the session), the share of
  the facts planted so far whose CURRENT answer string is in the view the agent would get
  for its next turn with no query. Only the view counts: an archive the agent does not see
  is not retention.
- probe answerability: at the end, the share of probes whose answer string is in the view
  assembled for that probe (the probe is the query; the baselines have no retrieval and
  ignore it).
- stale-only: probes about superseded facts where the view holds the old value but not
  the new one (the view would mislead the agent).
- mean / max tokens in the view (exact tiktoken count incl. chat overhead; never > budget).
- compaction cost: number of summarizer runs, sentences the summarizer embedded, estimated
  CPU seconds (sentences x per-sentence CPU measured at start; see ``_calibrate``), summary
  tokens written; for agentrm also the cold chunks embedded off the request path.
- view assembly latency p50/p95 (for agentrm: query embedding + exact cosine + assembly).
"""
from __future__ import annotations

import json
import pathlib
import random
import statistics
import string
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from app.context.embedder import MiniLMEmbedder, default_embedder
from app.context.summarize import ExtractiveSummarizer
from app.context.tokens import REPLY_PRIMING_TOKENS, count_message, count_text
from app.domain import context as domain
from app.stats import percentile

from .agentrm_context import AgentRMContext, CachingEmbedder, view_messages

BUDGETS = (2_000, 4_000, 8_000)
STRATEGIES = ("truncation", "running-summary", "agentrm", "agentrm -facts", "agentrm -supersession")
# Structure must earn its place: each AgentRM variant removes one piece, alone.
VARIANTS: dict[str, dict[str, Any]] = {
    "agentrm -facts": {"view_settings": domain.ViewSettings(facts_share=0.0)},
    "agentrm -supersession": {"supersession": False}}
# Query-view ablations of the per-style table: the same fold, each probe's view built again
# with one ranking idea removed (AgentRMContext.view's ranking options).
STYLE_ABLATIONS: dict[str, dict[str, Any]] = {
    "-heads": {"heads": 0}, "-lexical neighbours": {"lexical_neighbours": ()},
    "+question words": {"question_words": True}}


# -- synthetic sessions -------------------------------------------------------------------
@dataclass(frozen=True)
class SessionParameters:
    turns: int = 320                  # messages after the system prompt
    seconds_between_turns: tuple[float, float] = (4.0, 40.0)
    planted_instructions: int = 3
    planted_identifiers: int = 3
    planted_paths: int = 3
    planted_quantities: int = 2
    planted_urls: int = 1
    planted_errors: int = 1
    superseded_decisions: int = 2     # "we will use A for X" ... later "... B for X instead"
    superseded_settings: int = 2      # "set the timeout to 30 s" ... later "to 45 s"; deadlines
    style: str = "mixed"              # worklog | chat | ops; mixed: one per session, by seed
    paraphrase: bool = True           # facts and probes in one of several wordings, not the templates'


@dataclass
class PlantedFact:
    fact_id: str
    kind: str
    turn: int                 # index in the session where it is stated
    answer: str               # exact string the agent needs (the current value)
    question: str
    stale: str | None = None  # the superseded value, when there is one
    stale_turn: int | None = None  # when the old value was stated (before ``turn``)


@dataclass
class Session:
    session_id: str
    messages: list[tuple[str, str, bool, float]]   # role, content, pinned, at
    facts: list[PlantedFact]
    tokens: int = 0


_MODULES = ["billing", "auth", "scheduler", "ingest", "reports", "search", "notifications", "export",
            "webhooks", "inventory", "pricing", "audit"]
_FUNCS = ["parse_row", "apply_discount", "retry_send", "load_config", "flush_batch", "resolve_user",
          "render_invoice", "compute_total", "open_session", "validate_payload", "merge_records"]
_STORES = ["Redis", "Memcached", "Hazelcast", "DynamoDB", "KeyDB", "Aerospike", "Couchbase", "Etcd"]
_BROKERS = ["RabbitMQ", "Kafka", "NATS", "Pulsar", "ActiveMQ", "Redpanda"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
_MONTHS = ["March", "April", "May", "June", "July", "September", "October"]
_PEOPLE = ["Maria Gonzalez", "Tom Becker", "Aiko Tanaka", "Priya Raman", "Lars Nilsson", "Omar Haddad"]


def _word(rng: random.Random, n: int = 6) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(n))


def _filler(rng: random.Random, turn: int) -> tuple[str, str]:
    """One ordinary message of the session: realistic noise, full of look-alike facts."""
    mod, fn = rng.choice(_MODULES), rng.choice(_FUNCS)
    kind = rng.random()
    if kind < 0.12:
        return "user", rng.choice([
            f"How is the {mod} refactor going? Please keep the changes small.",
            f"Can you also check why {fn} is slow when the batch is large?",
            "Thanks, that looks reasonable. Continue with the next step.",
            f"I talked to {rng.choice(_PEOPLE)} about the {mod} module; they are fine with the plan.",
            f"Please summarise what changed in {mod} so far when you get a moment.",
        ])
    if kind < 0.45:
        return "assistant", rng.choice([
            f"Let me look at app/{mod}/{fn}.py to understand how {fn} handles empty input. "
            f"The current implementation loops over every row and calls the database once per row.",
            f"I'll refactor {fn} so that it batches the queries. This should cut the number of round "
            f"trips from {rng.randint(40, 900)} to {rng.randint(2, 9)} for a typical request.",
            f"The test failure looks unrelated to my change: it depends on the wall clock. "
            f"I will rerun the {mod} suite to confirm before touching anything else.",
            f"Next I need to update the callers of {fn} in the {mod} package and adjust their tests.",
            f"Running the {mod} test suite again after the change to {fn}.",
            f"The helper in app/{mod}/util.py duplicates logic from app/common/{fn}.py; I will leave it "
            f"for now and note it for a later cleanup.",
        ])
    if kind < 0.62:
        passed, failed = rng.randint(20, 400), rng.randint(0, 3)
        lines = ["============ test session starts ============",
                 f"collected {passed + failed} items",
                 f"tests/{mod}/test_{fn}.py {'.' * rng.randint(5, 30)}"]
        for _ in range(failed):
            lines.append(f"FAILED tests/{mod}/test_{fn}.py::test_{_word(rng, 5)} - AssertionError: "
                         f"assert {rng.randint(1, 99)} == {rng.randint(1, 99)}")
        lines.append(f"===== {passed} passed, {failed} failed in {rng.uniform(0.5, 40):.2f}s =====")
        return "tool", "\n".join(lines)
    if kind < 0.74:
        entries = [f"app/{mod}/{_word(rng, rng.randint(4, 9))}.py" for _ in range(rng.randint(6, 14))]
        return "tool", "\n".join(entries)
    if kind < 0.86:
        lines = []
        for _ in range(rng.randint(4, 10)):
            lines.append(f"2024-05-{rng.randint(10, 28)} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                         f"{rng.randint(0, 59):02d} INFO {mod}-worker-{rng.randint(1, 8)} processed "
                         f"{rng.randint(10, 5000)} items in {rng.randint(3, 900)} ms")
        if rng.random() < 0.3:
            lines.append(f"2024-05-{rng.randint(10, 28)} 12:00:0{rng.randint(0, 9)} ERROR {mod}-worker-"
                         f"{rng.randint(1, 8)} upstream returned HTTP {rng.choice([500, 502, 503, 504])}")
        return "tool", "\n".join(lines)
    if kind < 0.94:
        hits = [f"app/{mod}/{_word(rng, 6)}.py:{rng.randint(3, 400)}:    result = {fn}(rows, "
                f"limit={rng.randint(10, 500)})" for _ in range(rng.randint(3, 7))]
        return "tool", "\n".join(hits)
    return "tool", "\n".join([
        "Traceback (most recent call last):",
        f'  File "/srv/app/{mod}/{fn}.py", line {rng.randint(10, 300)}, in {fn}',
        f"    total += row['{_word(rng, 5)}']",
        f"KeyError: '{_word(rng, 5)}'"])


def _planted(rng: random.Random, params: SessionParameters, turns: int,
             wordings: dict[str, tuple] | None = None) -> list[tuple[int, str, str, PlantedFact]]:
    """(turn, role, content, fact) for every planted statement, superseding ones included."""
    out: list[tuple[int, str, str, PlantedFact]] = []
    used_turns: set[int] = set()
    wordings = PARAPHRASES if wordings is None else wordings

    def pick_turn(lo: float, hi: float) -> int:
        while True:
            t = rng.randint(int(lo * turns), int(hi * turns) - 1)
            if t not in used_turns:
                used_turns.add(t)
                return t

    def add(kind: str, role: str, content: str, answer: str, question: str, lo=0.02, hi=0.9) -> None:
        t = pick_turn(lo, hi)
        if params.paraphrase and question in wordings:
            statements, questions = wordings[question]
            content, question = rng.choice(statements).format(a=answer), rng.choice(questions)
        out.append((t, role, content, PlantedFact(f"{kind}-{len(out)}", kind, t, answer, question)))

    branch = f"release-train-{rng.randint(10, 99)}"
    lint = f"make lint-{_word(rng, 5)}"
    frozen_dir = f"vendor/{_word(rng, 7)}/"
    instructions = [
        (f"Important: never push directly to main; always open the pull request against the {branch} branch.",
         branch, "Which branch must pull requests be opened against?"),
        (f"One rule for the rest of this session: you must run `{lint}` before every commit.",
         lint, "Which command must be run before every commit?"),
        (f"Do not modify anything under {frozen_dir} because that directory is generated code.",
         frozen_dir, "Which directory must not be modified because it is generated?"),
    ]
    for content, answer, question in instructions[:params.planted_instructions]:
        add("instruction", "user", content, answer, question)

    order = f"ORD-{rng.randint(10000, 99999)}"
    ticket = f"{rng.choice(['PAY', 'OPS', 'CORE', 'BILL'])}-{rng.randint(1000, 9999)}"
    tenant = str(uuid.UUID(int=rng.getrandbits(128)))
    identifiers = [
        (f"The customer's order id is {order}; use it when you reproduce the refund bug.",
         order, "What is the customer's order id for the refund bug?"),
        (f"Please track all of this work under ticket {ticket} in the commit messages.",
         ticket, "Which ticket tracks this work?"),
        (f"The staging tenant UUID is {tenant}.", tenant, "What is the staging tenant UUID?"),
    ]
    for content, answer, question in identifiers[:params.planted_identifiers]:
        add("identifier", "user", content, answer, question)

    migration = f"/srv/billing/migrations/{rng.randint(100, 999):04d}_add_{_word(rng, 6)}.sql"
    fixture = f"tests/fixtures/{_word(rng, 7)}_refunds.json"
    config = f"/etc/agentrm/{_word(rng, 6)}/payments.yaml"
    paths = [
        ("assistant", f"I created the new migration at {migration} and left the old one untouched.",
         migration, "Where is the new migration file?"),
        ("assistant", f"The failing refund fixture lives in {fixture}, so I will edit that file.",
         fixture, "Which file holds the failing refund fixture?"),
        ("user", f"The payment service reads its configuration from {config} in production.",
         config, "Where does the payment service read its configuration from in production?"),
    ]
    for role, content, answer, question in paths[:params.planted_paths]:
        add("path", role, content, answer, question)

    mem = f"{rng.choice([384, 512, 768, 1536, 3072])} MiB"
    budget = f"${rng.randint(2, 19)},{rng.randint(100, 999)}"
    quantities = [
        (f"The memory limit for the export worker pods is {mem}.", mem,
         "What is the memory limit for the export worker pods?"),
        (f"Finance approved a monthly vendor budget of {budget} for the OCR service.", budget,
         "What monthly vendor budget did finance approve for the OCR service?"),
    ]
    for content, answer, question in quantities[:params.planted_quantities]:
        add("quantity", "user", content, answer, question)

    if params.planted_urls:
        url = f"https://docs.{_word(rng, 6)}.example.com/api/v{rng.randint(2, 5)}/{_word(rng, 8)}"
        add("url", "user", f"The refunds API spec is published at {url} if you need the field names.",
            url, "Where is the refunds API spec published?")
    if params.planted_errors:
        host = f"db-primary-{rng.randint(2, 9)}.{_word(rng, 5)}.internal"
        add("error", "tool",
            f"psycopg.OperationalError: connection to server at \"{host}\" "
            f"(10.0.{rng.randint(0, 9)}.{rng.randint(2, 250)}), "
            f"port 5432 failed: Connection refused", host,
            "Which database host refused the connection?")

    # Superseded facts: stated early, restated with a new value later. The answer is the new value.
    def superseded(kind: str, old: str, new: str, first: str, second: str, question: str) -> None:
        t1 = pick_turn(0.02, 0.45)
        t2 = pick_turn(0.5, 0.92)
        if params.paraphrase and question in wordings:
            (firsts, seconds), questions = wordings[question]
            first, second = rng.choice(firsts).format(a=old), rng.choice(seconds).format(a=new)
            question = rng.choice(questions)
        fact = PlantedFact(f"{kind}-{len(out)}", kind, t2, new, question, stale=old, stale_turn=t1)
        out.append((t1, "user", first, fact))
        out.append((t2, "user", second, fact))

    stores, brokers = rng.sample(_STORES, 2), rng.sample(_BROKERS, 2)
    decisions = [
        (stores[0], stores[1], f"Decision: we will use {stores[0]} for the session cache.",
         f"Change of plan: we will use {stores[1]} for the session cache instead.",
         "Which store do we use for the session cache?"),
        (brokers[0], brokers[1], f"We decided to go with {brokers[0]} as the message broker.",
         f"Update: we decided to go with {brokers[1]} as the message broker instead.",
         "Which message broker did we decide on?"),
    ]
    for old, new, first, second, question in decisions[:params.superseded_decisions]:
        superseded("decision", old, new, first, second, question)

    t_old, t_new = rng.sample([15, 20, 30, 45, 60, 90], 2)
    d1, d2 = rng.sample(_DAYS, 2)
    m1, m2 = rng.sample(_MONTHS, 2)
    day1, day2 = rng.randint(1, 28), rng.randint(1, 28)
    settings = [
        (f"{t_old} s", f"{t_new} s", f"Set the upstream request timeout to {t_old} s for now.",
         f"Set the upstream request timeout to {t_new} s, the vendor asked for it.",
         "What is the upstream request timeout?"),
        (f"{d1} {day1} {m1}", f"{d2} {day2} {m2}", f"The release deadline is {d1} {day1} {m1}.",
         f"Heads up: the release deadline is now {d2} {day2} {m2}.", "When is the release deadline?"),
    ]
    for old, new, first, second, question in settings[:params.superseded_settings]:
        superseded("setting", old, new, first, second, question)
    return out


# Other wordings of every planted fact, and probes that share few words with them: the
# facts extractor and the retrieval must not depend on the generator's own templates.
# Keyed by the template's probe; {a} is the answer string. Superseding facts have
# (first statements, later statements).
PARAPHRASES: dict[str, tuple] = {
    "Which branch must pull requests be opened against?": (
        ["Heads-up from the release managers: PRs go to {a}, not main, until further notice.",
         "btw main is locked, target {a} with anything you open",
         "Merge requests should be based on {a}; nobody pushes to main directly."],
        ["Where do my PRs need to go?", "What is the target branch for merge requests?"]),
    "Which command must be run before every commit?": (
        ["Before you commit anything, `{a}` has to pass locally, every single time.",
         "Reminder: commits without a clean `{a}` run get rejected by the hook, so run it first."],
        ["What do I have to run prior to committing?", "Which check is mandatory ahead of each commit?"]),
    "Which directory must not be modified because it is generated?": (
        ["Hands off {a}: it's regenerated by the build and edits there get overwritten.",
         "Everything in {a} is produced by the codegen step, so leave those files alone."],
        ["Which folder is machine-generated and off limits?", "What should I never edit by hand?"]),
    "What is the customer's order id for the refund bug?": (
        ["The refund complaint came in for order {a}, reproduce with that one.",
         "Repro case for the refunds issue: order {a}."],
        ["Which order reproduces the refund problem?", "What order number was the refund complaint about?"]),
    "Which ticket tracks this work?": (
        ["Reference {a} in every commit message for this change.",
         "This whole thing is filed as {a} in the tracker."],
        ["What is the tracker reference for this change?", "Which issue key goes in the commits?"]),
    "What is the staging tenant UUID?": (
        ["For staging, the tenant to use is {a}.", "staging tenant -> {a} (don't use the prod one)"],
        ["Which tenant id do we use in staging?", "What's the tenant identifier for the staging env?"]),
    "Where is the new migration file?": (
        ["New migration written: {a}. The previous one is unchanged.",
         "I put the schema change in {a}."],
        ["What's the path of the migration I added?", "Where did the schema change end up?"]),
    "Which file holds the failing refund fixture?": (
        ["The fixture that breaks the refund tests is {a}; I'll fix it there.",
         "Found it: the bad refund test data sits in {a}."],
        ["Where is the broken test data for refunds?", "Which fixture file breaks the refund tests?"]),
    "Where does the payment service read its configuration from in production?": (
        ["In prod, payments loads its settings from {a}.",
         "FYI the production config for the payment service is {a}."],
        ["Which config file does payments use in prod?",
         "What's the production settings path of the payment service?"]),
    "What is the memory limit for the export worker pods?": (
        ["Export workers are capped at {a} of memory per pod.",
         "We give each export worker pod {a}, no more."],
        ["How much RAM may an export worker pod use?", "What's the pod memory cap for exporters?"]),
    "What monthly vendor budget did finance approve for the OCR service?": (
        ["Finance signed off on {a} a month for the OCR vendor.",
         "OCR vendor spend approved: {a} per month."],
        ["How much can we spend on OCR each month?", "What's the approved monthly OCR spend?"]),
    "Where is the refunds API spec published?": (
        ["Field names for refunds are documented at {a}.", "refunds API docs: {a}"],
        ["Where can I find the refunds API documentation?", "What's the link to the refund endpoint docs?"]),
    "Which store do we use for the session cache?": (
        (["Decision: we will use {a} for the session cache.", "Session caching will live in {a}."],
         ["Change of plan: sessions get cached in {a} from now on.",
          "Scratch the earlier cache choice, it's {a} for sessions instead."]),
        ["What backs the session cache?", "Where are sessions cached?"]),
    "Which message broker did we decide on?": (
        (["We decided to go with {a} as the message broker.", "Messaging will run on {a}."],
         ["Update: the broker is {a} now, the old choice is dropped.",
          "We're switching the message bus to {a} instead."]),
        ["What's our message bus?", "Which broker carries our messages?"]),
    "What is the upstream request timeout?": (
        (["Set the upstream request timeout to {a} for now.", "Upstream calls should give up after {a}."],
         ["The vendor asked us to allow {a} before upstream calls time out.",
          "Bump the upstream timeout: {a} from today."]),
        ["How long before an upstream call times out?", "What's the timeout for calls to the vendor?"]),
    "When is the release deadline?": (
        (["The release deadline is {a}.", "We have to ship by {a}."],
         ["Heads up: the release moved, we now ship on {a}.", "New ship date: {a}."]),
        ["By when do we have to ship?", "What's the ship date?"]),
}


# The held-out styles' own wordings (same keys and answers): terse as ticket comments are,
# or spoken, as in a transcribed call.
_TICKET_WORDINGS: dict[str, tuple] = {
    "Which branch must pull requests be opened against?": (
        ["Per release mgmt, target branch for anything touching this = {a}. Main is frozen.",
         "PR base: {a} (main stays closed until the train leaves)",
         "Don't open against main pls, {a} is where reviews happen this cycle."],
        ["Base branch for my PR?", "Which branch do reviews happen on this cycle?"]),
    "Which command must be run before every commit?": (
        ["CI gate: `{a}`, run it before each commit or the hook bounces you.",
         "Pre-commit requirement: {a}. No exceptions.",
         "heads up the hook runs {a} on every commit, run it locally first"],
        ["What does the pre-commit hook run?", "Which command gates commits?"]),
    "Which directory must not be modified because it is generated?": (
        ["{a} is codegen output, edits get clobbered on the next build.",
         "Generated: {a}. Touch the generator, not the output."],
        ["Which folder gets clobbered by the build?", "Where is the codegen output?"]),
    "What is the customer's order id for the refund bug?": (
        ["Customer repro: {a}", "Affected order: {a} (refund shows twice)."],
        ["Which order shows the double refund?", "What's the affected order?"]),
    "Which ticket tracks this work?": (
        ["Linked: {a}. Put it in commit subjects.", "Tracking under {a}."],
        ["What goes in the commit subjects?", "Under which key is this tracked?"]),
    "What is the staging tenant UUID?": (
        ["stg tenant {a}", "Use tenant {a} for the staging runs."],
        ["Tenant for staging runs?", "Which stg tenant?"]),
    "Where is the new migration file?": (
        ["Added migration {a}; old one untouched.", "Schema change lives at {a} now."],
        ["Which migration did you add?", "Path of the schema change?"]),
    "Which file holds the failing refund fixture?": (
        ["Culprit fixture: {a}.", "Bad data is in {a}, patching."],
        ["Which fixture is the culprit?", "Where's the bad test data?"]),
    "Where does the payment service read its configuration from in production?": (
        ["Prod config path for payments: {a}", "payments in prod reads {a}"],
        ["Config path of payments in prod?", "What does payments read in production?"]),
    "What is the memory limit for the export worker pods?": (
        ["Pod limit for export workers: {a}.", "export-worker mem cap = {a}"],
        ["Memory cap of an export-worker pod?", "How much memory does an export pod get?"]),
    "What monthly vendor budget did finance approve for the OCR service?": (
        ["OCR vendor: {a}/mo approved by finance.", "Finance OK'd {a} monthly for OCR."],
        ["Monthly OCR allowance?", "What did finance OK for OCR?"]),
    "Where is the refunds API spec published?": (
        ["Spec for refunds: {a}", "API reference for refunds -> {a}"],
        ["Link to the refunds spec?", "Where's the refunds API reference?"]),
    "Which store do we use for the session cache?": (
        (["Session cache: {a}.", "Going to back sessions with {a}."],
         ["Revised: session cache moves to {a}.", "Sessions -> {a} (replacing the earlier pick)."]),
        ["Session cache backend?", "What holds sessions?"]),
    "Which message broker did we decide on?": (
        (["Broker: {a}.", "Queueing goes through {a}."],
         ["Broker changed to {a}.", "We're on {a} for messaging now."]),
        ["Which broker?", "What does queueing go through?"]),
    "What is the upstream request timeout?": (
        (["Upstream timeout {a} for the time being.", "Timeout to upstream = {a}."],
         ["Vendor wants {a} on the upstream timeout, updated.", "upstream timeout -> {a}"]),
        ["Upstream timeout?", "How long do we wait on the vendor?"]),
    "When is the release deadline?": (
        (["Target release: {a}.", "Ship date {a}."],
         ["Release slipped to {a}.", "Revised ship date: {a}."]),
        ["When do we release?", "Current ship date?"]),
}


_MEETING_WORDINGS: dict[str, tuple] = {
    "Which branch must pull requests be opened against?": (
        ["Ana: right, so for this cycle everything goes into {a}, main is closed until the train leaves, okay?",
         "Ana: so the branch for pull requests this time round is {a}, yeah, not main"],
        ["Which branch do pull requests go into this cycle?", "What did Ana say about the branch?"]),
    "Which command must be run before every commit?": (
        ["Ben: and before anybody commits please just run {a}, it takes like a minute",
         "Ben: the hook will reject you unless {a} is clean so run that first"],
        ["What should be run before committing?", "What makes the hook reject a commit?"]),
    "Which directory must not be modified because it is generated?": (
        ["Ana: oh and nobody touch {a}, that gets regenerated every build",
         "Ana: {a} is all generated stuff so hands off"],
        ["Which directory gets regenerated on every build?", "What's all generated stuff?"]),
    "What is the customer's order id for the refund bug?": (
        ["Cleo: the customer who complained, their order was {a}, use that to reproduce",
         "Cleo: yeah it's order {a} that has the double refund"],
        ["Which order did the customer complain about?", "Which order has the double refund?"]),
    "Which ticket tracks this work?": (
        ["Ben: we're tracking it as {a} so stick that in your commit messages",
         "Ben: the ticket is {a} by the way"],
        ["How are we tracking this?", "What's the ticket?"]),
    "What is the staging tenant UUID?": (
        ["Cleo: for staging use tenant {a}, not the prod one",
         "Cleo: staging tenant is {a}, I'll paste it in the chat too"],
        ["Which tenant for staging?", "What did Cleo paste for staging?"]),
    "Where is the new migration file?": (
        ["So I've added the migration, it's at {a}, I didn't change the old one.",
         "The new migration went into {a}."],
        ["Where's the migration you added?", "Where did the new migration go?"]),
    "Which file holds the failing refund fixture?": (
        ["The broken refund fixture is the one in {a}, I'm fixing it.",
         "It turned out {a} had the bad test data."],
        ["Which file had the bad test data?", "Where's the broken refund fixture?"]),
    "Where does the payment service read its configuration from in production?": (
        ["Ana: in production the payment service picks up its config from {a}",
         "Ana: payments reads {a} in prod, just so you know"],
        ["Where does payments pick up its config in production?", "What does payments read in prod?"]),
    "What is the memory limit for the export worker pods?": (
        ["Ben: the export pods get {a} each, that's the limit",
         "Ben: we capped export workers at {a} of memory"],
        ["How much do the export pods get?", "What are export workers capped at?"]),
    "What monthly vendor budget did finance approve for the OCR service?": (
        ["Cleo: finance said yes to {a} a month for the OCR vendor",
         "Cleo: we've got {a} per month for OCR, finance approved it"],
        ["What did finance say yes to for OCR?", "How much per month for OCR?"]),
    "Where is the refunds API spec published?": (
        ["Ana: the refunds spec is up at {a} if you need field names",
         "Ana: I dropped the refund API docs link in the notes, it's {a}"],
        ["Where's the refunds spec up?", "What's the refund API docs link?"]),
    "Which store do we use for the session cache?": (
        (["Ben: for the session cache we said {a}, right", "Ben: we'll put sessions in {a}"],
         ["Ben: actually let's move the session cache over to {a}",
          "Ben: so sessions are going in {a} now, forget what I said before"]),
        ["Where are sessions going?", "What did Ben say about the session cache?"]),
    "Which message broker did we decide on?": (
        (["Cleo: the message broker is going to be {a}", "Cleo: we're going with {a} for messaging"],
         ["Cleo: we changed our minds on the broker, it's {a}", "Cleo: broker wise we're on {a} now"]),
        ["What's the broker going to be?", "What are we on for messaging?"]),
    "What is the upstream request timeout?": (
        (["Ana: upstream timeout, let's do {a} for now", "Ana: give upstream calls {a} before they time out"],
         ["Ana: the vendor wants {a} on the upstream timeout so let's change it",
          "Ana: make the upstream timeout {a}"]),
        ["What's the upstream timeout now?", "How long do upstream calls get?"]),
    "When is the release deadline?": (
        (["Ben: we're aiming to release on {a}", "Ben: release is {a}"],
         ["Ben: the release got pushed to {a}", "Ben: new date for the release is {a}"]),
        ["When are we releasing?", "What's the release date now?"]),
}
HELDOUT_PARAPHRASES: dict[str, dict[str, tuple]] = {"ticket": _TICKET_WORDINGS, "meeting": _MEETING_WORDINGS}


def _filler_chat(rng: random.Random, turn: int) -> tuple[str, str]:
    """A planning conversation between a user and an assistant: no tool output, chatty."""
    person, mod = rng.choice(_PEOPLE), rng.choice(_MODULES)
    if rng.random() < 0.5:
        return "user", rng.choice([
            f"I had a call with {person} this morning, they want a demo of {mod} next week.",
            "Honestly I'm not sure the current plan is realistic, what do you think?",
            f"Can you draft a short note for the team about the {mod} changes?",
            "Let's pause for a second and list what's still open.",
            f"{person} is out on {rng.choice(_DAYS)}, so we should move the review.",
            f"How long would it take to add export to CSV in {mod}, roughly?",
        ])
    return "assistant", rng.choice([
        f"Sure. Here is a draft: 'The {mod} work is on track; we expect to finish the main part by "
        f"{rng.choice(_DAYS)} and will share a demo afterwards.' Want me to adjust the tone?",
        f"I think the plan is realistic if we drop the optional parts of {mod}. The risky bit is the "
        "migration, which we have not rehearsed yet.",
        f"Open items: the {mod} review, the dashboard copy, and the follow-up with {person}.",
        f"Roughly two to three days for {mod}, most of it testing the edge cases.",
        "Good point. I would keep the scope small and revisit after the demo.",
    ])


def _filler_ops(rng: random.Random, turn: int) -> tuple[str, str]:
    """An incident channel: alerts, status updates, graphs described in prose."""
    mod = rng.choice(_MODULES)
    host = f"{mod}-{rng.randint(1, 40):02d}"
    r = rng.random()
    if r < 0.4:
        return "tool", (f"[ALERT] {rng.choice(['p95 latency', 'error rate', 'queue depth', 'CPU'])} on {host} "
                        f"is {rng.randint(60, 99)}% of threshold (window 5m, runbook RB-{rng.randint(100, 999)})")
    if r < 0.7:
        return "assistant", rng.choice([
            f"Checked {host}: the spike lines up with the {rng.randint(0, 23):02d}:00 batch, no user impact so far.",
            f"Restarting {host} drained the queue; watching it for another ten minutes.",
            f"The dashboard for {mod} shows a step change after the last deploy, rolling back is an option.",
        ])
    return "user", rng.choice([
        f"Any update on {host}?", "Please post a status summary in the channel.",
        f"Is {mod} still degraded or can we close this?", "Who is on call tonight?"])


def _filler_ticket(rng: random.Random, turn: int) -> tuple[str, str]:
    """A ticket thread: terse comments by people, the agent's updates, and bots (CI, the
    tracker) posting ids, build numbers and sizes that are not key facts."""
    person, mod = rng.choice(_PEOPLE), rng.choice(_MODULES)
    r = rng.random()
    if r < 0.3:
        return "user", rng.choice([
            "+1, seeing this on my side too.", "Any ETA on this one?", f"cc {person}",
            f"Is this blocking the {mod} rollout or can it wait?", "Thanks for picking it up.",
            f"Customer success asked again, {person} is chasing.", "Moving this up the board.",
            "Not urgent from our side, whenever you get to it.",
        ])
    if r < 0.6:
        return "assistant", rng.choice([
            f"Picked this up. Looking at the {mod} handler first.",
            f"Repro'd locally, narrowing it down in {rng.choice(_FUNCS)}.",
            f"Pushed a draft, still {rng.randint(2, 9)} tests to fix in {mod}.",
            "Rebased, rerunning CI.", f"Waiting on review from {person}.",
            f"Root cause looks like a race in {mod}, writing a test for it.",
        ])
    return "tool", rng.choice([
        f"Status changed: {rng.choice(['Open', 'In Progress', 'In Review'])} -> "
        f"{rng.choice(['In Progress', 'In Review', 'Blocked'])}",
        f"Build #{rng.randint(1000, 9999)} {rng.choice(['passed', 'failed'])} in {rng.randint(3, 25)}m "
        f"{rng.randint(0, 59)}s (pipeline {mod}-ci)",
        f"Linked pull request #{rng.randint(100, 4000)} was {rng.choice(['opened', 'merged', 'closed'])}",
        f"Attachment added: screenshot-{rng.randint(1, 40)}.png ({rng.randint(40, 900)} KB)",
        f"Priority changed: P{rng.randint(2, 4)} -> P{rng.randint(1, 3)}",
        f"Label added: {mod}",
    ])


def _filler_meeting(rng: random.Random, turn: int) -> tuple[str, str]:
    """A transcribed call: spoken, run-on, lower case, with the agent taking notes and the
    transcription service marking pauses."""
    person, mod = rng.choice(_PEOPLE), rng.choice(_MODULES)
    first = person.split()[0]
    r = rng.random()
    if r < 0.55:
        return "user", rng.choice([
            f"{first}: yeah so I looked at {mod} yesterday and honestly it's mostly fine, just slow in places",
            f"{first}: can everyone hear me, okay good, so where were we",
            f"{first}: I think we talked about this last week but I don't remember where we landed",
            f"{first}: um the demo went okay, people liked the {mod} part, the rest was a bit rough",
            f"{first}: let's not go down that rabbit hole now, we can take it offline",
            f"{first}: I'll have to drop in ten minutes, just so you know",
            f"{first}: right, and the other thing was the {mod} dashboard, it still shows old numbers sometimes",
        ])
    if r < 0.85:
        return "assistant", rng.choice([
            f"Noted: {first} will look into the {mod} slowness and report back.",
            f"Action item for {first}: follow up on the {mod} dashboard numbers.",
            "I've added that to the notes under open questions.",
            f"Summary so far: the {mod} demo went well, performance is the main concern.",
        ])
    return "tool", rng.choice([
        f"[transcript] {rng.randint(0, 1):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} crosstalk",
        f"[transcript] {person} joined the call", f"[transcript] {person} left the call",
        f"[transcript] recording resumed after {rng.randint(5, 90)} s",
    ])


STYLES = ("worklog", "chat", "ops")
# Written after the extractor, to check it on text it was not built for, each with its own
# filler and its own wording of every planted fact (HELDOUT_PARAPHRASES), and never part of
# the "mixed" sessions. Each was measured once before the extractor saw it, then its misses
# taught the extractor something general: the ticket thread terse "Label: value" lines,
# the meeting transcript that a speaker's label is no subject. So neither is an unseen check
# (the first-look numbers: docs/benchmarks/context.md); the next unseen check needs a new style.
HELDOUT_STYLES = ("ticket", "meeting")
UNSEEN_STYLES: tuple[str, ...] = ()


def generate_session(seed: int, params: SessionParameters) -> Session:
    rng = random.Random(seed)
    style = STYLES[seed % len(STYLES)] if params.style == "mixed" else params.style
    fillers = {"worklog": _filler, "chat": _filler_chat, "ops": _filler_ops, "ticket": _filler_ticket,
               "meeting": _filler_meeting}
    if style not in fillers:
        raise ValueError(f"unknown session style {style!r}: one of {', '.join(fillers)} or mixed")
    filler = fillers[style]
    wordings = HELDOUT_PARAPHRASES.get(style, PARAPHRASES)
    planted = {t: (role, content, fact) for t, role, content, fact in _planted(rng, params, params.turns, wordings)}
    at = 1_700_000_000.0 + seed
    system = ("You are a coding agent working in the payments monorepo. Follow the user's instructions "
              "exactly, keep changes small and explain each step before you run a tool.")
    messages: list[tuple[str, str, bool, float]] = [("system", system, True, at)]
    facts: dict[str, PlantedFact] = {}
    for turn in range(params.turns):
        at += rng.uniform(*params.seconds_between_turns)
        if turn in planted:
            role, content, fact = planted[turn]
            facts[fact.fact_id] = fact
        else:
            role, content = filler(rng, turn)
        messages.append((role, content, False, at))
    session = Session(f"s{seed}-{style}", messages, sorted(facts.values(), key=lambda f: f.turn))
    session.tokens = sum(count_message(r, c) for r, c, _, _ in messages)
    return session


# -- shared machinery ---------------------------------------------------------------------
@lru_cache(maxsize=200_000)
def _count_message(role: str, content: str) -> int:
    return count_message(role, content)


@lru_cache(maxsize=200_000)
def _count_text(text: str) -> int:
    return count_text(text)


def _view_tokens(messages: Sequence[tuple[str, str]]) -> int:
    return REPLY_PRIMING_TOKENS + sum(_count_message(r, c) for r, c in messages)


@dataclass
class RunStats:
    compactions: int = 0
    summary_sentences: int = 0
    summary_tokens: int = 0
    chunks_embedded: int = 0
    index_cpu_seconds: float = 0.0


# -- strategies -------------------------------------------------------------------------
class Truncation:
    """Sliding window: pinned system prompt + the most recent messages that fit."""

    name = "truncation"

    def __init__(self, budget: int, **_: object) -> None:
        self.budget = budget
        self.messages: list[tuple[str, str, bool]] = []
        self.stats = RunStats()

    def feed(self, role: str, content: str, pinned: bool, at: float) -> None:
        self.messages.append((role, content, pinned))

    def view(self, query: str | None, now: float) -> list[tuple[str, str]]:
        pinned = [(r, c) for r, c, p in self.messages if p]
        remaining = self.budget - _view_tokens(pinned)
        recent: list[tuple[str, str]] = []
        for r, c, p in reversed(self.messages):
            if p:
                continue
            cost = _count_message(r, c)
            if cost > remaining:
                break
            recent.append((r, c))
            remaining -= cost
        return pinned + recent[::-1]


class RunningSummary:
    """One running summary + recent messages, re-summarised when the window overflows.

    Modelled on LangChain's ConversationSummaryBufferMemory (langchain/memory/
    summary_buffer.py: when the buffer exceeds max_token_limit, the oldest messages are
    popped and ``predict_new_summary(pruned, moving_summary_buffer)`` rewrites the single
    summary from the previous summary plus the evicted messages) and on the auto-compact
    of coding agents (Claude Code's /compact, Codex CLI's auto-compaction: when the window
    nears its limit, the conversation is replaced by one summary and recent turns continue
    after it). To avoid re-summarising on every turn (LangChain's per-message prune), it
    evicts in one go down to half the budget, like auto-compact. The summary is capped at
    a quarter of the budget and written by the same ExtractiveSummarizer AgentRM uses, with
    the previous summary fed in as the first message, exactly as predict_new_summary does.
    """

    name = "running-summary"
    SUMMARY_SHARE = 0.25
    KEEP_SHARE = 0.50

    def __init__(self, budget: int, summarizer: ExtractiveSummarizer, **_: object) -> None:
        self.budget = budget
        self.summarizer = summarizer
        self.pinned: list[tuple[str, str]] = []
        self.buffer: list[tuple[str, str]] = []
        self.summary = ""
        self.stats = RunStats()

    def _summary_message(self) -> list[tuple[str, str]]:
        return [("system", f"Summary of the conversation so far: {self.summary}")] if self.summary else []

    def feed(self, role: str, content: str, pinned: bool, at: float) -> None:
        if pinned:
            self.pinned.append((role, content))
            return
        self.buffer.append((role, content))
        if _view_tokens(self.pinned + self._summary_message() + self.buffer) <= self.budget:
            return
        evicted: list[tuple[str, str]] = []
        while len(self.buffer) > 1 and _view_tokens(self.buffer) > self.KEEP_SHARE * self.budget:
            evicted.append(self.buffer.pop(0))
        previous = [("system", self.summary)] if self.summary else []
        result = self.summarizer.summarize(previous + evicted, int(self.SUMMARY_SHARE * self.budget), _count_text)
        self.summary = result.text
        self.stats.compactions += 1
        self.stats.summary_sentences += int(result.cost.get("sentences", 0))
        self.stats.summary_tokens += _count_text(result.text)

    def view(self, query: str | None, now: float) -> list[tuple[str, str]]:
        head = self.pinned + self._summary_message()
        remaining = self.budget - _view_tokens(head)
        recent: list[tuple[str, str]] = []
        for r, c in reversed(self.buffer):
            cost = _count_message(r, c)
            if cost > remaining:
                break
            recent.append((r, c))
            remaining -= cost
        return head + recent[::-1]


class AgentRMTiers:
    """AgentRM as the service runs it (agentrm_context.AgentRMContext): the tiered view
    without a query, the relevance-first hybrid view with the probe as its query."""

    name = "agentrm"

    def __init__(self, budget: int, summarizer: ExtractiveSummarizer, embedder: CachingEmbedder,
                 query_embedder: MiniLMEmbedder, **options: Any) -> None:
        self.budget = budget
        self.context = AgentRMContext(budget, summarizer, embedder, query_embedder, **options)
        self.stats = RunStats()

    def feed(self, role: str, content: str, pinned: bool, at: float) -> None:
        self.context.feed(role, content, pinned, at)
        self.stats.compactions = self.context.compactions
        self.stats.summary_sentences = self.context.summary_sentences
        self.stats.summary_tokens = self.context.summary_tokens
        vectors = self.context.vectors.get("bench")
        self.stats.chunks_embedded = len(vectors.seqs) if vectors else 0

    def view(self, query: str | None, now: float) -> list[tuple[str, str]]:
        return view_messages(self.context.view(query, now, self.budget))


# -- measurement ------------------------------------------------------------------------
def _calibrate(embedder: MiniLMEmbedder, session: Session) -> float:
    """CPU seconds per embedded sentence, measured on this machine with this session."""
    summarizer = ExtractiveSummarizer(embedder)
    sentences = summarizer.candidate_sentences([(r, c) for r, c, _, _ in session.messages[:80]])[:128]
    embedder.embed(sentences[:8])  # warm-up: first call pays one-off allocations
    started = time.process_time()
    embedder.embed(sentences)
    return (time.process_time() - started) / max(1, len(sentences))


def _current_answer(fact: PlantedFact, turn: int) -> str | None:
    """What the agent should know about ``fact`` after ``turn`` messages, or None."""
    if fact.turn < turn:
        return fact.answer
    if fact.stale is not None and fact.stale_turn is not None and fact.stale_turn < turn:
        return fact.stale
    return None


def run_strategy(name: str, session: Session, budget: int, summarizer: ExtractiveSummarizer,
                 embedder: CachingEmbedder, query_embedder: MiniLMEmbedder,
                 ablations: dict[str, dict] | None = None) -> dict:
    """``ablations`` (AgentRM only): name -> ranking options; each probe is also answered
    by the view built with those options, on the same fold (``ablation_answered``)."""
    cls = {"truncation": Truncation, "running-summary": RunningSummary}.get(name, AgentRMTiers)
    strategy = cls(budget=budget, summarizer=summarizer, embedder=embedder, query_embedder=query_embedder,
                   **VARIANTS.get(name, {}))
    n = len(session.messages) - 1
    checkpoints = {max(1, round(n * f)) for f in (0.25, 0.5, 0.75, 1.0)}
    retained = planted = 0
    view_tokens: list[int] = []
    for index, (role, content, pinned, at) in enumerate(session.messages):
        strategy.feed(role, content, pinned, at)
        if index in checkpoints:
            text = "\n".join(c for _, c in strategy.view(None, at))
            view_tokens.append(_view_tokens(strategy.view(None, at)))
            for fact in session.facts:
                answer = _current_answer(fact, index)  # messages[1:] are turns 0..n-1
                if answer is not None:
                    planted += 1
                    retained += answer in text
    now = session.messages[-1][3] + 60.0
    answered = stale_only = superseded_probes = 0
    ablation_answered = {ablation: 0 for ablation in ablations or {}}
    latencies: list[float] = []
    for fact in session.facts:
        started = time.perf_counter()
        view = strategy.view(fact.question, now)
        latencies.append((time.perf_counter() - started) * 1000.0)
        tokens = _view_tokens(view)
        view_tokens.append(tokens)
        if tokens > budget:
            raise AssertionError(f"{name} built a {tokens}-token view for a {budget} budget")
        text = "\n".join(c for _, c in view)
        answered += fact.answer in text
        for ablation, options in (ablations or {}).items():
            other = view_messages(strategy.context.view(fact.question, now, budget, **options))
            ablation_answered[ablation] += fact.answer in "\n".join(c for _, c in other)
        if fact.stale is not None:
            superseded_probes += 1
            stale_only += (fact.stale in text) and (fact.answer not in text)
    return {"retained": retained, "planted": planted, "answered": answered, "probes": len(session.facts),
            "stale_only": stale_only, "superseded_probes": superseded_probes,
            "ablation_answered": ablation_answered, "view_tokens": view_tokens, "latencies_ms": latencies,
            **asdict(strategy.stats)}


def run_styles(styles: Sequence[str], seeds: Sequence[int], params: SessionParameters,
               embedder: CachingEmbedder, model: MiniLMEmbedder) -> list[dict]:
    """AgentRM per session style, over several generator seeds: key-fact retention at 4k
    (no query) and probe answerability at 2k (the probe as query), the issue's targets.
    One row per style and seed; the same seed plants the same facts in every style, so
    the styles differ only in their filler and (for a held-out style) their wording."""
    summarizer = ExtractiveSummarizer(embedder)
    rows = []
    for style in styles:
        for seed in seeds:
            session = generate_session(seed, SessionParameters(**{**asdict(params), "style": style}))
            at_4k = run_strategy("agentrm", session, 4_000, summarizer, embedder, model)
            at_2k = run_strategy("agentrm", session, 2_000, summarizer, embedder, model, STYLE_ABLATIONS)
            rows.append({"style": style, "seed": seed, "held_out": style in HELDOUT_STYLES,
                         "unseen": style in UNSEEN_STYLES,
                         "retained_4k": at_4k["retained"], "planted_4k": at_4k["planted"],
                         "fact_retention_4k": at_4k["retained"] / max(1, at_4k["planted"]),
                         "answered_2k": at_2k["answered"], "probes_2k": at_2k["probes"],
                         "probe_answerability_2k": at_2k["answered"] / max(1, at_2k["probes"]),
                         "ablation_answered_2k": at_2k["ablation_answered"]})
    return rows


def facts_block_retention(style: str, seeds: Sequence[int], budget: int = 4_000,
                          params: SessionParameters = SessionParameters()) -> list[float]:
    """The extractor alone, per seed, in seconds and with no model: every message's facts
    folded in order by the compactor's rule (supersession included), then the view's own
    selection of the facts block (``facts_share`` of ``budget``), checked at the same four
    checkpoints as key-fact retention. Summaries and the recent window are left out, so
    this is what the facts block alone retains."""
    from app.context.compactor import facts_of_span
    from app.domain.context.view import _select_facts

    from .agentrm_context import cached_count_message, cached_count_text

    fields = ("fact_id", "kind", "text", "key", "source_seq", "tokens", "role", "value", "shape")
    cap = int(domain.ViewSettings().facts_share * budget)
    rates = []
    for seed in seeds:
        session = generate_session(seed, SessionParameters(**{**asdict(params), "style": style}))
        live: dict[str, domain.KeyFact] = {}
        n = len(session.messages) - 1
        checkpoints = {max(1, round(n * f)) for f in (0.25, 0.5, 0.75, 1.0)}
        retained = planted = 0
        for index, (role, content, pinned, at) in enumerate(session.messages):
            if not pinned:
                message = domain.ContextMessage(index, role, content, False, 0, at)
                facts, superseded = facts_of_span(list(live.values()), [message], cached_count_text)
                for s in superseded:
                    live.pop(s["fact_id"], None)
                live.update({f["fact_id"]: domain.KeyFact(**{k: f[k] for k in fields}) for f in facts})
            if index in checkpoints:
                chosen, _ = _select_facts(list(live.values()), cap, cached_count_message)
                text = "\n".join(f.text for f in chosen)
                for fact in session.facts:
                    answer = _current_answer(fact, index)
                    if answer is not None:
                        planted += 1
                        retained += answer in text
        rates.append(retained / max(1, planted))
    return rates


def summarize_styles(rows: Sequence[dict]) -> list[dict]:
    """Per style: pooled rate, and the spread (min, max) of the per-seed rates."""
    out = []
    for style in dict.fromkeys(r["style"] for r in rows):
        mine = [r for r in rows if r["style"] == style]
        retention = [r["fact_retention_4k"] for r in mine]
        answer = [r["probe_answerability_2k"] for r in mine]
        out.append({"style": style, "held_out": mine[0]["held_out"], "unseen": mine[0]["unseen"],
                    "seeds": [r["seed"] for r in mine],
                     "fact_retention_4k": sum(r["retained_4k"] for r in mine)
                     / max(1, sum(r["planted_4k"] for r in mine)),
                     "fact_retention_4k_min": min(retention), "fact_retention_4k_max": max(retention),
                     "probe_answerability_2k": sum(r["answered_2k"] for r in mine)
                     / max(1, sum(r["probes_2k"] for r in mine)),
                     "probe_answerability_2k_min": min(answer), "probe_answerability_2k_max": max(answer),
                     "ablation_answerability_2k": {
                         a: sum(r["ablation_answered_2k"][a] for r in mine) / max(1, sum(r["probes_2k"] for r in mine))
                         for a in mine[0].get("ablation_answered_2k", {})}})
    return out


def run(out_dir: pathlib.Path, sessions: int = 3, seed: int = 7, quick: bool = False,
        strategies: Sequence[str] = STRATEGIES, style_seeds: int = 3,
        styles: Sequence[str] = STYLES + HELDOUT_STYLES) -> dict:
    """Run the benchmark, write ``context.md`` and ``context.png`` into ``out_dir``, and
    return the JSON-able results. ``quick``: one short session (a smoke run, not a result),
    and the per-style table on one seed of the last held-out style only. ``style_seeds``:
    generator seeds per style for the per-style table (0: no table)."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    params = SessionParameters(turns=140) if quick else SessionParameters()
    sessions = 1 if quick else max(1, sessions)
    started_wall = time.perf_counter()

    model = default_embedder()
    embedder = CachingEmbedder(model)
    summarizer = ExtractiveSummarizer(embedder)
    generated = [generate_session(seed * 1000 + i, params) for i in range(sessions)]
    cpu_per_sentence = _calibrate(model, generated[0])

    raw: dict[tuple[str, int], list[dict]] = {}
    for session in generated:
        for budget in BUDGETS:
            for name in strategies:
                raw.setdefault((name, budget), []).append(
                    run_strategy(name, session, budget, summarizer, embedder, model))

    rows = []
    for (name, budget), runs in raw.items():
        tokens = [t for r in runs for t in r["view_tokens"]]
        latencies = [t for r in runs for t in r["latencies_ms"]]
        sentences = sum(r["summary_sentences"] for r in runs)
        superseded = sum(r["superseded_probes"] for r in runs)
        rows.append({
            "strategy": name, "budget": budget,
            "fact_retention": sum(r["retained"] for r in runs) / max(1, sum(r["planted"] for r in runs)),
            "probe_answerability": sum(r["answered"] for r in runs) / max(1, sum(r["probes"] for r in runs)),
            "stale_only": sum(r["stale_only"] for r in runs) / max(1, superseded),
            "mean_view_tokens": statistics.fmean(tokens), "max_view_tokens": max(tokens),
            "compactions": sum(r["compactions"] for r in runs) / len(runs),
            "summary_sentences": sentences / len(runs),
            "summarizer_cpu_s_est": sentences * cpu_per_sentence / len(runs),
            "summary_tokens": sum(r["summary_tokens"] for r in runs) / len(runs),
            "chunks_embedded": sum(r["chunks_embedded"] for r in runs) / len(runs),
            "index_cpu_s": sum(r["index_cpu_seconds"] for r in runs) / len(runs),
            "latency_ms_p50": (percentile(latencies, 50) or 0.0), "latency_ms_p95": (percentile(latencies, 95) or 0.0),
        })
    style_rows: list[dict] = []
    if style_seeds > 0:
        style_rows = run_styles(HELDOUT_STYLES[-1:] if quick else styles,
                                [seed * 1000 + 100 + i for i in range(1 if quick else style_seeds)],
                                params, embedder, model)
    agentrm_4k = next(r for r in rows if r["strategy"] == "agentrm" and r["budget"] == 4_000)
    agentrm_2k = next(r for r in rows if r["strategy"] == "agentrm" and r["budget"] == 2_000)
    results = {
        "benchmark": "context",
        "parameters": {"sessions": sessions, "seed": seed, "quick": quick, "budgets": list(BUDGETS),
                       "session": asdict(params), "planted_facts_per_session": len(generated[0].facts),
                       "mean_session_tokens": statistics.fmean(s.tokens for s in generated),
                       "tokenizer": "cl100k_base", "embedding_model": "all-MiniLM-L6-v2",
                       "cpu_seconds_per_sentence": cpu_per_sentence,
                       "torch_threads": _torch_threads()},
        "rows": rows,
        "styles": {"rows": style_rows, "summary": summarize_styles(style_rows)},
        "target": {"fact_retention_4k": 1.0, "probe_answerability_2k": 0.95,
                   "agentrm_fact_retention_4k": agentrm_4k["fact_retention"],
                   "agentrm_probe_answerability_2k": agentrm_2k["probe_answerability"],
                   "met": agentrm_4k["fact_retention"] >= 1.0 and agentrm_2k["probe_answerability"] >= 0.95},
        "wall_seconds": time.perf_counter() - started_wall,
    }
    (out_dir / "context.md").write_text(render_markdown(results), encoding="utf-8")
    render_plot(results, out_dir / "context.png")
    (out_dir / "context.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    return results


def _torch_threads() -> int:
    try:
        import torch

        return int(torch.get_num_threads())
    except Exception:  # pragma: no cover - torch is a hard dependency; report, never fail
        return 0


def render_markdown(results: dict) -> str:
    p = results["parameters"]
    lines = [
        "# Context retention benchmark",
        "",
        f"{p['sessions']} synthetic session(s) (seed {p['seed']}{', quick mode' if p['quick'] else ''}), "
        f"{p['session']['turns']} turns each, {p['mean_session_tokens']:.0f} tokens on average "
        f"({p['tokenizer']}, chat overhead included); {p['planted_facts_per_session']} planted key facts "
        "per session, 4 of them superseded later; one probe per fact.",
        "",
        "| strategy | budget | key-fact retention | probe answerability | stale-only | mean view tokens "
        "| max view tokens | compactions | summarizer sentences | summarizer CPU s (est.) | summary tokens "
        "| chunks embedded | index CPU s | view p50 ms | view p95 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(results["rows"], key=lambda r: (r["budget"], STRATEGIES.index(r["strategy"]))):
        lines.append(
            f"| {r['strategy']} | {r['budget']} | {r['fact_retention']:.1%} | {r['probe_answerability']:.1%} "
            f"| {r['stale_only']:.1%} | {r['mean_view_tokens']:.0f} | {r['max_view_tokens']} "
            f"| {r['compactions']:.1f} | {r['summary_sentences']:.0f} | {r['summarizer_cpu_s_est']:.2f} "
            f"| {r['summary_tokens']:.0f} | {r['chunks_embedded']:.0f} | {r['index_cpu_s']:.2f} "
            f"| {r['latency_ms_p50']:.2f} | {r['latency_ms_p95']:.2f} |")
    t = results["target"]
    lines += [
        "",
        f"Target (100% retention at 4k, >=95% answerability at 2k): AgentRM measured "
        f"{t['agentrm_fact_retention_4k']:.1%} / {t['agentrm_probe_answerability_2k']:.1%} -> "
        f"{'met' if t['met'] else 'NOT met'}.",
        "",
        "Definitions: *key-fact retention* = share of planted facts (their current value) whose exact "
        "answer string is in the query-less view at 25/50/75/100% of the session; *probe answerability* "
        "= share of probes whose exact answer string is in the view assembled for that probe (baselines "
        "ignore the query); *stale-only* = superseded-fact probes whose view shows the old value but not "
        "the new one. Summarizer CPU is estimated as sentences embedded x "
        f"{p['cpu_seconds_per_sentence'] * 1000:.2f} ms (measured per sentence on this machine, "
        f"{p['torch_threads']} torch threads); index CPU is measured. Latency for agentrm includes the "
        "query embedding and the exact cosine search.",
        "",
        *_styles_markdown(results.get("styles", {}).get("summary", [])),
        f"Wall time: {results['wall_seconds']:.1f} s.",
        "",
    ]
    return "\n".join(lines)


def _styles_markdown(summary: Sequence[dict]) -> list[str]:
    if not summary:
        return []
    ablations = list(summary[0].get("ablation_answerability_2k", {}))
    lines = ["AgentRM per session style (several generator seeds; pooled rate, and min-max over seeds; "
             "the last columns answer the same probes with one ranking idea removed, on the same fold):", "",
             "| style | seeds | key-fact retention at 4k | probe answerability at 2k |"
             + "".join(f" at 2k, {a} |" for a in ablations), "|---|---:|---:|---:|" + "---:|" * len(ablations)]
    for r in summary:
        name = (f"{r['style']} (unseen)" if r["unseen"] else f"{r['style']} (held out, then used)"
                if r["held_out"] else r["style"])
        lines.append(f"| {name} | {len(r['seeds'])} | {r['fact_retention_4k']:.1%} "
                     f"({r['fact_retention_4k_min']:.1%}-{r['fact_retention_4k_max']:.1%}) "
                     f"| {r['probe_answerability_2k']:.1%} "
                     f"({r['probe_answerability_2k_min']:.1%}-{r['probe_answerability_2k_max']:.1%}) |"
                     + "".join(f" {r['ablation_answerability_2k'][a]:.1%} |" for a in ablations))
    return lines + ["", "Held-out styles have their own filler and their own wording of every fact and were "
                    "written after the extractor; each was measured once unseen, then its misses were used "
                    "once to improve the extractor (README), so these rows are no longer an unseen check.", ""]


def render_plot(results: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["rows"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    shown = [name for name in STRATEGIES if any(r["strategy"] == name for r in rows)]
    width = 0.8 / len(shown)
    x = np.arange(len(BUDGETS))
    for ax, metric, title in ((axes[0], "fact_retention", "Key-fact retention"),
                              (axes[1], "probe_answerability", "Probe answerability"),
                              (axes[2], "mean_view_tokens", "Mean tokens in view")):
        for k, name in enumerate(shown):
            values = [next(r[metric] for r in rows if r["strategy"] == name and r["budget"] == b) for b in BUDGETS]
            ax.bar(x + (k - (len(shown) - 1) / 2) * width, values, width, label=name)
        ax.set_xticks(x, [f"{b // 1000}k" for b in BUDGETS])
        ax.set_xlabel("budget (tokens)")
        ax.set_title(title)
        if metric != "mean_view_tokens":
            ax.set_ylim(0, 1.05)
            ax.axhline(0.95 if metric == "probe_answerability" else 1.0, color="grey", lw=0.8, ls="--")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(shown), frameon=False)
    fig.suptitle(f"AgentRM context benchmark ({results['parameters']['sessions']} session(s), "
                 f"seed {results['parameters']['seed']})")
    fig.tight_layout(rect=(0, 0.07, 1, 1))  # room for the shared legend below the panels
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":  # python -m agentrm_bench.context_bench [out_dir]
    import sys

    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
    print(json.dumps(run(target, quick="--quick" in sys.argv)["target"], indent=2))

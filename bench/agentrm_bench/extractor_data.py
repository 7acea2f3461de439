"""Sentence-level labels for the key-fact extractor benchmark, and its fixed split.

Two labelled sets, both cut into the same units the extractor classifies
(``app.context.facts.fact_units``), so a prediction and a label always refer to the same
sentence:

**LoCoMo** (Maharana et al., ACL 2024; CC BY-NC 4.0; read from ``--locomo DIR`` at run time,
never copied here). Every session of a LoCoMo conversation comes with *observations*: one
line per fact a speaker stated, each naming its evidence turn (``D3:5``). Each question of
the ``qa`` list also names its evidence turns. The procedure:

1. a turn's content is ``"<speaker>: <text>"``, as ``agentrm bench context --locomo`` appends
   it (speaker_a as ``user``, speaker_b as ``assistant``; image captions left out);
2. for every observation, the units of its evidence turn with the most content words in
   common with the observation (Snowball stems, stopwords and both speakers' names left
   out; ties all count; none when nothing is shared, as for "Wow!" or a greeting) are
   **positive**;
3. likewise for every question of categories 1-4, against its question and answer;
4. every other unit of every turn is **negative**;
5. a positive's label is its observation's category, by the first rule of ``CATEGORY_RULES``
   that matches the observation text (plan, dated event, preference, attribute, else event);
   a unit positive only through a question is labelled ``qa-<category name>``.

LoCoMo's facts are a person's life, not an agent's work: they measure whether the extractor
notices stated facts at all, so only detection is scored there, not the kind.

**Agent chatter** (``data/extractor_agent_chatter.jsonl``): 125 messages in 16 threads of an
agent at work (paths, commands, errors, decisions, hosts, deadlines), **written for this
project**, not collected, by the same hand that then tuned the extractor: weaker evidence
than LoCoMo's. Each row names the substrings that make a unit a key fact and the fact's
label; ``LABEL_KINDS`` says which extractor kinds are right for each label.

**Split**, fixed before any tuning and committed in ``data/extractor_split.json``: LoCoMo by
session, half of each conversation's sessions held out (seeded shuffle per conversation);
the agent set by thread, half held out. The extractor was changed looking at the
development part only.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

import Stemmer

from app.context.facts import fact_units

DATA_DIR = Path(__file__).resolve().parent / "data"
AGENT_SET = DATA_DIR / "extractor_agent_chatter.jsonl"
SPLIT_FILE = DATA_DIR / "extractor_split.json"
SPLIT_SEED = 20261207

# label -> the extractor kinds that are right for it
LABEL_KINDS: dict[str, tuple[str, ...]] = {
    "instruction": ("instruction",),
    "preference": ("instruction",),          # a standing preference is a rule to follow
    "decision": ("decision", "instruction"),  # both bind later work; "use X for Y" reads as either
    "todo": ("todo",),
    "error": ("error",),
    "root_cause": ("error",),                 # why an error happened belongs with the error
    "identifier": ("identifier",),
    "host": ("identifier",),
    "channel": ("identifier", "entity"),
    "path": ("path",),
    "url": ("url",),
    "quantity": ("quantity",),
    "measurement": ("quantity",),
    "entity": ("entity",),
}

QA_CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_TIME_PHRASE = (r"\b(?:yesterday|today|tonight|tomorrow|last|next|ago|this\s+(?:week|weekend|month|year)"
                r"|(?:mon|tues|wednes|thurs|fri|satur|sun)day|weekend|recently|earlier|since)\b")
# Observation text -> category; the first rule that matches wins.
CATEGORY_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("plan", re.compile(r"\b(?:plan|plans|planning|planned|going\s+to|will|looking\s+forward|intends?"
                        r"|hop(?:e|es|ing)\s+to|wants?\s+to|considering"
                        r"|thinking\s+(?:of|about)|aims?\s+to|upcoming)\b", re.I)),
    ("dated-event", re.compile(_TIME_PHRASE, re.I)),
    ("preference", re.compile(r"\b(?:loves?|enjoys?|likes?|favou?rite|prefers?|values?|passionate|fan\s+of"
                              r"|appreciates?|cherish(?:es)?|treasures?|finds?|believes?|feels?)\b", re.I)),
    ("attribute", re.compile(r"\b(?:has|have|had|named|married|is\s+a|works?|lives?|owns?|kids?|husband|wife"
                             r"|partner|daughter|son|friends?|pets?|dog|cat)\b", re.I)),
)
OTHER_CATEGORY = "event"

_STOP = frozenset("""a an the and or but so of to in on at for with from by as is are was were be been being
it its this that these those i me my we our you your he him his she her they them their there here what which who
whom how when where why do does did done have has had not no yes just very really also too about into over after
before up down out off then than can could would should will shall may might must all any some such own same other
more most much many each both few only again once one two get got make made like feel felt""".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
_STEMMER = Stemmer.Stemmer("english")


@dataclass(frozen=True)
class Unit:
    """One sentence the extractor classifies, with its label ("" when not a key fact)."""
    source: str        # "agent" or "locomo"
    group: str         # what the split is by: the agent thread, or "<conversation>:S<session>"
    message: str       # the message id: agent row id, or "<conversation>:<dia_id>"
    index: int         # the unit's position among its message's units
    role: str
    text: str
    label: str = ""

    @property
    def positive(self) -> bool:
        return bool(self.label)


@dataclass(frozen=True)
class Message:
    source: str
    group: str
    message: str
    role: str
    content: str
    units: tuple[Unit, ...]


# -- the agent set ----------------------------------------------------------------------------

def load_agent_set(path: Path = AGENT_SET) -> list[Message]:
    messages = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        texts = fact_units(row["text"])
        labels = [""] * len(texts)
        for fact in row["facts"]:
            if fact["label"] not in LABEL_KINDS:
                raise ValueError(f"{row['id']}: unknown label {fact['label']!r}")
            hits = [i for i, t in enumerate(texts) if fact["in"] in t]
            if len(hits) != 1:
                raise ValueError(f"{row['id']}: {fact['in']!r} is in {len(hits)} units, want exactly one")
            labels[hits[0]] = labels[hits[0]] or fact["label"]
        units = tuple(Unit("agent", row["thread"], row["id"], i, row["role"], t, labels[i])
                      for i, t in enumerate(texts))
        messages.append(Message("agent", row["thread"], row["id"], row["role"], row["text"], units))
    return messages


# -- LoCoMo -----------------------------------------------------------------------------------

def _stems(text: str, names: frozenset[str]) -> set[str]:
    words = [w.lower().strip("'-") for w in _WORD.findall(text)]
    words = [w.removesuffix("'s") for w in words]
    return set(_STEMMER.stemWords([w for w in words if len(w) > 2 and w not in _STOP and w not in names]))


def category(observation: str) -> str:
    for name, pattern in CATEGORY_RULES:
        if pattern.search(observation):
            return name
    return OTHER_CATEGORY


def _best_units(texts: list[str], reference: str, names: frozenset[str]) -> list[int]:
    ref = _stems(reference, names)
    overlaps = [len(_stems(t, names) & ref) for t in texts]
    best = max(overlaps, default=0)
    return [i for i, o in enumerate(overlaps) if o == best] if best > 0 else []


def _session_numbers(conv: dict) -> list[int]:
    return sorted(int(k.split("_")[1]) for k in conv
                  if re.fullmatch(r"session_\d+", k) and isinstance(conv[k], list) and conv[k])


def load_locomo(path: Path) -> list[Message]:
    """Labelled units of one LoCoMo conversation file (procedure in the module docstring)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    conv = data.get("conversation", data)
    stem = path.stem
    a, b = conv["speaker_a"], conv["speaker_b"]
    names = frozenset(w.lower() for n in (a, b) for w in n.split())
    turns: dict[str, tuple[int, str, str]] = {}   # dia_id -> (session, role, content)
    order: list[str] = []
    for n in _session_numbers(conv):
        for turn in conv[f"session_{n}"]:
            role = "user" if turn["speaker"] == a else "assistant"
            turns[turn["dia_id"]] = (n, role, f"{turn['speaker']}: {turn['text']}")
            order.append(turn["dia_id"])
    texts = {d: fact_units(turns[d][2]) for d in order}
    labels: dict[tuple[str, int], str] = {}

    def mark(dia_id: str, reference: str, label: str, overrides: bool) -> None:
        if dia_id not in texts or not texts[dia_id]:
            return  # LoCoMo's evidence has a few malformed ids; they name no turn
        for i in _best_units(texts[dia_id], reference, names):
            if overrides or (dia_id, i) not in labels:
                labels[(dia_id, i)] = label

    for n in _session_numbers(conv):
        observations = data.get(f"session_{n}_observation") or conv.get(f"session_{n}_observation") or {}
        for lines in observations.values():
            for text, *evidence in lines:
                for ref in evidence:
                    for dia_id in (ref if isinstance(ref, list) else [ref]):
                        mark(str(dia_id).strip(), text, category(text), overrides=False)
    for qa in data.get("qa", []):
        if qa.get("category") not in QA_CATEGORY_NAMES:
            continue
        reference = f"{qa['question']} {qa.get('answer', '')}"
        for dia_id in qa.get("evidence", []):
            for d in str(dia_id).replace(";", " ").replace(",", " ").split():
                mark(d, reference, "qa-" + QA_CATEGORY_NAMES[qa["category"]], overrides=False)
    messages = []
    for d in order:
        session, role, content = turns[d]
        group = f"{stem}:S{session}"
        units = tuple(Unit("locomo", group, f"{stem}:{d}", i, role, t, labels.get((d, i), ""))
                      for i, t in enumerate(texts[d]))
        messages.append(Message("locomo", group, f"{stem}:{d}", role, content, units))
    return messages


def locomo_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.json") if "speaker_a" in p.read_text(encoding="utf-8")[:100_000])


# -- the split --------------------------------------------------------------------------------

def halve(ids: list[str], seed: str) -> tuple[list[str], list[str]]:
    """(held_out, dev): a seeded shuffle of the sorted ids, the first half (rounded up) held out."""
    shuffled = sorted(ids)
    random.Random(seed).shuffle(shuffled)
    cut = (len(shuffled) + 1) // 2
    return sorted(shuffled[:cut]), sorted(shuffled[cut:])


def agent_rows_digest(path: Path, threads: list[str]) -> str:
    """sha256 of the agent set's rows of ``threads``: editing a held-out row changes it."""
    keep = set(threads)
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines()
             if ln.strip() and json.loads(ln)["thread"] in keep]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def make_split(agent_threads: list[str], locomo_sessions: dict[str, list[int]],
               agent_path: Path = AGENT_SET) -> dict:
    held, dev = halve(agent_threads, f"{SPLIT_SEED}:agent")
    split: dict = {"seed": SPLIT_SEED,
                   "agent": {"held_out": held, "dev": dev, "held_out_sha256": agent_rows_digest(agent_path, held)},
                   "locomo": {}}
    for conv, sessions in sorted(locomo_sessions.items()):
        held_s, dev_s = halve([f"S{n}" for n in sessions], f"{SPLIT_SEED}:locomo:{conv}")
        split["locomo"][conv] = {"held_out": sorted(held_s, key=lambda s: int(s[1:])),
                                 "dev": sorted(dev_s, key=lambda s: int(s[1:]))}
    return split


def load_split(path: Path = SPLIT_FILE) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def part_of(unit_group: str, source: str, split: dict) -> str:
    """"held_out", "dev", or "" for a group the split does not know (another LoCoMo file)."""
    if source == "agent":
        return "held_out" if unit_group in split["agent"]["held_out"] else (
            "dev" if unit_group in split["agent"]["dev"] else "")
    conv, session = unit_group.split(":")
    parts = split["locomo"].get(conv)
    if parts is None:
        return ""
    return "held_out" if session in parts["held_out"] else ("dev" if session in parts["dev"] else "")

"""`agentrm bench extractor`: key-fact extraction scored sentence by sentence on held-out text.

Two extractors run on the same labelled units (``extractor_data``): *before*, the
extractor at ``BASELINE_REF`` (loaded from git, so the comparison needs no frozen copy),
and *after*, the working tree's ``app.context.facts``. For each part of the split and each
set:

- **detection**: a unit is predicted a key fact when the extractor returns a fact for it;
  precision and recall against the labels, whatever the kind;
- **kind** (agent set only): a prediction is right when its kind is one ``LABEL_KINDS``
  accepts for the unit's label; recall per label and precision per predicted kind;
- a 95% interval for detection precision and recall, by a seeded bootstrap over the split's
  groups (threads, sessions), since units of one conversation are not independent;
- CPU: ``time.process_time`` of extracting every message, three rounds, median and range.

LoCoMo's labels are what its annotators wrote down per session; a sentence they did not
note may still be worth keeping, so LoCoMo precision is a floor. The figures go to
``extractor.md`` and ``extractor.json`` under ``--out``.
"""
from __future__ import annotations

import random
import statistics
import subprocess
import sys
import time
import types
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from app.context import facts as current

from . import extractor_data as data

ROOT = Path(__file__).resolve().parents[2]
# The extractor this work started from: the project's main branch when the labelled split
# was committed. "before" is always this one unless --baseline names another revision.
BASELINE_REF = "bd0e3cba365f1137688f3b3ecef7055237e488aa"
PARTS = ("held_out", "dev")
BOOTSTRAP_ROUNDS = 1000

Extract = Callable[[str, int, str], list[Any]]


def load_baseline(ref: str) -> tuple[Extract, str, str]:
    """(extract_facts, resolved commit, version) of the extractor at git revision ``ref``.

    Its two modules are compiled under private names, with facts' import of salience
    pointed at the baseline's own salience, so both extractors live in one process."""
    def show(path: str) -> str:
        return subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout
    commit = subprocess.run(["git", "rev-parse", ref], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout.strip()
    salience = types.ModuleType("agentrm_bench._baseline_salience")
    sys.modules[salience.__name__] = salience
    exec(compile(show("app/context/salience.py"), "baseline/salience.py", "exec"), salience.__dict__)
    facts = types.ModuleType("agentrm_bench._baseline_facts")
    sys.modules[facts.__name__] = facts
    facts.__dict__["salience"] = salience
    source = show("app/context/facts.py").replace("from app.context import salience\n", "")
    exec(compile(source, "baseline/facts.py", "exec"), facts.__dict__)
    return facts.extract_facts, commit, getattr(facts, "EXTRACTOR_VERSION", "unversioned")


def predict(extract: Extract, message: data.Message) -> dict[int, str]:
    """unit index -> predicted kind. A fact's text is its unit (clipped when long)."""
    taken: dict[int, str] = {}
    for fact in extract(message.content, 1, message.role):
        for unit in message.units:
            if unit.index not in taken and (fact.text == unit.text or fact.text in unit.text):
                taken[unit.index] = fact.kind
                break
    return taken


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


def score(messages: list[data.Message], predictions: dict[str, dict[int, str]], kinds: bool) -> dict:
    tp = fp = fn = ktp = 0
    by_label: dict[str, Counter] = defaultdict(Counter)
    by_kind: dict[str, Counter] = defaultdict(Counter)
    for m in messages:
        got = predictions[m.message]
        for u in m.units:
            kind = got.get(u.index)
            if u.positive:
                by_label[u.label]["n"] += 1
                if kind is not None:
                    tp += 1
                    by_label[u.label]["detected"] += 1
                    ok = kind in data.LABEL_KINDS.get(u.label, ())
                    ktp += ok
                    by_label[u.label]["kind_ok"] += ok
                else:
                    fn += 1
            elif kind is not None:
                fp += 1
            if kind is not None:
                by_kind[kind]["predicted"] += 1
                by_kind[kind]["positive"] += u.positive
                by_kind[kind]["kind_ok"] += u.positive and kind in data.LABEL_KINDS.get(u.label, ())
    p, r = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    out: dict[str, Any] = {
        "units": sum(len(m.units) for m in messages), "positives": tp + fn,
        "detect": {"tp": tp, "fp": fp, "fn": fn, "precision": p, "recall": r,
                   "f1": 2 * p * r / (p + r) if p and r else 0.0},
        "by_label": {label: {"n": c["n"], "recall": c["detected"] / c["n"],
                             **({"kind_recall": c["kind_ok"] / c["n"]} if kinds else {})}
                     for label, c in sorted(by_label.items())},
        "by_kind": {kind: {"predicted": c["predicted"], "precision": c["positive"] / c["predicted"],
                           **({"kind_precision": c["kind_ok"] / c["predicted"]} if kinds else {})}
                    for kind, c in sorted(by_kind.items())},
    }
    if kinds:
        out["kind"] = {"tp": ktp, "precision": _ratio(ktp, tp + fp), "recall": _ratio(ktp, tp + fn)}
    return out


def bootstrap(messages: list[data.Message], predictions: dict[str, dict[int, str]], seed: int = 7,
              rounds: int = BOOTSTRAP_ROUNDS) -> dict[str, list[float]]:
    """95% intervals of detection precision and recall, resampling whole groups."""
    per_group: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for m in messages:
        counts = per_group[m.group]
        for u in m.units:
            hit = u.index in predictions[m.message]
            counts[0] += u.positive and hit
            counts[1] += (not u.positive) and hit
            counts[2] += u.positive and not hit
    groups = sorted(per_group)
    rng = random.Random(seed)
    ps, rs = [], []
    for _ in range(rounds):
        tp = fp = fn = 0
        for g in (rng.choice(groups) for _ in groups):
            a, b, c = per_group[g]
            tp, fp, fn = tp + a, fp + b, fn + c
        ps.append(tp / (tp + fp) if tp + fp else 0.0)
        rs.append(tp / (tp + fn) if tp + fn else 0.0)

    def interval(xs: list[float]) -> list[float]:
        xs = sorted(xs)
        return [xs[int(0.025 * len(xs))], xs[int(0.975 * len(xs)) - 1]]
    return {"precision": interval(ps), "recall": interval(rs)}


def cpu_seconds(extract: Extract, messages: Iterable[data.Message], rounds: int = 3) -> dict:
    messages = list(messages)
    totals, worst = [], 0.0
    for _ in range(rounds):
        start = time.process_time()
        for m in messages:
            t0 = time.process_time()
            extract(m.content, 1, m.role)
            worst = max(worst, time.process_time() - t0)
        totals.append(time.process_time() - start)
    return {"messages": len(messages), "rounds": rounds, "median_s": statistics.median(totals),
            "min_s": min(totals), "max_s": max(totals), "worst_message_ms": worst * 1000}


def run(locomo_dir: Path | None, baseline: str = BASELINE_REF) -> dict:
    split = data.load_split()
    sets: dict[str, list[data.Message]] = {"agent": data.load_agent_set()}
    if locomo_dir is not None:
        sets["locomo"] = [m for path in data.locomo_files(locomo_dir) for m in data.load_locomo(path)]
    before, commit, before_version = load_baseline(baseline)
    extractors: dict[str, Extract] = {"before": before, "after": current.extract_facts}
    result: dict[str, Any] = {
        "extractor_version": {"before": before_version, "after": current.EXTRACTOR_VERSION},
        "baseline": {"ref": baseline, "commit": commit},
        "split": {"seed": split["seed"], "file": str(data.SPLIT_FILE.relative_to(ROOT))},
        "parts": {}, "cpu": {},
    }
    for name, messages in sets.items():
        preds = {who: {m.message: predict(fn, m) for m in messages} for who, fn in extractors.items()}
        for part in PARTS:
            chosen = [m for m in messages if data.part_of(m.group, m.source, split) == part]
            if not chosen:
                continue
            entry = result["parts"].setdefault(part, {}).setdefault(name, {})
            entry["groups"] = len({m.group for m in chosen})
            entry["messages"] = len(chosen)
            for who in extractors:
                entry[who] = score(chosen, preds[who], kinds=name == "agent")
                entry[who]["interval"] = bootstrap(chosen, preds[who])
        result["cpu"][name] = {who: cpu_seconds(fn, messages) for who, fn in extractors.items()}
    return result


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _recall_cell(s: dict, kinds: bool) -> str:
    return _pct(s["recall"]) + (f" / {_pct(s['kind_recall'])}" if kinds else "")


def render_markdown(result: dict) -> str:
    v = result["extractor_version"]
    lines = ["# Key-fact extractor benchmark", "",
             f"*before*: extractor `{v['before']}` at commit `{result['baseline']['commit'][:12]}`; "
             f"*after*: extractor `{v['after']}`. Split: `{result['split']['file']}` (seed {result['split']['seed']}).",
             ""]
    for part in PARTS:
        if part not in result["parts"]:
            continue
        title = "Held-out part (never looked at while tuning)" if part == "held_out" else \
            "Development part (tuned on)"
        lines += [f"## {title}", ""]
        lines += ["| set | groups | units | key facts | extractor | detection precision | detection recall "
                  "| F1 | kind precision | kind recall |", "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
        for name, entry in result["parts"][part].items():
            for who in ("before", "after"):
                s = entry[who]
                d, k, iv = s["detect"], s.get("kind", {}), s["interval"]
                lines.append(
                    f"| {name} | {entry['groups']} | {s['units']} | {s['positives']} | {who} "
                    f"| {_pct(d['precision'])} ({_pct(iv['precision'][0])}-{_pct(iv['precision'][1])}) "
                    f"| {_pct(d['recall'])} ({_pct(iv['recall'][0])}-{_pct(iv['recall'][1])}) | {d['f1']:.3f} "
                    f"| {_pct(k.get('precision')) if k else '-'} | {_pct(k.get('recall')) if k else '-'} |")
        lines.append("")
        for name, entry in result["parts"][part].items():
            kinds = name == "agent"
            lines += [f"Recall per label, {name} ({part.replace('_', '-')}): detected"
                      + (" / with an accepted kind" if kinds else "") + ", before -> after", "",
                      "| label | n | before | after |", "|---|---:|---:|---:|"]
            for label, after in entry["after"]["by_label"].items():
                b = entry["before"]["by_label"][label]
                lines.append(f"| {label} | {after['n']} | {_recall_cell(b, kinds)} | {_recall_cell(after, kinds)} |")
            lines += ["", f"Precision per predicted kind, {name} ({part.replace('_', '-')}): share of the "
                      "kind's predictions that are key facts" + (" / of an accepted kind" if kinds else ""), "",
                      "| kind | before: n | before | after: n | after |", "|---|---:|---:|---:|---:|"]
            for kind in sorted(set(entry["before"]["by_kind"]) | set(entry["after"]["by_kind"])):
                row = [f"| {kind}"]
                for who in ("before", "after"):
                    s = entry[who]["by_kind"].get(kind)
                    if s is None:
                        row += ["0", "-"]
                    else:
                        row += [str(s["predicted"]), _pct(s["precision"])
                                + (f" / {_pct(s['kind_precision'])}" if kinds else "")]
                lines.append(" | ".join(row) + " |")
            lines.append("")
    lines += ["## CPU", "", "| set | extractor | messages | CPU s (median of 3, range) | worst message ms |",
              "|---|---|---:|---:|---:|"]
    for name, per in result["cpu"].items():
        for who, c in per.items():
            lines.append(f"| {name} | {who} | {c['messages']} | {c['median_s']:.3f} ({c['min_s']:.3f}-"
                         f"{c['max_s']:.3f}) | {c['worst_message_ms']:.2f} |")
    lines += ["", "Detection: a unit counts as extracted when the extractor returns a fact for it, of any kind. "
              "Kind (agent set only): the fact's kind is one the label accepts. Intervals: 95%, bootstrap over "
              "threads or sessions. LoCoMo precision is a floor: its annotators noted the facts a later question "
              "needs, not every fact."]
    return "\n".join(lines) + "\n"

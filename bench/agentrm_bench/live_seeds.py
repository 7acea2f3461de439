"""The live check over several seeds and repeats: `agentrm bench live [--scenario NAME]
--seeds 1-5 [--repeat N]`.

One live run is one trace (its seed) served once, and its verdict mixes two things: how
well the simulation predicts the service on that trace, and the noise of one wall-clock
run on a shared machine. Seeds give other traces; repeats of a seed serve the same trace
again, so their spread is the live run's own noise. Each run is judged as one run is (its
metrics within 15% of the simulation of the same trace, or within a metric's floor), and
this adds, per metric, every run's live value, sim value and ratio side by side, and the
spread over the runs: min, max, mean and standard deviation of live, and the range of
live/sim.

Runs are sequential, against one database: each is wall-clock, and two at once would share
the machine and measure each other.
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Awaitable, Callable
from pathlib import Path

RunOne = Callable[[int], Awaitable[dict]]   # seed -> one run's result (with "comparison")
DELAYS = ("client_delay_p50_s", "client_delay_p95_s", "report_delay_p50_s", "report_delay_p95_s")


def parse_seeds(text: str) -> list[int]:
    """'1-5', '1,3,5', '11-15,20' -> the seeds in the order given, each once."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        bounds = part.split("-")
        if len(bounds) > 2 or not all(b.strip().isdigit() for b in bounds):
            raise ValueError(f"seeds must be whole numbers or ranges like 1-5, separated by commas; got {part!r}")
        lo, hi = int(bounds[0]), int(bounds[-1])
        if hi < lo:
            raise ValueError(f"the range {part!r} is empty (it must go up, like 1-5)")
        seeds.extend(range(lo, hi + 1))
    if not seeds:
        raise ValueError("no seeds given")
    return list(dict.fromkeys(seeds))


async def run_seeds(run_one: RunOne, seeds: list[int], repeat: int) -> list[dict]:
    """Every (seed, repeat) once, in order: [{seed, repeat, result}]."""
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    runs = []
    for seed in seeds:
        for r in range(repeat):
            runs.append({"seed": seed, "repeat": r + 1, "result": await run_one(seed)})
    return runs


def _ratio(row: dict) -> float | None:
    live, sim = row.get("live"), row.get("sim")
    if live is None or sim is None or not sim:
        return None
    return live / sim


def _spread(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "min": None, "max": None, "mean": None, "stdev": None}
    return {"n": len(values), "min": min(values), "max": max(values), "mean": statistics.fmean(values),
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0}


def summarize(runs: list[dict]) -> dict:
    """Per metric: each run's live, sim, ratio and verdict, and the spread over the runs."""
    metrics: dict[str, dict] = {}
    for run in runs:
        for key, row in run["result"]["comparison"].items():
            entry = metrics.setdefault(key, {"runs": []})
            entry["runs"].append({"seed": run["seed"], "repeat": run["repeat"], "live": row.get("live"),
                                  "sim": row.get("sim"), "ratio": _ratio(row), "within": bool(row.get("within"))})
    for entry in metrics.values():
        rows = entry["runs"]
        entry["live"] = _spread([r["live"] for r in rows if r["live"] is not None])
        entry["sim"] = _spread([r["sim"] for r in rows if r["sim"] is not None])
        entry["ratio"] = _spread([r["ratio"] for r in rows if r["ratio"] is not None])
        entry["passed"] = sum(1 for r in rows if r["within"])
        entry["failed_runs"] = [(r["seed"], r["repeat"]) for r in rows if not r["within"]]
    return {"runs": [{"seed": r["seed"], "repeat": r["repeat"], "all_within": r["result"]["all_within"],
                      "elapsed_s": r["result"].get("elapsed_s"),
                      # How loaded the run was: the sim draws its client delays from these.
                      "delays": {k: r["result"].get("diagnostics", {}).get(k) for k in DELAYS}} for r in runs],
            "metrics": metrics,
            "all_within": all(r["result"]["all_within"] for r in runs)}


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def to_markdown(title: str, summary: dict) -> str:
    runs = summary["runs"]
    labels = [f"s{r['seed']}" + (f"#{r['repeat']}" if any(x["repeat"] > 1 for x in runs) else "") for r in runs]
    lines = [f"# {title}: live against the simulation, per seed", "",
             f"{len(runs)} runs (seed#repeat): {', '.join(labels)}. Each cell: live / sim (ratio), "
             "FAIL when outside 15% of the sim and the metric's floor. Spread: over all runs.", "",
             "| metric | " + " | ".join(labels) + " | passed | live min-max (mean ± sd) | live/sim min-max |",
             "|---|" + "---|" * len(labels) + "---|---|---|"]
    for key, entry in summary["metrics"].items():
        cells = []
        for row in entry["runs"]:
            ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
            cells.append(f"{_fmt(row['live'])} / {_fmt(row['sim'])} ({ratio}){'' if row['within'] else ' FAIL'}")
        live, ratio = entry["live"], entry["ratio"]
        live_s = "-" if live["n"] == 0 else (f"{_fmt(live['min'])}-{_fmt(live['max'])} "
                                             f"({_fmt(live['mean'])} ± {_fmt(live['stdev'])})")
        ratio_s = "-" if ratio["n"] == 0 else f"{ratio['min']:.2f}-{ratio['max']:.2f}"
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {entry['passed']}/{len(entry['runs'])} "
                     f"| {live_s} | {ratio_s} |")
    lines += ["", "| run | grant -> provider p50 / p95 (wall ms) | last byte -> decision p50 / p95 (wall ms) |",
              "|---|---|---|"]
    for label, r in zip(labels, runs):
        d = r.get("delays") or {}
        ms = {k: "-" if d.get(k) is None else f"{d[k] * 1000:.0f}" for k in DELAYS}
        lines.append(f"| {label} | {ms['client_delay_p50_s']} / {ms['client_delay_p95_s']} "
                     f"| {ms['report_delay_p50_s']} / {ms['report_delay_p95_s']} |")
    took = sum(r["elapsed_s"] or 0.0 for r in runs)
    lines += ["", f"All within: {'yes' if summary['all_within'] else 'no'}. The runs took {took:.0f} s of wall time."]
    return "\n".join(lines) + "\n"


def write(out_dir: str | Path, stem: str, title: str, summary: dict) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}_seeds.md").write_text(to_markdown(title, summary))
    (out / f"{stem}_seeds.json").write_text(json.dumps(summary, sort_keys=True, default=str, indent=1))

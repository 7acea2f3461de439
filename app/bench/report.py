"""Benchmark reports: Markdown tables and PNG plots (matplotlib, Agg backend: no display).

The first half is generic and reused by every benchmark (`table`, `fmt`, `spread_cell`,
`line_plot`, `cdf_plot`); the second half lays out the scheduler benchmark's report.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

# -- generic helpers --------------------------------------------------------------------


def fmt(value, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def spread_cell(agg: dict, digits: int = 1) -> str:
    """'mean (min-max)' for a metric aggregated over seeds."""
    if agg.get("mean") is None:
        return "-"
    if agg["min"] == agg["max"]:
        return fmt(agg["mean"], digits)
    return f"{fmt(agg['mean'], digits)} ({fmt(agg['min'], digits)}–{fmt(agg['max'], digits)})"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def line_plot(path: Path, title: str, xlabel: str, ylabel: str,
              lines: dict[str, tuple[Sequence[float], Sequence[float]]], step: bool = False,
              logy: bool = False) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for label, (x, y) in lines.items():
        if step:
            ax.step(x, y, where="post", label=label)
        else:
            ax.plot(x, y, label=label)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("symlog")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def cdf_plot(path: Path, title: str, xlabel: str, samples: dict[str, Sequence[float]],
             logx: bool = True) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for label, values in samples.items():
        values = sorted(values)
        if not values:
            continue
        n = len(values)
        ax.plot(values, [(i + 1) / n for i in range(n)], label=label)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of calls")
    if logx:
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# -- the scheduler benchmark's report ---------------------------------------------------

SCHEDULER_COLUMNS = (
    ("p50_latency_s", "P50 s", 1), ("p95_latency_s", "P95 s", 1), ("p99_latency_s", "P99 s", 1),
    ("lane_waste", "lane waste", 3), ("throughput_per_min", "calls/min", 1), ("zombies", "zombies", 1),
    ("rate_limited", "429s", 0), ("max_wait_s", "max wait s", 1), ("jain_fairness", "Jain", 3),
)


def markdown_table(result: dict) -> str:
    """The main table: mean over seeds, (min–max) beside it."""
    rows = []
    for name, spread in result["spread"].items():
        rows.append([name] + [spread_cell(spread[key], digits) for key, _, digits in SCHEDULER_COLUMNS])
    return table(["policy"] + [label for _, label, _ in SCHEDULER_COLUMNS], rows)


def per_class_table(result: dict) -> str:
    rows = []
    for name, metrics in result["policies"].items():
        for cls, m in metrics.get("per_class", {}).items():
            rows.append([name, cls.lower(), fmt(m["p50_latency_s"]), fmt(m["p95_latency_s"]),
                         fmt(m["p99_latency_s"]), fmt(m["throughput_per_min"]), fmt(m["max_wait_s"]),
                         fmt(m["jain_fairness"], 3)])
    return table(["policy", "class", "P50 s", "P95 s", "P99 s", "calls/min", "max wait s", "Jain"], rows)


def targets_table(result: dict) -> str:
    """The project's targets against lanes-fifo, as measured (means over seeds)."""
    p = result["policies"]
    if "agentrm" not in p or "lanes-fifo" not in p:
        return ""
    a, b = p["agentrm"], p["lanes-fifo"]

    def below(x, y):
        return None if not y else 1.0 - x / y

    ratio = a["throughput_per_min"] / b["throughput_per_min"] if b["throughput_per_min"] else None
    share429 = a["rate_limited_share"]
    rows = [
        ["P95 latency below lanes-fifo", ">= 90%", fmt(100 * below(a["p95_latency_s"], b["p95_latency_s"]), 1) + "%"],
        ["lane waste below lanes-fifo", ">= 98%", fmt(100 * below(a["lane_waste"], b["lane_waste"]), 1) + "%"],
        ["throughput vs lanes-fifo", ">= 2.7x", fmt(ratio, 2) + "x"],
        ["zombies", "0", fmt(a["zombies"], 1)],
        ["429s / provider calls", "< 1%", fmt(100 * share429, 2) + "%"],
    ]
    for row in rows:
        row.append("")
    return table(["target", "wanted", "measured", ""], [r[:3] for r in rows])


def write_scheduler_report(out: Path, result: dict, plot_series: dict[str, dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    w = result["workload"]
    md = [
        "# Scheduler benchmark",
        "",
        f"{w['agents']} agents, {w['minutes']} simulated minutes, seeds {w['seeds']}, "
        f"{w['lanes']} lanes, provider {w['rpm']} RPM / {w['tpm']} TPM, hang rate {w['hang_rate']}. "
        f"agentrm settings beyond the core's defaults: {w['agentrm_settings'] or 'none'}.",
        "Cells: mean over seeds (min–max).",
        "",
        markdown_table(result),
        "",
        "## Targets (agentrm against lanes-fifo)",
        "",
        targets_table(result),
        "",
        "## Per priority class (mean over seeds)",
        "",
        per_class_table(result),
        "",
        "Plots (first seed): `scheduler_latency_cdf.png`, `scheduler_lanes.png`, `scheduler_429s.png`.",
        "Metric definitions: `app/bench/metrics.py`; baseline models and their sources: "
        "`app/bench/policies.py`; workload: `app/bench/workload.py`.",
        "",
        "## Workload parameters",
        "",
        "```",
        *[f"{k} = {v}" for k, v in sorted(w.items())],
        "```",
        "",
    ]
    (out / "scheduler.md").write_text("\n".join(md))
    cdf_plot(out / "scheduler_latency_cdf.png", "Turn latency (request to successful answer)", "seconds",
             {name: s["latencies"] for name, s in plot_series.items()})
    lanes = {f"{name} held": (s["t"], s["occupancy"]) for name, s in plot_series.items()}
    lanes.update({f"{name} hung": (s["t"], s["hung_occupancy"]) for name, s in plot_series.items()
                  if any(s["hung_occupancy"])})
    line_plot(out / "scheduler_lanes.png", "Slots held over time (and those held by hung calls)",
              "simulated seconds", "slots", lanes, step=True)
    line_plot(out / "scheduler_429s.png", "429 answers per 5 s", "simulated seconds", "429s",
              {name: (s["rate_limited_t"], s["rate_limited"]) for name, s in plot_series.items()},
              step=True, logy=True)

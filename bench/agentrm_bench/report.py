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


TARGET_LABELS = {
    "p95_latency_below": ("P95 latency below lanes-fifo", lambda v: f"{100 * v:.1f}%"),
    "lane_waste_below": ("lane waste below lanes-fifo", lambda v: f"{100 * v:.1f}%"),
    "throughput_ratio": ("throughput vs lanes-fifo", lambda v: f"{v:.2f}x"),
    "zombies": ("zombies (agentrm)", lambda v: f"{v:.0f}"),
    "rate_limited_share": ("429s / provider calls (agentrm)", lambda v: f"{100 * v:.2f}%"),
}


def targets_table(targets: dict) -> str:
    """The project's targets against lanes-fifo: the mean over seeds, the range over seeds
    (each seed compares the two policies on the same trace), and whether every seed met it."""
    if not targets:
        return ""
    rows = []
    for name, t in targets.items():
        label, show = TARGET_LABELS[name]
        if t["mean"] is None:
            rows.append([label, t["wanted"], "-", "-", "no"])
            continue
        rows.append([label, t["wanted"], show(t["mean"]), f"{show(t['min'])} – {show(t['max'])}",
                     "yes" if t["holds_on_every_seed"] else "**no**"])
    return table(["target", "wanted", "mean", "range over seeds", "met on every seed"], rows)


def scenarios_table(scenarios: dict) -> str:
    rows = []
    for name, sc in scenarios.items():
        t = sc["targets"]
        cells = []
        for key in ("p95_latency_below", "lane_waste_below", "throughput_ratio"):
            _label, show = TARGET_LABELS[key]
            cells.append(f"{show(t[key]['mean'])} ({show(t[key]['min'])} – {show(t[key]['max'])})"
                         if t[key]["mean"] is not None else "-")
        a, b = sc["policies"]["agentrm"], sc["policies"]["lanes-fifo"]
        others = ", ".join(f"{p} {fmt(m['rate_limited'], 0)}" for p, m in sc["policies"].items() if p != "agentrm")
        rows.append([f"{name}: {sc['about']}", *cells, fmt(a["lane_waste"], 3), fmt(b["lane_waste"], 3),
                     fmt(a["throughput_per_min"]), fmt(b["throughput_per_min"]),
                     f"{fmt(a.get('reaps'), 0)} ({fmt(a.get('spurious_reaps'), 0)})",
                     f"agentrm {fmt(a['rate_limited'], 0)}; {others}"])
    return table(["scenario (default workload with one change)", "P95 below", "waste below", "throughput",
                  "agentrm waste", "lanes-fifo waste", "agentrm calls/min", "lanes-fifo calls/min",
                  "agentrm reaps (of live calls)", "429s (mean per run)"], rows)


def scenarios_plot(path: Path, result: dict) -> None:
    """Throughput ratio and P95 reduction per operating point, with the seeds' range."""
    points = {"default": {"targets": result["targets"]}, **result.get("scenarios", {})}
    names = list(points)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for ax, key, scale, goal, label in ((axes[0], "throughput_ratio", 1.0, 2.7, "throughput, agentrm / lanes-fifo"),
                                        (axes[1], "p95_latency_below", 100.0, 90.0, "P95 latency below lanes-fifo, %")):
        means = [points[n]["targets"][key]["mean"] * scale for n in names]
        lows = [m - points[n]["targets"][key]["min"] * scale for m, n in zip(means, names)]
        highs = [points[n]["targets"][key]["max"] * scale - m for m, n in zip(means, names)]
        ax.bar(names, means, yerr=[lows, highs], capsize=4, color="#4c72b0")
        ax.axhline(goal, color="#c44e52", linestyle="--", label=f"target {goal:g}")
        ax.set_title(label)
        ax.tick_params(axis="x", rotation=20)
        ax.grid(alpha=0.3, axis="y")
        ax.legend()
    fig.suptitle("Operating points: mean over seeds, bars span the seeds' range")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def lanes_plot(path: Path, plot_series: dict[str, dict], lanes: int) -> None:
    """Two panels over time: slots held per policy, and how many of them a hung call holds.
    Lines that sit on the lane cap overlap, so each policy gets its own line style."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), dpi=110, sharex=True)
    styles = ["-", "--", "-.", ":"]
    for i, (name, s) in enumerate(plot_series.items()):
        top.step(s["t"], s["occupancy"], where="post", label=name, linestyle=styles[i % 4])
        bottom.step(s["t"], s["hung_occupancy"], where="post", label=name, linestyle=styles[i % 4])
    top.axhline(lanes, color="grey", linewidth=0.8)
    top.set_title(f"Slots held (grey line: the {lanes} lanes; aios-fifo has no cap)")
    bottom.set_title("...of which held by a call that hung (zombies in the making)")
    bottom.set_xlabel("simulated seconds")
    for ax in (top, bottom):
        ax.set_ylabel("slots")
        ax.grid(alpha=0.3)
    top.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_scheduler_report(out: Path, result: dict, plot_series: dict[str, dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    w = result["workload"]
    md = [
        "# Scheduler benchmark",
        "",
        f"{w['agents']} agents, {w['minutes']} simulated minutes, seeds {w['seeds']}, "
        f"{w['lanes']} lanes, provider {w['rpm']} RPM / {w['tpm']} TPM, hang rate {w['hang_rate']}. "
        f"agentrm settings beyond the core's defaults: {w['agentrm_settings'] or 'none'}. The simulated "
        f"agentrm client pays {1000 * w['agentrm_client']['client_delay_s']:g} ms from grant to provider and "
        f"{1000 * w['agentrm_client']['report_delay_s']:g} ms from last byte to decision, the live check's "
        "measurement through the real service (`bench/agentrm_bench/policies.py`).",
        "Cells: mean over seeds (min–max).",
        "",
        markdown_table(result),
        "",
        "## Targets (agentrm against lanes-fifo, per seed on the same trace)",
        "",
        targets_table(result.get("targets", {})),
        "",
        *([f"## Other operating points (agentrm against lanes-fifo, {len(w['seeds'])} seeds each)", "",
           "Each scenario is the default workload with one change. Cells: mean (range over seeds).", "",
           scenarios_table(result["scenarios"]), "", "Plots: `scheduler_scenarios.png` (targets per operating point), "
           "`scheduler_provider-bound_429s.png` (429s over time where the provider binds; the default "
           "workload leaves the provider headroom and sees none).", ""]
          if result.get("scenarios") else []),
        "## Per priority class (mean over seeds)",
        "",
        per_class_table(result),
        "",
        "Plots (first seed): `scheduler_latency_cdf.png`, `scheduler_lanes.png`, `scheduler_429s.png`.",
        "Metric definitions: `bench/agentrm_bench/metrics.py`; baseline models and their sources: "
        "`bench/agentrm_bench/policies.py`; workload: `bench/agentrm_bench/workload.py`.",
        "",
        "## Workload parameters",
        "",
        "```",
        *[f"{k} = {v}" for k, v in sorted(w.items())],
        "```",
        "",
    ]
    (out / "scheduler.md").write_text("\n".join(md))
    if result.get("scenarios") and result.get("targets"):
        scenarios_plot(out / "scheduler_scenarios.png", result)
    for name, sc in (result.get("scenarios") or {}).items():
        if sc.get("series_429s"):
            line_plot(out / f"scheduler_{name}_429s.png", f"429 answers per 5 s, {name} scenario (first seed)",
                      "simulated seconds", "429s", {p: (s["t"], s["n"]) for p, s in sc["series_429s"].items()},
                      step=True, logy=True)
    cdf_plot(out / "scheduler_latency_cdf.png", "Turn latency (request to successful answer)", "seconds",
             {name: s["latencies"] for name, s in plot_series.items()})
    lanes_plot(out / "scheduler_lanes.png", plot_series, result["workload"]["lanes"])
    line_plot(out / "scheduler_429s.png", "429 answers per 5 s", "simulated seconds", "429s",
              {name: (s["rate_limited_t"], s["rate_limited"]) for name, s in plot_series.items()},
              step=True, logy=True)

"""Benchmark reports: Markdown tables and PNG plots (matplotlib, Agg backend: no display).

The first half is generic and reused by every benchmark (`table`, `fmt`, `spread_cell`,
`line_plot`, `cdf_plot`); the second half lays out the scheduler benchmark's report.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from cycler import cycler  # noqa: E402

# Up to twenty policies share a plot: twenty distinct colours, not the default ten.
plt.rcParams["axes.prop_cycle"] = cycler(color=plt.cm.tab20.colors)  # type: ignore[attr-defined]  # a ListedColormap


def _style(label: str) -> dict:
    """AgentRM's own lines stand out: thicker."""
    return {"linewidth": 2.4} if label.startswith("agentrm") else {"linewidth": 1.2}

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
    if logy:
        ax.set_yscale("symlog")
    _finish(fig, ax, path, title, xlabel, ylabel)


def cdf_plot(path: Path, title: str, xlabel: str, samples: dict[str, Sequence[float]],
             logx: bool = True) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for label, values in samples.items():
        values = sorted(values)
        if not values:
            continue
        n = len(values)
        ax.plot(values, [(i + 1) / n for i in range(n)], label=label, **_style(label))
    if logx:
        ax.set_xscale("log")
    _finish(fig, ax, path, title, xlabel, "share")


def _finish(fig, ax, path: Path, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# -- the scheduler benchmark's report ---------------------------------------------------

CLASS_ORDER = ("INTERACTIVE", "BATCH", "BACKGROUND")

# (key, header, digits); a key with a class after ':' reads that class of a per-class dict.
SCHEDULER_COLUMNS = (
    ("throughput_per_min", "calls/min", 1), ("fraction_of_limit", "of limit", 3),
    ("goodput_tokens_per_min", "Mtok/min", 2),
    ("p95_latency_s", "P95 s", 1), ("p99_latency_s", "P99 s", 1),
    ("p95_wait_s:INTERACTIVE", "int. P95 wait s", 2), ("p95_wait_s:BATCH", "batch P95 wait s", 1),
    ("p95_wait_s:BACKGROUND", "bg P95 wait s", 1),
    ("run_completion_mean_s", "run mean s", 1), ("run_completion_p99_s", "run P99 s", 1),
    ("rate_limited", "429s/call", 3), ("failed_calls", "failed", 0), ("hung_lane_seconds", "hung lane-s", 0),
    ("live_calls_cut", "live cut", 0), ("lane_waste", "lane waste", 3), ("zombies", "zombies", 1),
    ("stuck_agents", "stuck agents", 1), ("quarantined_agents", "quarantined", 1),
    ("jain:INTERACTIVE", "Jain int.", 3), ("jain:BATCH", "Jain batch", 3),
    ("jain_demand:INTERACTIVE", "Jain/demand int.", 3), ("jain_demand:BATCH", "Jain/demand batch", 3),
    ("max_service_gap", "max gap ktok", 1), ("max_service_gap_5min", "5-min gap ktok", 1),
    ("service_gap_over_2u", "gap / 2U", 2), ("over_admission", "over-adm.", 3),
)


def _value(metrics: dict, key: str):
    name, _, cls = key.partition(":")
    value = metrics.get(name)
    if cls:
        return value.get(cls) if isinstance(value, dict) else None
    if name == "goodput_tokens_per_min" and value is not None:
        return value / 1e6
    if name.startswith("max_service_gap") and value is not None:
        return value / 1e3
    return value


def _spread(metrics: dict, key: str, digits: int) -> str:
    name, _, cls = key.partition(":")
    values = metrics.get("per_seed", {}).get(name) or []
    if cls:
        values = [v.get(cls) if isinstance(v, dict) else None for v in values]
    values = [v for v in values if v is not None]
    mean = _value(metrics, key)
    if mean is None:
        return "-"
    scale = 1e6 if name == "goodput_tokens_per_min" else 1e3 if name.startswith("max_service_gap") else 1.0
    if len(values) < 2 or min(values) == max(values):
        return fmt(float(mean), digits)
    return f"{fmt(float(mean), digits)} ({fmt(min(values) / scale, digits)}–{fmt(max(values) / scale, digits)})"


def _order(name: str) -> tuple:
    """Report order: AgentRM and its ablations, then the baselines as the registry lists them,
    then a sweep by lane count."""
    from .policies import POLICY_NAMES
    if name in POLICY_NAMES:
        return (0, POLICY_NAMES.index(name), 0)
    base, _, variant = name.partition("@")
    return (1, base, int(variant) if variant.isdigit() else variant)


def scenario_table(result: dict, columns=SCHEDULER_COLUMNS, spread: bool = False) -> str:
    """One row per policy: the mean over seeds (with min-max when `spread`)."""
    headers = ["policy", *(h for _, h, _ in columns)]
    rows = []
    for name, m in sorted(result["policies"].items(), key=lambda item: _order(item[0])):
        cells = [(_spread(m, k, d) if spread else fmt(_value(m, k) if _value(m, k) is None
                                                      else float(_value(m, k)), d)) for k, _, d in columns]
        rows.append([name, *cells])
    return table(headers, rows)


def _class_cdf_plot(path: Path, result: dict, policies: list[str]) -> None:
    classes = [c for c in CLASS_ORDER if any(result["series"][p]["latencies_by_class"].get(c) for p in policies)]
    fig, axes = plt.subplots(1, len(classes), figsize=(5 * len(classes), 4.2), dpi=100, squeeze=False)
    for ax, cls in zip(axes[0], classes):
        for p in policies:
            values = result["series"][p]["latencies_by_class"].get(cls) or []
            if values:
                n = len(values)
                ax.plot(values, [(i + 1) / n for i in range(n)], label=p, **_style(p))
        ax.set_xscale("log")
        ax.set_title(f"{cls.lower()} latency (seed {result['workload']['seeds'][0]})")
        ax.set_xlabel("request -> answer, s")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("share of calls")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _goodput_plot(path: Path, result: dict, policies: list[str]) -> None:
    fig, ax = plt.subplots(figsize=(9, 4.2), dpi=100)
    values = [result["policies"][p]["throughput_per_min"] or 0.0 for p in policies]
    ax.barh(policies, values)
    ax.axvline(result["physical_limit_calls_per_min"], color="black", linestyle="--",
               label=f"physical limit ({result['physical_limit']['binding']})")
    ax.set_xlabel("successful calls per minute (mean over seeds)")
    ax.set_title(f"{result['scenario']}: goodput against the physical limit")
    ax.invert_yaxis()
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _saturation_plot(path: Path, result: dict) -> None:
    sweep = sorted((int(p.split("@")[1]), m) for p, m in result["policies"].items() if p.startswith("fixed-lanes@"))
    if not sweep:
        return
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.plot([m["p95_latency_s"] for _, m in sweep], [m["throughput_per_min"] for _, m in sweep], "o-",
            color="gray", label="fixed-lanes sweep")
    for n, m in sweep:
        ax.annotate(str(n), (m["p95_latency_s"], m["throughput_per_min"]), fontsize=7)
    for p, m in result["policies"].items():
        if not p.startswith("fixed-lanes@"):
            ax.plot([m["p95_latency_s"]], [m["throughput_per_min"]], "s", label=p)
    ax.set_xscale("log")
    ax.set_xlabel("P95 latency, s")
    ax.set_ylabel("successful calls per minute")
    ax.set_title("saturating provider: each policy's operating point")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def limit_sentence(result: dict) -> str:
    """The scenario's nominal physical limit, and what `of limit` is measured against."""
    return (f"Physical limit on the trace's mean call {result['physical_limit_calls_per_min']:.1f} calls/min "
            f"(bound by {result['physical_limit']['binding']}); `of limit` is each run's goodput over the "
            f"limit computed on the calls it completed, which no policy can exceed.")


def write_scheduler_report(out: Path, result: dict) -> None:
    """<scenario>.md (tables and definitions), <scenario>.json (without series) and the PNGs."""
    from . import metrics
    out.mkdir(parents=True, exist_ok=True)
    name = result["scenario"]
    policies = [p for p in result["policies"] if not p.startswith("fixed-lanes@")]
    if "series" in result:
        _class_cdf_plot(out / f"scheduler_{name}_latency_cdf.png", result, policies)
        cdf_plot(out / f"scheduler_{name}_runs_cdf.png", f"{name}: run completion time (seed "
                 f"{result['workload']['seeds'][0]})", "run start -> last answer, s",
                 {p: result["series"][p]["run_times"] for p in policies})
    _goodput_plot(out / f"scheduler_{name}_goodput.png", result, list(result["policies"]))
    _saturation_plot(out / f"scheduler_{name}_curve.png", result)
    body = {k: v for k, v in result.items() if k != "series"}
    (out / f"scheduler_{name}.json").write_text(json.dumps(body, indent=1, sort_keys=True, default=str))
    lines = [f"# Scheduler benchmark: `{name}`", "", result["about"], "",
             f"Seeds {result['workload']['seeds']}; {limit_sentence(result)} "
             f"Means over seeds, (min–max) over seeds.", "",
             scenario_table(result, spread=True), "", "## Metrics", "", metrics.__doc__.strip(), ""]
    (out / f"scheduler_{name}.md").write_text("\n".join(lines))


# The columns each scenario's headline table shows (the full tables keep every column).
_COMMON = (("throughput_per_min", "calls/min", 1), ("fraction_of_limit", "of limit", 2))
HEADLINE_COLUMNS = {
    "mixed-lanes": _COMMON + (("p95_wait_s:INTERACTIVE", "int. P95 wait s", 2),
                              ("p95_wait_s:BATCH", "batch P95 wait s", 1),
                              ("p95_latency_s", "P95 s", 1), ("run_completion_mean_s", "run mean s", 1),
                              ("rate_limited", "429s/call", 3), ("failed_calls", "failed", 0),
                              ("lane_waste", "lane waste", 3), ("jain:INTERACTIVE", "Jain int.", 3),
                              ("jain:BATCH", "Jain batch", 3), ("max_service_gap", "max gap ktok", 1)),
    "provider-bound": _COMMON + (("goodput_tokens_per_min", "Mtok/min", 2), ("rate_limited", "429s/call", 3),
                                 ("failed_calls", "failed", 0),
                                 ("p95_latency_s", "P95 s", 1), ("p99_latency_s", "P99 s", 1),
                                 ("p95_wait_s:INTERACTIVE", "int. P95 wait s", 1), ("over_admission", "over-adm.", 3),
                                 ("jain:INTERACTIVE", "Jain int.", 3), ("max_service_gap", "max gap ktok", 1)),
    "hangs": _COMMON + (("hung_lane_seconds", "hung lane-s", 0), ("live_calls_cut", "live cut", 0),
                        ("failed_calls", "failed", 0), ("zombies", "zombies", 1), ("stuck_agents", "stuck agents", 1),
                        ("p95_latency_s", "P95 s", 1),
                        ("p99_latency_s", "P99 s", 1), ("lane_waste", "lane waste", 3),
                        ("max_service_gap", "max gap ktok", 1)),
    "hangs-persist": _COMMON + (("hung_lane_seconds", "hung lane-s", 0), ("live_calls_cut", "live cut", 0),
                                ("failed_calls", "failed", 0), ("quarantined_agents", "quarantined", 1),
                                ("stuck_agents", "stuck agents", 1), ("zombies", "zombies", 1),
                                ("p95_latency_s", "P95 s", 1), ("p99_latency_s", "P99 s", 1),
                                ("run_completion_mean_s", "run mean s", 1)),
    "runs": _COMMON + (("run_completion_mean_s", "run mean s", 1), ("run_completion_p95_s", "run P95 s", 1),
                       ("run_completion_p99_s", "run P99 s", 1), ("p95_latency_s", "P95 s", 1),
                       ("rate_limited", "429s/call", 3), ("failed_calls", "failed", 0),
                       ("jain:BATCH", "Jain batch", 3), ("max_service_gap", "max gap ktok", 1)),
    "saturating-provider": _COMMON + (("goodput_tokens_per_min", "Mtok/min", 2), ("p95_latency_s", "P95 s", 1),
                                      ("p99_latency_s", "P99 s", 1), ("p95_wait_s:INTERACTIVE", "int. P95 wait s", 1),
                                      ("live_calls_cut", "live cut", 0),
                                      ("failed_calls", "failed", 0), ("stuck_agents", "stuck agents", 1),
                                      ("max_service_gap", "max gap ktok", 1)),
    "replicas": _COMMON + (("goodput_tokens_per_min", "Mtok/min", 2), ("over_admission", "over-adm.", 3),
                           ("rate_limited", "429s/call", 3),
                           ("failed_calls", "failed", 0), ("p95_latency_s", "P95 s", 1),
                           ("p95_wait_s:INTERACTIVE", "int. P95 wait s", 1)),
    "paper": _COMMON + (("p95_latency_s", "P95 s", 1), ("p99_latency_s", "P99 s", 1), ("lane_waste", "lane waste", 3),
                        ("hung_lane_seconds", "hung lane-s", 0), ("live_calls_cut", "live cut", 0),
                        ("zombies", "zombies", 1), ("run_completion_mean_s", "run mean s", 1)),
}


# The figures each scenario's per-seed table shows (one value per seed, a/b/c/...).
_SEED_COMMON = (("throughput_per_min", "calls/min", 1), ("fraction_of_limit", "of limit", 2))
PER_SEED_COLUMNS = {
    "mixed-lanes": _SEED_COMMON + (("p95_wait_s:INTERACTIVE", "int. P95 wait s", 1),
                                   ("run_completion_mean_s", "run mean s", 1),
                                   ("jain_demand:INTERACTIVE", "Jain/demand int.", 3),
                                   ("service_gap_over_2u", "gap / 2U", 2)),
    "provider-bound": _SEED_COMMON + (("p95_latency_s", "P95 s", 1), ("rate_limited", "429s/call", 3),
                                      ("jain_demand:INTERACTIVE", "Jain/demand int.", 3),
                                      ("service_gap_over_2u", "gap / 2U", 2)),
    "hangs": _SEED_COMMON + (("hung_lane_seconds", "hung lane-s", 0), ("live_calls_cut", "live cut", 0),
                             ("p95_latency_s", "P95 s", 1), ("stuck_agents", "stuck", 0)),
    "runs": _SEED_COMMON + (("run_completion_mean_s", "run mean s", 1), ("run_completion_p99_s", "run P99 s", 1),
                            ("jain_demand:BATCH", "Jain/demand batch", 3), ("service_gap_over_2u", "gap / 2U", 2)),
    "paper": _SEED_COMMON + (("p95_latency_s", "P95 s", 1), ("hung_lane_seconds", "hung lane-s", 0),
                             ("live_calls_cut", "live cut", 0)),
    "replicas": _SEED_COMMON + (("over_admission", "over-adm.", 2), ("p95_latency_s", "P95 s", 1)),
    "saturating-provider": _SEED_COMMON + (("p95_latency_s", "P95 s", 1),),
}
for _name in ("hangs-persist", "hangs-persist-model", "reasoning-mix"):
    PER_SEED_COLUMNS[_name] = PER_SEED_COLUMNS["hangs"] + (("quarantined_agents", "quarantined", 0),)
PER_SEED_COLUMNS["provider-bound-predictable"] = PER_SEED_COLUMNS["provider-bound"]


def per_seed_table(result: dict, columns=None) -> str:
    """One row per policy, each cell the seeds' values in seed order (a/b/c/...)."""
    columns = columns or PER_SEED_COLUMNS.get(result["scenario"], _SEED_COMMON)
    headers = ["policy", *(h for _, h, _ in columns)]
    rows = []
    for name, m in sorted(result["policies"].items(), key=lambda item: _order(item[0])):
        cells = []
        for key, _, digits in columns:
            metric, _, cls = key.partition(":")
            values = m.get("per_seed", {}).get(metric) or []
            if cls:
                values = [v.get(cls) if isinstance(v, dict) else None for v in values]
            scale = 1e3 if metric.startswith("max_service_gap") else 1.0
            cells.append("/".join(fmt(None if v is None else float(v) / scale, digits) for v in values) or "-")
        rows.append([name, *cells])
    return table(headers, rows)


def headline_table(result: dict) -> str:
    return scenario_table(result, HEADLINE_COLUMNS.get(result["scenario"], SCHEDULER_COLUMNS), spread=True)


def write_summary(out: Path, names: Sequence[str]) -> Path:
    """scheduler.md: every scenario's headline table, from the JSON each run wrote."""
    lines = ["# Scheduler benchmark v3: every scenario", "",
             "Means over seeds 1-5 unless a section says otherwise, (min–max) over seeds. Full tables: "
             "`scheduler_<scenario>.md`.", ""]
    for name in names:
        path = out / f"scheduler_{name}.json"
        if not path.exists():
            continue
        result = json.loads(path.read_text())
        seeds = result["workload"]["seeds"]
        other = "" if seeds == [1, 2, 3, 4, 5] else f"Seeds {', '.join(map(str, seeds))}. "
        lines += [f"## {name}", "", result["about"], "",
                  f"{other}{limit_sentence(result)}", "", headline_table(result), "",
                  f"Per seed ({', '.join(map(str, seeds))}):", "", per_seed_table(result), ""]
    target = out / "scheduler.md"
    target.write_text("\n".join(lines))
    return target

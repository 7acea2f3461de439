"""The deployment and monitoring files in ops/: they parse, their queries name only metrics
the app exports, and their probes and scrape paths are routes the app serves."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from app.observability.metrics import EXPORTED, AppMetrics

OPS = Path(__file__).resolve().parents[2] / "ops"
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def yaml_files() -> list[Path]:
    return sorted(p for p in OPS.rglob("*") if p.suffix in (".yaml", ".yml"))


def documents(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def metric_names(expr: str) -> set[str]:
    """The agentrm_* series an expression reads, histogram suffixes folded into their family."""
    names = set()
    for name in re.findall(r"\bagentrm_[a-z0-9_]+", expr):
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in EXPORTED:
                name = name[: -len(suffix)]
        names.add(name)
    return names


def app_paths() -> set[str]:
    from app.api.app import create_app
    return {route.path for route in create_app("postgresql://unused/none").routes}


def dashboard_exprs() -> list[str]:
    dash = json.loads((OPS / "grafana" / "agentrm-dashboard.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


def rule_exprs() -> list[str]:
    rules = documents(OPS / "prometheus" / "alerts.yml")[0]
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def dockerfile_stages() -> dict[str, list[str]]:
    """The Dockerfile's instructions (continuation lines joined) by stage name (FROM ... AS name)."""
    text = (OPS / "Dockerfile").read_text().replace("\\\n", " ")
    stages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("FROM "):
            current = stages.setdefault(line.split()[-1], [])
        if line and not line.startswith("#"):
            current.append(line)
    return stages


def index_of(lines: list[str], pattern: str) -> int:
    """The position of the first instruction matching `pattern`."""
    return next(i for i, line in enumerate(lines) if re.search(pattern, line))


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(OPS)))
def test_every_yaml_file_parses(path):
    assert documents(path)


def test_the_expected_files_are_there():
    assert (OPS.parent / "docs/operations/runbook.md").is_file(), "docs/operations/runbook.md"
    for name in ("Dockerfile", "compose.yaml", "k8s/deployment.yaml", "k8s/service.yaml",
                 "k8s/postgres.yaml", "k8s/networkpolicy.yaml", "prometheus/prometheus.yml", "prometheus/alerts.yml",
                 "grafana/agentrm-dashboard.json"):
        assert (OPS / name).is_file(), name


def test_exported_lists_exactly_what_the_registry_serves():
    """EXPORTED (what the ops files may use) against the metric families a real app's
    registry renders, on the in-memory application."""
    import asyncio

    from app.bootstrap import memory_runtime

    async def render() -> str:
        rt = await memory_runtime()
        try:
            return (await AppMetrics(rt).render()).decode()
        finally:
            await rt.stop()
    text = asyncio.run(render())
    families = set(re.findall(r"^# TYPE (\w+) (\w+)$", text, re.M))
    names = {n + "_total" if kind == "counter" and not n.endswith("_total") else n for n, kind in families}
    assert names == set(EXPORTED)


def test_rules_and_dashboard_name_only_exported_metrics():
    exprs = rule_exprs() + dashboard_exprs()
    assert len(exprs) >= 20
    used = set()
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"no AgentRM metric in {expr!r}"
        unknown = names - set(EXPORTED)
        assert not unknown, f"{expr!r} names metrics the app does not export: {unknown}"
        used |= names
    # The dashboard covers the issue's list: queues, lanes, budget, grants, reaps, demotions,
    # boosts, 429s, pauses, grant latency, projection lag, compactions, hibernation, gateway.
    for wanted in ("agentrm_queue_depth", "agentrm_lanes_busy", "agentrm_rate_available_tokens",
                   "agentrm_grants_total", "agentrm_reaps_total", "agentrm_demotions_total",
                   "agentrm_boosts_total", "agentrm_rate_limited_total", "agentrm_pauses_total",
                   "agentrm_grant_latency_seconds", "agentrm_projection_lag_seconds", "agentrm_compactions_total",
                   "agentrm_hibernated_agents", "agentrm_gateway_request_duration_seconds",
                   "agentrm_gateway_upstream_responses_total"):
        assert wanted in used, wanted


def test_the_alerts_the_issue_asks_for_exist():
    rules = {r["alert"]: r for g in documents(OPS / "prometheus" / "alerts.yml")[0]["groups"] for r in g["rules"]}
    assert "agentrm_reaps_total" in rules["AgentRMReapsRising"]["expr"]
    assert "agentrm_pool_paused" in rules["AgentRMPoolPausedTooLong"]["expr"]
    assert "agentrm_projection_lag" in rules["AgentRMProjectionLag"]["expr"]


def test_probes_and_scrapes_point_at_real_paths():
    paths = app_paths()
    deployment = documents(OPS / "k8s" / "deployment.yaml")[0]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    probes = {kind: container[kind]["httpGet"]["path"] for kind in ("livenessProbe", "readinessProbe", "startupProbe")}
    assert probes == {"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"}
    assert set(probes.values()) <= paths
    assert deployment["spec"]["replicas"] >= 2
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] in paths
    port = container["ports"][0]["containerPort"]
    assert str(port) == annotations["prometheus.io/port"]
    service = documents(OPS / "k8s" / "service.yaml")[0]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    scrape = documents(OPS / "prometheus" / "prometheus.yml")[0]
    assert {job["metrics_path"] for job in scrape["scrape_configs"]} == {"/metrics"} <= paths
    # /metrics is the operator's: every job sends the operator token, from a file.
    for job in scrape["scrape_configs"]:
        assert job["authorization"]["type"] == "Bearer" and job["authorization"]["credentials_file"], job
    compose = documents(OPS / "compose.yaml")[0]
    check = " ".join(compose["services"]["agentrm"]["healthcheck"]["test"])
    assert any(path in check for path in ("/healthz", "/readyz"))
    dockerfile = (OPS / "Dockerfile").read_text()
    assert re.search(r"127\.0\.0\.1:8000(/\w+)", dockerfile)[1] in paths
    assert len(re.findall(r"^FROM ", dockerfile, re.M)) >= 2            # multi-stage
    assert re.search(r'torch==[\d.]+"? --index-url \S+/cpu', dockerfile)  # the CPU build
    # The commands the ops files run exist in the CLI.
    from app.cli import build_parser
    commands = build_parser()._subparsers._group_actions[0].choices
    for args in (container["args"], deployment["spec"]["template"]["spec"]["initContainers"][0]["command"]):
        assert args[0] == "agentrm" and args[1] in commands
        build_parser().parse_args(args[1:])


def test_the_image_builds_the_console_and_serves_it_where_the_app_looks():
    """A Node stage runs `npm ci` and `npm run build` in frontend/, and the final stage holds
    its dist/ where app/api/app.py finds the console: frontend/dist beside the app package."""
    from app.api.app import CONSOLE
    stages = dockerfile_stages()
    console = next(name for name, lines in stages.items() if re.match(r"FROM node:(\d+)", lines[0]))
    lines = stages[console]
    assert int(re.match(r"FROM node:(\d+)", lines[0])[1]) >= 20     # vite 8 wants node 20.19 or later
    workdir = next(line.split()[1] for line in lines if line.startswith("WORKDIR "))
    assert workdir.endswith("/frontend")
    assert index_of(lines, r"^COPY frontend/package\.json frontend/package-lock\.json ") \
        < index_of(lines, r"^RUN npm ci\b") < index_of(lines, r"^COPY frontend/src ") \
        < index_of(lines, r"^RUN npm run build\b")
    final = list(stages.values())[-1]
    home = [line.split()[1] for line in final if line.startswith("WORKDIR ")][-1]
    assert f"PYTHONPATH={home}" in " ".join(final)
    assert any(re.fullmatch(r"COPY --from=\w+ /src/app \./app", line) for line in final)
    dist = CONSOLE.relative_to(Path(__file__).resolve().parents[2])     # frontend/dist
    assert f"COPY --from={console} {workdir}/dist ./{dist.as_posix()}" in final


def test_the_image_installs_the_client_before_the_server():
    build = dockerfile_stages()["build"]
    torch = index_of(build, r'^RUN pip install "torch==')
    client = index_of(build, r"^RUN pip install \./clients/python$")
    server = index_of(build, r"^RUN pip install \.$")
    assert torch < client < server
    assert index_of(build, r"^COPY clients/python \./clients/python$") < client
    # The server's metadata names LICENSE (license-files): it must be there to build.
    assert re.search(r"\bLICENSE\b", build[index_of(build, r"^COPY pyproject\.toml ")])

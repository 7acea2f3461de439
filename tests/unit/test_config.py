"""app/config.py: the one table of settings, its errors, its page, and that nothing else
in app/ or bench/ touches the environment."""
from __future__ import annotations

import ast
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app import config
from app.config import VARIABLES, ConfigError, Settings, reference_markdown

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "python docs/generate.py"

# A value outside what each numeric or boolean variable accepts.
BAD = {"number": ("abc", "nan", "-1e9", "1e12"), "whole number": ("abc", "1.5", "-100000", "99999999999"),
       "flag": ("maybe", "2"), "choice": ("p50k_base",), "process id": ("abc", "1.5")}


def sources() -> list[Path]:
    return sorted(p for top in ("app", "bench") for p in (ROOT / top).rglob("*.py"))


def test_every_variable_parses_its_default_and_unset_or_empty_gives_it():
    assert Settings.from_mapping({}) == Settings()
    assert Settings.from_mapping({v.name: " " for v in VARIABLES}) == Settings()
    for field in dataclasses.fields(Settings):
        variable = field.metadata["variable"]
        assert variable.parse(None) == field.default
        if variable.default is not None and not isinstance(variable.default, bool):
            assert variable.parse(str(variable.default)) == variable.default, variable.name


def test_todays_values_parse_as_they_did():
    settings = Settings.from_mapping({
        "AGENTRM_LEADER_LEASE_SECONDS": "0.2", "AGENTRM_SUBSCRIBER_SEND_TIMEOUT_SECONDS": "3600",
        "AGENTRM_INTROSPECTION": "off", "AGENTRM_HOT_DOCUMENTS": "0", "AGENTRM_DEBUG": "1",
        "AGENTRM_EMBEDDING_NICE": "0", "AGENTRM_EMBEDDING_THREADS": " 2 ", "AGENTRM_DEMO": "0",
        "AGENTRM_SUPERVISOR_PID": "0", "AGENTRM_HIBERNATE_IDLE_SECONDS": "inf", "DATABASE_URL": "postgresql://x/y"})
    assert settings.leader_lease_seconds == 0.2 and settings.subscriber_send_timeout_seconds == 3600
    assert settings.introspection is False and settings.hot_documents is False and settings.debug is True
    assert settings.embedding_nice == 0 and settings.embedding_threads == 2 and settings.demo is False
    assert settings.supervisor_pid is None and settings.hibernate_idle_seconds == float("inf")
    assert settings.database_url == "postgresql://x/y"


@pytest.mark.parametrize("variable", [v for v in VARIABLES if v.kind.type in BAD], ids=lambda v: v.name)
def test_a_bad_value_is_one_line_naming_the_variable_the_value_and_what_is_accepted(variable):
    refused = 0
    for raw in BAD[variable.kind.type]:
        try:
            variable.parse(raw)
        except ConfigError as exc:
            refused += 1
            message = str(exc)
            assert message == f"{variable.name}={raw!r}: {variable.kind.accepted}"
            assert "\n" not in message
            with pytest.raises(ConfigError, match=re.escape(variable.name)):
                Settings.from_mapping({variable.name: raw})
    assert refused >= 1, f"{variable.name} accepted every one of {BAD[variable.kind.type]}"


def test_the_leader_lease_message_reads_as_documented():
    with pytest.raises(ConfigError) as refused:
        Settings.from_mapping({"AGENTRM_LEADER_LEASE_SECONDS": "abc"})
    assert str(refused.value) == "AGENTRM_LEADER_LEASE_SECONDS='abc': a number of seconds between 0.2 and 600"
    assert isinstance(refused.value, ValueError)


def test_load_reads_the_environment_when_called(monkeypatch):
    monkeypatch.setenv("AGENTRM_MAX_QUEUED_PER_AGENT", "7")
    assert config.load().max_queued_per_agent == 7
    monkeypatch.setenv("AGENTRM_MAX_QUEUED_PER_AGENT", "0")
    with pytest.raises(ConfigError, match="AGENTRM_MAX_QUEUED_PER_AGENT='0'"):
        config.load()


def test_the_writers_hand_settings_over_under_their_variables(monkeypatch):
    for name in ("AGENTRM_RESOLVED_DATABASE_URL", "AGENTRM_DEMO", "AGENTRM_SUPERVISOR_PID",
                 "AGENTRM_UPSTREAM_BASE_URL", "AGENTRM_EMBEDDING_THREADS"):
        monkeypatch.delenv(name, raising=False)
    config.export_for_workers(database_url="postgresql://h/db", demo=False)
    config.export_for_workers(supervisor_pid=4242, upstream_base_url="http://127.0.0.1:1/v1")
    config.export_embedding_threads(3)
    settings = config.load()
    assert settings.resolved_database_url == "postgresql://h/db" and settings.demo is False
    assert settings.supervisor_pid == 4242 and settings.upstream_base_url == "http://127.0.0.1:1/v1"
    assert settings.embedding_threads == 3
    child = config.child_environment({"DATABASE_URL": "a"}, AGENTRM_DATA_DIR="d")
    assert child["DATABASE_URL"] == "a" and child["AGENTRM_DATA_DIR"] == "d"
    assert child["AGENTRM_DEMO"] == "0"


def test_the_cli_stops_at_its_start_on_a_bad_value_with_one_line_and_exit_2():
    env = {**os.environ, "AGENTRM_LEADER_LEASE_SECONDS": "abc", "AGENTRM_OPERATOR_TOKEN": "op_x7Kq2Lm9Pz4Rt8Vw3Yb"}
    done = subprocess.run([sys.executable, "-m", "app.cli", "token"], check=False, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "agentrm: error: AGENTRM_LEADER_LEASE_SECONDS='abc': a number of seconds between 0.2 and 600"]


def test_only_the_config_module_touches_the_environment():
    files = (p for top in ("app", "bench") for p in (ROOT / top).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts)
    touching = [str(p.relative_to(ROOT)) for p in files
                if p != ROOT / "app" / "config.py" and re.search(rb"os\.environ|os\.getenv", p.read_bytes())]
    assert touching == [], "read or write the environment through app/config.py"


def test_the_reference_page_is_the_rendered_table():
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    assert page == reference_markdown(), f"docs/reference/configuration.md is stale; regenerate: {REGENERATE}"
    assert page.startswith("# Configuration\n")
    for variable in VARIABLES:
        assert f"`{variable.name}`" in page


def _trees() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text())) for path in sources()]


def test_every_variable_named_in_the_code_is_in_the_table():
    trees = _trees()
    # Python names that start with AGENTRM_ (bench's AGENTRM_DEFAULTS, quoted in docstrings)
    # are not variables.
    identifiers = {n.id for _, tree in trees for n in ast.walk(tree) if isinstance(n, ast.Name)}
    table = {v.name for v in VARIABLES}
    missing = {}
    for path, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in re.findall(r"\b(?:AGENTRM_[A-Z0-9_]*[A-Z0-9]|DATABASE_URL)\b", node.value):
                    if name not in table | identifiers:
                        missing[name] = str(path.relative_to(ROOT))
    assert missing == {}, "add these to the table in app/config.py"


def test_the_token_encodings_are_the_tokenizers():
    from app.context.tokens import DEFAULT_ENCODING, SUPPORTED_ENCODINGS
    variable = next(v for v in VARIABLES if v.name == "AGENTRM_TOKEN_ENCODING")
    assert variable.default == DEFAULT_ENCODING
    assert variable.kind.accepted == "one of " + ", ".join(SUPPORTED_ENCODINGS)


def test_the_domain_pool_accepts_every_default_pool_setting_in_range():
    from app.bootstrap import default_pool_settings
    assert default_pool_settings(Settings()).validate()
    top = Settings.from_mapping({"AGENTRM_DEFAULT_LANES": "1024", "AGENTRM_DEFAULT_RPM": "10000000",
                                 "AGENTRM_DEFAULT_TPM": "10000000000", "AGENTRM_DEFAULT_LEASE_SECONDS": "3600"})
    assert default_pool_settings(top).validate()


def test_serve_serves_the_demo_echo_model_to_the_default_pool_with_or_without_the_fleet(monkeypatch):
    from app.bootstrap import use_demo_upstream
    echo = "http://127.0.0.1:8000/demo-upstream/v1"
    for fleet in (True, False):
        for name in ("AGENTRM_UPSTREAM_BASE_URL", "AGENTRM_DEMO_UPSTREAM_URL"):
            monkeypatch.delenv(name, raising=False)
        assert use_demo_upstream("0.0.0.0", 8000, fleet=fleet) == echo
        settings = config.load()
        assert (settings.upstream_base_url, settings.demo_upstream_url) == (echo, echo), fleet


def test_a_configured_upstream_keeps_the_demo_model_for_the_fleets_pool_only(monkeypatch):
    from app.bootstrap import use_demo_upstream
    monkeypatch.setenv("AGENTRM_UPSTREAM_BASE_URL", "https://provider.example/v1")
    monkeypatch.setenv("AGENTRM_DEMO_UPSTREAM_URL", "http://stale.example/demo-upstream/v1")
    assert use_demo_upstream("127.0.0.1", 9000, fleet=True) is None
    settings = config.load()
    assert settings.upstream_base_url == "https://provider.example/v1"
    assert settings.demo_upstream_url == "http://127.0.0.1:9000/demo-upstream/v1"
    assert use_demo_upstream("127.0.0.1", 9000, fleet=False) is None
    assert config.load().demo_upstream_url is None     # --no-demo with a provider: not served

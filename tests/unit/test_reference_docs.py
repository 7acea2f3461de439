"""The reference pages (docs/reference/) say what the code does: each committed page is what
docs/generate.py makes from the code now, and each names every command, GraphQL field,
route, metric and event the code has."""
from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _load_generator()


def page(name: str) -> str:
    return (generate.REFERENCE / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(generate.PAGES))
def test_committed_page_is_what_the_code_generates(name):
    path = generate.REFERENCE / name
    assert path.exists(), f"docs/reference/{name} is missing: run `{generate.REGENERATE}`"
    assert path.read_text(encoding="utf-8") == generate.PAGES[name](), (
        f"docs/reference/{name} differs from the code: run `{generate.REGENERATE}` and commit the page")


@pytest.mark.parametrize("name", sorted(generate.PAGES))
def test_page_opens_with_its_title_and_source(name):
    title, blank, source = page(name).splitlines()[:3]
    assert title.startswith("# ") and blank == ""
    assert source.startswith("Generated from ") and "test_reference_docs.py" in source


def test_every_command_and_subcommand_is_in_cli_page():
    text = page("cli.md")
    parsers = generate.command_parsers()
    progs = [p.prog for p in parsers]
    assert "agentrm replay whatif" in progs and "agentrm audit access" in progs
    assert "agentrm bench load" in progs and "agentrm bench live --scenario" in progs
    for parser in parsers:
        assert f"## `{parser.prog}`" in text, parser.prog
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings:
                assert f"`{option}" in text, f"{parser.prog} {option}"


def test_every_graphql_field_is_in_graphql_page():
    from graphql import GraphQLEnumType, GraphQLInputObjectType, GraphQLInterfaceType, GraphQLObjectType
    text = page("graphql.md")
    schema = generate.graphql_schema()
    for name, gql_type in schema.type_map.items():
        if name.startswith("__"):
            continue
        if isinstance(gql_type, (GraphQLObjectType, GraphQLInterfaceType, GraphQLInputObjectType)):
            assert re.search(rf"^(##|###) {name}$", text, re.MULTILINE), name
            for field in gql_type.fields:
                assert f"| `{field}` |" in text, f"{name}.{field}"
        elif isinstance(gql_type, GraphQLEnumType):
            for value in gql_type.values:
                assert f"| `{value}` |" in text, f"{name}.{value}"


def test_every_error_code_the_api_sets_is_in_graphql_page():
    text = page("graphql.md")
    codes = {code for code, _where, _meaning in generate.error_codes()}
    # Every code literal the API layer writes into a response, whatever sets it.
    for path in (ROOT / "app" / "api").glob("*.py"):
        codes |= set(re.findall(r'"code":\s*"([A-Z_]+)"', path.read_text(encoding="utf-8")))
    for code in sorted(codes):
        assert f"| `{code}` |" in text, code


def test_every_written_error_meaning_is_used():
    from app import errors
    codes = {code for code, _where, _meaning in generate.error_codes()}
    documented = {cls.code for cls in _subclasses(errors.ServiceError) if cls.__dict__.get("__doc__")}
    for key in generate.ERROR_MEANINGS:
        if key.endswith("_BODY"):   # the addendum for the HTTP layer's use of LIMIT_EXCEEDED
            continue
        assert key in codes, f"ERROR_MEANINGS has {key}, which the API no longer sets"
        assert key not in documented, f"{key}'s class has a docstring now: drop it from ERROR_MEANINGS"


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_route_is_in_gateway_page():
    text = page("gateway.md")
    routes = generate.app_routes()
    assert {"/v1/chat/completions", "/v1/messages", "/v1/models"} <= {r.path for r in routes}
    for route in routes:
        assert f"| `{route.path}` |" in text, route.path
    stale = set(generate.ROUTE_PURPOSES) - {r.path for r in routes}
    assert not stale, f"ROUTE_PURPOSES names routes the app no longer has: {sorted(stale)}"


def test_every_documented_header_appears_in_the_gateway_source():
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "app" / "gateway").glob("*.py"))
    for name in generate.HEADER_MEANINGS:
        assert name.rstrip("*") in source, name
    listed = {row[0].strip("`") for row in generate.header_rows()}
    assert set(generate.HEADER_MEANINGS) == listed, "HEADER_MEANINGS names a header the gateway no longer uses"


def test_every_metric_in_the_registry_is_in_metrics_page():
    from app.observability.metrics import EXPORTED
    text = page("metrics.md")
    names = [name for _title, rows in generate.metric_families() for name, *_ in rows]
    assert set(EXPORTED) <= set(names)
    for name in names:
        assert f"| `{name}` |" in text, name


def test_every_event_type_is_in_events_page():
    text = page("events.md")
    registry = generate.event_registry()
    assert "TurnGranted" in registry and "ResourceGranted" in registry
    for name in registry:
        assert f"### {name}\n" in text, name
        assert generate.stream_of(name) in text


def test_every_pool_setting_is_in_pool_settings_page():
    import dataclasses

    from app.domain.settings import PoolSettings
    text = page("pool-settings.md")
    for field in dataclasses.fields(PoolSettings):
        if field.compare:
            assert f"| `{field.name}` |" in text, field.name


def test_each_input_field_sets_the_setting_the_page_maps_it_to():
    import strawberry

    from app.api.pool_input import settings_of
    fields = generate.graphql_schema().type_map["PoolInput"].fields
    left_out = {**{re.sub(r"([A-Z])", r"_\1", name).lower(): None for name in fields},
                "stall_timeout_seconds": strawberry.UNSET}
    mapped = [row[0].strip("`") for row in generate.setting_rows() if row[3] != "(not settable)"]
    assert {"name", "lanes", "policy", "stall_timeout_seconds"} <= set(mapped)
    # An input value as strawberry hands it over, and the setting it must become.
    shapes = {"policy": (SimpleNamespace(value="fifo"), "fifo"),
              "limiter": (SimpleNamespace(value="fixed-window"), "fixed-window"),
              "context_mode": (SimpleNamespace(value="managed"), "managed"),
              "class_slack_seconds": ([1.0, 2.0, 3.0], (1.0, 2.0, 3.0)),
              "model_timeouts": ([SimpleNamespace(model="m", request_timeout_seconds=900.0,
                                                  stream_idle_timeout_seconds=30.0)], (("m", 900.0, 30.0),))}
    for setting in mapped:
        marker = object()
        given, expected = shapes.get(setting, (marker, marker))
        data = SimpleNamespace(**{**left_out, setting: given})
        assert getattr(settings_of(data), setting) == expected, setting


def test_every_written_setting_meaning_is_for_a_setting_that_needs_it():
    import dataclasses

    from app.domain.settings import PoolSettings
    fields = generate.graphql_schema().type_map["PoolInput"].fields
    settings = {f.name for f in dataclasses.fields(PoolSettings)}
    for name in generate.SETTING_MEANINGS:
        assert name in settings, f"SETTING_MEANINGS has {name}, which PoolSettings no longer has"
        described = fields.get(generate._camel(name))
        assert not (described and described.description), f"PoolInput describes {name} now: drop its meaning"
    for name in generate.INPUT_ONLY_MEANINGS:
        assert name in fields and name not in {generate._camel(s) for s in settings}, name


def test_generation_names_what_lacks_words():
    with pytest.raises(generate.Undocumented, match="add its stream"):
        generate.stream_of("SomethingNew")


def test_a_route_without_words_stops_the_generation(monkeypatch, capsys):
    purposes = {path: text for path, text in generate.ROUTE_PURPOSES.items() if path != "/healthz"}
    monkeypatch.setattr(generate, "ROUTE_PURPOSES", purposes)
    assert generate.main(["--check"]) == 2
    assert "route /healthz: add its purpose to ROUTE_PURPOSES" in capsys.readouterr().err


def test_check_names_the_stale_page_and_the_command(tmp_path, monkeypatch, capsys):
    for name in generate.PAGES:
        (tmp_path / name).write_text(page(name), encoding="utf-8")
    (tmp_path / "metrics.md").write_text("# Metrics\n", encoding="utf-8")
    monkeypatch.setattr(generate, "REFERENCE", tmp_path)
    assert generate.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "docs/reference/metrics.md differs" in err and generate.REGENERATE in err
    assert "events.md" not in err

"""The reference pages of docs/reference/, generated from the code so they cannot drift.

    python docs/generate.py           write every page
    python docs/generate.py --check   exit 1, naming each page that differs from the code

Each page is read from what the code itself holds: the argparse parsers, the GraphQL SDL,
the Starlette route table, the PoolSettings dataclass, the Prometheus registries and the
event registry. Where the code holds no words for something (a route's purpose, a header's
meaning), this file says it once, and generation stops with the name of whatever new thing
lacks them, so a new route, header, error code or setting cannot slip into the service
undocumented. tests/unit/test_reference_docs.py runs the check.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import inspect
import io
import sys
import tokenize
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "bench"):   # runnable as `python docs/generate.py` from a checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

REFERENCE = ROOT / "docs" / "reference"
REGENERATE = "python docs/generate.py"
CHECKED_BY = "tests/unit/test_reference_docs.py"


# -- Markdown helpers ---------------------------------------------------------------------

def header(title: str, source: str) -> list[str]:
    return [f"# {title}", "",
            f"Generated from {source} by `docs/generate.py`; `{CHECKED_BY}` fails when it drifts "
            f"(regenerate with `{REGENERATE}`).", ""]


def inline(text: str) -> str:
    """Text as Markdown shows it: `<` outside code spans would open an HTML tag."""
    parts = text.split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


def cell(text) -> str:
    """One table cell: a single line, pipes escaped."""
    text = "" if text is None else str(text)
    return inline(" ".join(text.split())).replace("|", "\\|")


def code(text) -> str:
    return f"`{text}`" if text not in (None, "") else ""


def table(columns: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    out += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return out + [""]


def prose(text: str | None) -> list[str]:
    """A description as Markdown paragraphs, or as a text block when it holds indented
    lines (a usage synopsis, an example) whose line breaks carry meaning."""
    text = inspect.cleandoc(text or "")
    if not text:
        return []
    if any(line.startswith("    ") for line in text.splitlines()):
        return ["```text", text, "```", ""]
    return [inline(line) for line in text.splitlines()] + [""]


def source_path(module_name: str) -> str:
    """A module's file relative to the checkout (never a machine path); a library's module
    by its name."""
    if module_name.split(".")[0] not in ("app", "agentrm_bench", "agentrm_client"):
        return module_name   # a library's, wherever its virtualenv lies (often inside the checkout)
    path = Path(importlib.import_module(module_name).__file__).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else module_name


class Undocumented(LookupError):
    """Something the code added that this file has no words for yet."""


# -- source reading: docstrings and trailing comments --------------------------------------

@functools.cache
def _module_source(path: str) -> tuple[ast.Module, dict[int, str]]:
    text = Path(path).read_text(encoding="utf-8")
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(text).readline) if tok.type == tokenize.COMMENT}
    return ast.parse(text), comments


def class_notes(cls) -> tuple[str, dict[str, str]]:
    """A class's own docstring (not the one dataclass makes up) and the trailing comment of
    each field it declares."""
    tree, comments = _module_source(inspect.getsourcefile(cls))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            fields = {item.target.id: comments.get(item.lineno, "") for item in node.body
                      if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
            return ast.get_docstring(node) or "", fields
    return "", {}


def constant_comments(module) -> dict[str, str]:
    """String constant -> the trailing comment of its line (`NAME = "Value"  # comment`)."""
    tree, comments = _module_source(inspect.getsourcefile(module))
    return {node.value.value: comments.get(node.lineno, "") for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def type_name(annotation) -> str:
    """An annotation as a reader writes it; `X | None` as `X or None`, since a pipe would
    split a table's cell."""
    if isinstance(annotation, type):
        text = annotation.__name__
    else:
        text = annotation if isinstance(annotation, str) else str(annotation).replace("typing.", "")
    return text.replace(" | ", " or ")


# == cli.md ================================================================================

class _Built(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def parser_built_by(run, argv: list[str]) -> argparse.ArgumentParser:
    """The parser `run(argv)` builds, caught at its parse_args: the benchmarks build their
    parsers inside the functions that run them, and nothing runs before the parse."""
    def caught(self, *_args, **_kwargs):
        raise _Built(self)
    with mock.patch.object(argparse.ArgumentParser, "parse_args", caught):
        try:
            run(argv)
        except _Built as built:
            return built.parser
    raise RuntimeError(f"{run.__qualname__}({argv}) built no parser")


def benchmark_parsers() -> list[argparse.ArgumentParser]:
    """Each benchmark's own parser, reached as `agentrm bench NAME` reaches it."""
    from agentrm_bench.cli import main as bench_main

    from app.cli import BENCHMARKS
    argvs = [[name] for name in BENCHMARKS] + [["live", "--scenario"]]   # the frozen scenarios
    parsers = []
    for argv in argvs:
        parser = parser_built_by(bench_main, argv)
        if not parser.description:   # a throwaway parser: `agentrm bench`'s line for it says what it is
            parser.description = BENCHMARKS[argv[0]]
        parsers.append(parser)
    return parsers


def walk(parser: argparse.ArgumentParser):
    """The parser and every parser below it, depth first, in the order they were added."""
    yield parser
    for action in parser._actions:   # argparse has no public way to walk its tree
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):   # aliases map to one parser
                yield from walk(sub)


def command_parsers() -> list[argparse.ArgumentParser]:
    from app.cli import build_parser
    parsers = list(walk(build_parser()))
    at = next(i for i, p in enumerate(parsers) if p.prog == "agentrm bench") + 1
    return parsers[:at] + benchmark_parsers() + parsers[at:]


def _usage(parser: argparse.ArgumentParser) -> str:
    # A fixed width: the terminal's would make the page depend on who generated it.
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return parser._get_formatter()._expand_help(action)


def _default(action: argparse.Action) -> str:
    if action.required and action.nargs not in ("?", "*", argparse.REMAINDER):
        return "required"
    value = action.default
    if value in (None, argparse.SUPPRESS) or isinstance(action, argparse._StoreTrueAction) or value == []:
        return ""
    return code(value)


def _option(action: argparse.Action) -> str:
    if not action.option_strings:
        return code(action.metavar or action.dest)
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return code(names)
    return code(f"{names} {action.metavar or action.dest.upper()}")


def cli_section(parser: argparse.ArgumentParser) -> list[str]:
    out = [f"## `{parser.prog}`", ""]
    out += prose(parser.description)
    out += ["```text", _usage(parser), "```", ""]
    rows, commands = [], []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in action._choices_actions}
            commands += [[code(f"{parser.prog} {name}"), helps.get(name, "")] for name in action.choices]
            continue
        choices = ", ".join(code(c) for c in action.choices) if action.choices else ""
        text = _help(parser, action)
        if isinstance(action, argparse._AppendAction) and "repeatable" not in text:
            text = f"{text} (repeatable)".strip()
        rows.append([_option(action), _default(action), choices, text])
    if rows:
        out += table(["Option", "Default", "Choices", "Description"], rows)
    if commands:
        out += table(["Command", "Description"], commands)
    return out


def cli_page() -> str:
    out = header("Command line", "`app.cli.build_parser()` (and each benchmark's own parser in "
                                 "`bench/agentrm_bench/`)")
    out += ["Every command has `--help`; `agentrm bench NAME --help` shows a benchmark's options.", ""]
    for parser in command_parsers():
        out += cli_section(parser)
    return "\n".join(out).rstrip() + "\n"


# == graphql.md ============================================================================

SDL = ROOT / "schema" / "agentrm.graphql"

# What each `extensions.code` means, for codes whose class carries no docstring and for the
# codes the API layer sets itself. A new code without either stops the generation.
ERROR_MEANINGS = {
    "INTERNAL": "An unexpected failure. The message is replaced by `internal error`; the server "
                "logs the detail.",
    "BAD_USER_INPUT": "The input is refused: a value out of range or of the wrong shape, or variables "
                      "that do not fit their types (found before any resolver ran).",
    "NOT_FOUND": "No pool, agent, turn, resource, lease or grant of that id or name.",
    "CONFLICT": "The command does not fit the current state: a name already taken, a turn no longer "
                "granted or already finished, an agent that is not quarantined.",
    "FORBIDDEN": "The token may not do this: another agent's turn, an operator-only command, a "
                 "quarantined agent, a pool the agent may not draw from.",
    "UNAUTHENTICATED": "No valid token: none where one is required, or a bearer token that is not "
                       "valid (then nothing in the operation runs).",
    "UNAVAILABLE": "Retry later: the database is unreachable (the client cannot know whether the "
                   "command took effect), or a lease the resource manager has not answered yet.",
    "GRAPHQL_PARSE_FAILED": "The document is not GraphQL, or has more than {max_tokens} tokens.",
    "GRAPHQL_VALIDATION_FAILED": "The document does not fit the schema, or breaks a limit: deeper "
                                 "than {max_depth} levels, more than {max_aliases} aliases, "
                                 "introspection while it is switched off.",
    "BAD_REQUEST": "The body of a POST to /graphql is not valid JSON (HTTP 400).",
    "LIMIT_EXCEEDED_BODY": "Also: a request body over {max_body} bytes (HTTP 413).",
}


def graphql_schema():
    from graphql import build_schema
    return build_schema(SDL.read_text(encoding="utf-8"))


def _default_value(node) -> str:
    from graphql import print_ast
    default = getattr(node, "default_value", None) if node is not None else None
    return print_ast(default) if default is not None else ""


def _arguments(field) -> str:
    parts = []
    for name, arg in field.args.items():
        default = _default_value(arg.ast_node)
        parts.append(f"`{name}: {arg.type}" + (f" = {default}`" if default else "`"))
    return ", ".join(parts)


def _described(element) -> str:
    """A field's, input field's or enum value's description, its arguments' descriptions,
    and its deprecation if any."""
    parts = [element.description or ""]
    parts += [f"`{name}`: {arg.description}" for name, arg in (getattr(element, "args", None) or {}).items()
              if arg.description]
    reason = getattr(element, "deprecation_reason", None)
    if reason:
        parts.append(f"**Deprecated:** {reason}")
    return " ".join(part for part in parts if part)


def _fields_table(gql_type) -> list[str]:
    fields = gql_type.fields.items()
    if any(f.args for _, f in fields):
        return table(["Field", "Arguments", "Type", "Description"],
                     [[code(n), _arguments(f), code(f.type), _described(f)] for n, f in fields])
    return table(["Field", "Type", "Description"], [[code(n), code(f.type), _described(f)] for n, f in fields])


def error_codes() -> list[tuple[str, str, str]]:
    """(code, where it is set, meaning) for every `extensions.code` the API gives."""
    from app import errors
    from app.api import errors as api_errors
    from app.api import security

    limits = {"max_tokens": f"{security.MAX_TOKENS:,}", "max_depth": security.MAX_DEPTH,
              "max_aliases": security.MAX_ALIASES, "max_body": f"{security.MAX_BODY_BYTES:,}"}

    def meaning(key: str, docstring: str = "") -> str:
        if docstring:
            return docstring
        if key not in ERROR_MEANINGS:
            raise Undocumented(f"error code {key}: give its class a docstring, or add it to "
                               "ERROR_MEANINGS in docs/generate.py")
        return ERROR_MEANINGS[key].format(**limits)

    rows = {}
    classes, seen = [errors.ServiceError], set()
    while classes:
        cls = classes.pop()
        if cls in seen:
            continue
        seen.add(cls)
        classes += cls.__subclasses__()
        own = cls.__dict__.get("__doc__") or ""
        rows.setdefault(cls.code, (cls.code, f"`{cls.__name__}` (`{source_path(cls.__module__)}`)",
                                   meaning(cls.code, inspect.cleandoc(own))))
    api = source_path(api_errors.__name__)
    for code_ in (api_errors.PARSE_FAILED, api_errors.VALIDATION_FAILED):
        rows[code_] = (code_, f"the API layer (`{api}`)", meaning(code_))
    app_module = source_path("app.api.app")
    rows["BAD_REQUEST"] = ("BAD_REQUEST", f"the HTTP layer (`{app_module}`)", meaning("BAD_REQUEST"))
    limit = rows[errors.LimitExceeded.code]
    rows[limit[0]] = (limit[0], f"{limit[1]}; the HTTP layer (`{app_module}`)",
                      f"{limit[2]} {meaning('LIMIT_EXCEEDED_BODY')}")
    return [rows[key] for key in sorted(rows)]


def graphql_page() -> str:
    from graphql import (GraphQLEnumType, GraphQLInputObjectType, GraphQLInterfaceType, GraphQLObjectType,
                         GraphQLScalarType, GraphQLUnionType, specified_scalar_types)
    schema = graphql_schema()
    roots = [t for t in (schema.query_type, schema.mutation_type, schema.subscription_type) if t]
    standard = {getattr(t, "name", t) for t in specified_scalar_types}   # a dict in newer versions
    named = [t for name, t in sorted(schema.type_map.items())
             if not name.startswith("__") and name not in standard and t not in roots]
    out = header("GraphQL API", "`schema/agentrm.graphql` (which `agentrm schema` must match)")
    out += ["The API is served at `/graphql`: queries and mutations over HTTP, subscriptions over "
            "`graphql-transport-ws`. Every error carries `extensions.code` (see [Error codes](#error-codes)).", ""]
    for root in roots:
        out += [f"## {root.name}", ""] + prose(root.description) + _fields_table(root)

    def section(title: str, kind) -> list[str]:
        types = [t for t in named if isinstance(t, kind)]
        if not types:
            return []
        lines = [f"## {title}", ""]
        for t in types:
            lines += [f"### {t.name}", ""] + prose(t.description)
            if isinstance(t, (GraphQLObjectType, GraphQLInterfaceType)):
                if t.interfaces:
                    lines += ["Implements " + ", ".join(code(i.name) for i in t.interfaces) + ".", ""]
                lines += _fields_table(t)
            elif isinstance(t, GraphQLInputObjectType):
                lines += table(["Field", "Type", "Default", "Description"],
                               [[code(n), code(f.type), code(_default_value(f.ast_node)), _described(f)]
                                for n, f in t.fields.items()])
            elif isinstance(t, GraphQLEnumType):
                lines += table(["Value", "Description"], [[code(n), _described(v)] for n, v in t.values.items()])
            elif isinstance(t, GraphQLUnionType):
                lines += ["One of " + ", ".join(code(m.name) for m in t.types) + ".", ""]
            elif isinstance(t, GraphQLScalarType) and t.specified_by_url:
                lines += [f"Specified by <{t.specified_by_url}>.", ""]
        return lines

    out += section("Object types", GraphQLObjectType)
    out += section("Interfaces", GraphQLInterfaceType)
    out += section("Unions", GraphQLUnionType)
    out += section("Input types", GraphQLInputObjectType)
    out += section("Enums", GraphQLEnumType)
    out += section("Scalars", GraphQLScalarType)
    out += ["Besides these, the standard " + ", ".join(code(n) for n in sorted(standard & set(schema.type_map)))
            + ".", ""]
    out += ["## Error codes", "", "The values of `extensions.code` on a GraphQL error.", ""]
    out += table(["Code", "Set by", "Meaning"], [[code(c), where, text] for c, where, text in error_codes()])
    return "\n".join(out).rstrip() + "\n"


# == gateway.md ============================================================================

# What each route is for: the route table holds no words for it. A new route stops the
# generation until it has a line here.
ROUTE_PURPOSES = {
    "/graphql": "The GraphQL API: queries and mutations over HTTP, subscriptions over the "
                "`graphql-transport-ws` WebSocket protocol.",
    "/": "The operator console (its built assets are under `/assets`).",
    "/assets": "The console's built files.",
    "/metrics": "Prometheus metrics (see [Metrics](metrics.md)), for the operator's bearer token (401 without "
                "one, 403 for an agent's) unless `AGENTRM_METRICS_PUBLIC=1`; 503 while the app starts.",
    "/healthz": "Liveness: the process is up and serving. Asks nothing of the database.",
    "/readyz": "Readiness: the database answers and the read model has caught up with the log; "
               "503 with the reason otherwise.",
    "/v1/chat/completions": "OpenAI chat completions, through a turn of the agent's pool.",
    "/v1/messages": "Anthropic messages, through a turn of the agent's pool.",
    "/v1/responses": "OpenAI's Responses API, through a turn of the agent's pool: passed to the upstream, "
                     "or carried over its chat completions when it lacks `/v1/responses`.",
    "/v1/embeddings": "OpenAI embeddings, through a turn of the agent's pool (no output tokens).",
    "/v1/messages/count_tokens": "Anthropic's prompt count: asked of the pool's upstream (no turn: it is no "
                                 "model call), or counted with the pool's tokenizer when the upstream lacks "
                                 "it (`x-agentrm-token-count: local`).",
    "/v1/models": "The models of the upstreams the token's pools use (cached a minute), in "
                  "OpenAI's and Anthropic's fields.",
    "/v1/models/{model_id:path}": "One model of that list, by id (it may hold a slash); 404 "
                                  "`model_not_found` in the caller's wire format when no pool's upstream lists it.",
    "/v1/{path:path}": "Any other `/v1` path or method: a 404 (or a 405 with `allow`) as the provider's "
                       "JSON error, Anthropic's shape when the request carries `x-api-key` or "
                       "`anthropic-version`, else OpenAI's.",
    "/demo-upstream/v1/chat/completions": "The demo echo model, OpenAI format.",
    "/demo-upstream/v1/messages": "The demo echo model, Anthropic format.",
    "/demo-upstream/v1/models": "The demo echo model's model list.",
}

# What each header means to the gateway. The names come from the gateway's constants and
# from its wire formats where they hold them; tests check every name here appears in
# app/gateway.
HEADER_MEANINGS = {
    "authorization": "From the agent: its AgentRM token as `Bearer <token>` (the SDKs' API key). "
                     "To the upstream: the pool's upstream API key.",
    "x-api-key": "From the agent: its AgentRM token, as the Anthropic SDK sends the API key. "
                 "To the upstream: the pool's upstream API key.",
    "x-agentrm-max-wait": "Seconds the call may wait in the queue; past it the gateway answers 429 "
                          "with `retry-after` (the estimated wait).",
    "x-agentrm-run-id": "The client's run (program): the turn is recorded with it.",
    "x-agentrm-record-context": "`true`, `1` or `yes`: append the request's last message and the "
                                "answer to the agent's context.",
    "x-request-id": "The call's request id: the client's when it is 1-128 printable ASCII "
                    "characters, else a new uuid4 hex. On every `/v1` response, forwarded to the "
                    "upstream, and in the gateway's log line of the call.",
    "x-agentrm-turn-id": "The turn the call took (also a turn that was queued and then cancelled), "
                         "on every response of a call that has one.",
    "x-upstream-request-id": "The upstream's own request id (its `x-request-id`, or Anthropic's "
                             "`request-id`), when it sent one; also in the log line.",
    "allow": "On a 405: the method the path takes.",
    "idempotency-key": "1-255 printable ASCII characters, scoped to the agent: a retry with the "
                       "same key and body gets the first call's stored answer (no new turn, no "
                       "upstream call), waiting for it if it still runs; another body is a 409 "
                       "(`idempotency_key_reused`). Kept `AGENTRM_IDEMPOTENCY_WINDOW_SECONDS`; "
                       "failed calls (429, 5xx, timeouts) are not kept.",
    "x-agentrm-idempotent-replay": "`true` on an answer replayed from a stored reply.",
    "accept": "Passed to the upstream.",
    "x-client-request-id": "Passed to the upstream (OpenAI).",
    "anthropic-version": "Passed to the upstream (Anthropic); `2023-06-01` when the client sends none.",
    "content-type": "`application/json` to the upstream; the upstream's is passed back.",
    "request-id": "Passed back from the upstream (Anthropic's request id, which the Anthropic SDK "
                  "reads as `_request_id`).",
    "openai-processing-ms": "Passed back from the upstream.",
    "retry-after": "On a 429: the upstream's, passed back, or the gateway's own estimate of the "
                   "wait when `x-agentrm-max-wait` ran out. Read from the upstream to pause the pool.",
    "retry-after-ms": "Read from the upstream (before `retry-after`) to pause the pool; passed back.",
    "x-ratelimit-*": "The provider's rate-limit headers: passed back, and reported with the "
                     "completion so the scheduler's budget follows the provider's.",
    "anthropic-ratelimit-*": "As `x-ratelimit-*`, Anthropic's names.",
    "cache-control": "`no-cache` on a streamed answer.",
    "allow": "On a 405: the methods the path takes.",
    "x-agentrm-context": "`managed`: the gateway appends the call's new messages to the agent's context "
                         "and forwards a prompt assembled within the model's window; `off`: as sent, "
                         "also in a pool whose `contextMode` is `MANAGED` (chat completions, "
                         "Anthropic messages and the Responses API).",
    "x-agentrm-context-tokens": "On a managed call: the forwarded prompt's tokens, by the pool's tokenizer.",
    "x-agentrm-context-tiers": "On a managed call: `whole` when the request fitted as sent, else which "
                               "of `pinned`, `facts`, `relevant`, `recent` the forwarded prompt holds "
                               "(`none`: not even the latest message fitted; forwarded as sent).",
    "x-agentrm-token-count": "On `/v1/messages/count_tokens`: `upstream` when the pool's upstream counted, "
                             "`local` when it lacks the endpoint and the gateway counted with the pool's "
                             "tokenizer.",
}


def app_routes():
    """The constructed app's route table, the demo's routes included. Building the app opens
    nothing: its lifespan, which connects, runs only when it is served."""
    from app.api.app import create_app
    return create_app("postgresql://unused/reference", run_schedulers=False, demo_upstream=True).routes


def _served_by(route) -> str:
    endpoint = getattr(route, "endpoint", None) or getattr(route, "app", None)
    module = endpoint.__module__ if inspect.isfunction(endpoint) else type(endpoint).__module__
    wire = getattr(getattr(endpoint, "wire", None), "name", None)
    return f"`{source_path(module)}`" + (f" ({wire} wire format)" if wire else "")


def route_rows() -> list[list[str]]:
    from starlette.routing import Mount, WebSocketRoute

    from app.gateway.demo_upstream import PREFIX
    rows = []
    for route in app_routes():
        if route.path not in ROUTE_PURPOSES:
            raise Undocumented(f"route {route.path}: add its purpose to ROUTE_PURPOSES in docs/generate.py")
        if isinstance(route, WebSocketRoute):
            methods = "WebSocket"
        elif isinstance(route, Mount):
            methods = "GET (files)"
        else:
            methods = ", ".join(sorted(route.methods))
        purpose = ROUTE_PURPOSES[route.path]
        if route.path.startswith(PREFIX):
            purpose += " Mounted with the demo fleet, or when no upstream is configured."
        rows.append([methods, code(route.path), purpose, _served_by(route)])
    return rows


class _HeaderProbe(dict):
    """Client headers that note each name the code asks for (and hold none of them)."""

    def __init__(self):
        super().__init__()
        self.asked: list[str] = []

    def get(self, name, default=None):
        self.asked.append(name)
        return default

    def __contains__(self, name):
        self.asked.append(name)
        return False


def header_rows() -> list[list[str]]:
    """(header, where the gateway reads or writes it, meaning): from the gateway's constants,
    and from what each wire format reads and writes when asked."""
    from app.gateway import correlation, count_tokens, idempotency, managed_context, proxy, turns
    from app.gateway.wire import ANTHROPIC, OPENAI

    found: dict[tuple[str, str], set[str]] = {}

    def note(name: str, direction: str, *wires) -> None:
        found.setdefault((name.lower(), direction), set()).update(wires or ("both",))

    for wire in (OPENAI, ANTHROPIC):
        probe = _HeaderProbe()
        wire.api_key(probe)
        for name in probe.asked:
            note(name, "request: the agent's token", wire.name)
        probe = _HeaderProbe()
        sent = wire.upstream_headers(probe, "key")
        for name in probe.asked:
            note(name, "request: passed to the upstream", wire.name)
        for name in sent:
            if name not in probe.asked:
                note(name, "to the upstream: set by the gateway", wire.name)
    # The names below that are plain strings are literals in proxy.py and turns.py, not
    # constants; the test checks that each still appears in app/gateway.
    for name in (proxy.MAX_WAIT_HEADER, proxy.RUN_ID_HEADER, proxy.RECORD_CONTEXT_HEADER,
                 correlation.REQUEST_ID_HEADER, idempotency.IDEMPOTENCY_KEY_HEADER):
        note(name, "request: read by the gateway")
    note(correlation.REQUEST_ID_HEADER, "to the upstream: set by the gateway")
    for name in (correlation.REQUEST_ID_HEADER, correlation.TURN_ID_HEADER, correlation.UPSTREAM_REQUEST_ID_HEADER,
                 idempotency.REPLAY_HEADER, "allow"):
        note(name, "response: set by the gateway")
    for name in correlation.UPSTREAM_ID_HEADERS:
        note(name, "response: read from the upstream")
    for name in proxy.PASSED_HEADERS:
        note(name, "response: passed back from the upstream")
    for prefix in turns.RATE_HEADER_PREFIXES:
        note(prefix + "*", "response: passed back from the upstream")
    for name in ("retry-after", "retry-after-ms"):
        note(name, "response: passed back from the upstream")
    note("retry-after", "response: set by the gateway")
    note("cache-control", "response: set by the gateway")
    note("allow", "response: set by the gateway")
    note(count_tokens.TOKEN_COUNT_HEADER, "response: set by the gateway")
    note(managed_context.CONTEXT_HEADER, "request: read by the gateway")
    for name in (managed_context.CONTEXT_TOKENS_HEADER, managed_context.CONTEXT_TIERS_HEADER):
        note(name, "response: set by the gateway")
    uses: dict[str, list[str]] = {}
    for (name, direction), wires in sorted(found.items()):
        formats = "" if "both" in wires or len(wires) == 2 else f" ({', '.join(sorted(wires))} format)"
        uses.setdefault(name, []).append(direction + formats)
    rows = []
    for name, directions in uses.items():
        if name not in HEADER_MEANINGS:
            raise Undocumented(f"header {name}: add its meaning to HEADER_MEANINGS in docs/generate.py")
        rows.append([code(name), "; ".join(directions), HEADER_MEANINGS[name]])
    return rows


def gateway_page() -> str:
    from app import config
    out = header("HTTP endpoints and gateway headers", "the app's route table (`app.api.app.create_app`) "
                                                      "and the gateway's constants in `app/gateway/`")
    out += ["Everything is served on one port. The gateway (`/v1/...`) speaks the OpenAI and the "
            "Anthropic wire formats: point either SDK's base URL at the server and use the agent's "
            "AgentRM token as the API key. Every call takes a turn of the agent's pool, so the "
            "pool's scheduling rules apply to it.", "", "## Endpoints", ""]
    out += table(["Methods", "Path", "Purpose", "Served by"], route_rows())
    out += ["## Headers", "",
            "A gateway request body may be at most `AGENTRM_GATEWAY_MAX_BODY_BYTES` "
            f"({config.Settings().gateway_max_body_bytes:,} bytes unless set); a larger one is refused "
            "with 413, in the wire's own error shape, before it is read.", ""]
    out += table(["Header", "Where", "Meaning"], header_rows())
    return "\n".join(out).rstrip() + "\n"


# == pool-settings.md ======================================================================

# Meanings for the settings that neither a PoolInput description nor a comment in
# app/domain/settings.py explains (app/domain/settings.py's docstring gives the reasons).
SETTING_MEANINGS = {
    "name": "The pool's name: 1-64 letters, digits, `_` or `.`.",
    "lanes": "How many turns may hold the provider at once (1-1024); with adaptive lanes, the "
             "ceiling of the learned limit.",
    "rpm": "The provider's requests per minute: the request bucket admission draws from "
           "(1-10,000,000).",
    "tpm": "The provider's tokens per minute: the token bucket admission draws from "
           "(1-10,000,000,000).",
    "lease_seconds": "A granted turn that neither completes nor heartbeats for this long is reaped "
                     "(1-3600).",
    "levels": "MLFQ levels (1-8). Interactive agents enter at 0, batch at 1, background at 2 "
              "(at most the last level).",
    "allotment_seconds": "Lane-seconds an agent may use at each level before it is demoted; the last "
                         "level is unbounded.",
    "allotment_tokens": "Tokens an agent may use at each level before it is demoted (whichever of "
                        "the two allotments runs out first).",
    "boost_seconds": "The boost period: every agent goes back to its entry level, and every turn "
                     "that has waited a whole period is lifted to level 0.",
    "quarantine_after_reaps": "Reaps in a row after which an agent is quarantined until an operator "
                              "releases it.",
    "start_timeout_floor_seconds": "The adaptive start deadline (a streaming call's time to its "
                                   "first chunk) never goes below this (0.1-3600); at or above the "
                                   "lease it is off.",
    "aimd_decrease": "On a 429 the admitted rate is multiplied by this (above 0, at most 1).",
    "aimd_increase_per_minute": "The share of the provider's limit added back to the admitted rate "
                                "per minute without a 429.",
    "aimd_floor": "The admitted rate never falls below this share of the limit (above 0, at most 1).",
    "retry_after_default": "Seconds the pool pauses after a 429 that says no retry-after.",
    "jitter_seconds": "The most jitter added to a pause, derived from the turn id, so pools "
                      "sharing a key do not restart together.",
    "tokenizer": "The tiktoken encoding prompts are counted with: `cl100k_base` or `o200k_base`.",
    "upstream_base_url": "Where the gateway sends the pool's calls (for the `default` pool, "
                         "`AGENTRM_UPSTREAM_BASE_URL`).",
}


# PoolInput fields that are not settings, for those the schema does not describe.
INPUT_ONLY_MEANINGS = {
    "upstreamApiKey": "The upstream's API key. Never in the event log (the log keeps a fingerprint): "
                      "it is kept in the `pool_secrets` table and only ever sent upstream.",
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _setting_default(value) -> str:
    if isinstance(value, tuple):
        return code("(" + ", ".join(type_name(v) if isinstance(v, type) else repr(v) for v in value) + ")")
    return code(repr(value))


def setting_rows() -> list[list[str]]:
    from app.domain.settings import PoolSettings
    pool_input = graphql_schema().type_map["PoolInput"].fields
    _doc, comments = class_notes(PoolSettings)
    rows = []
    for f in dataclasses.fields(PoolSettings):
        if not f.compare:   # not a setting: carried beside them, never compared
            continue
        gql = pool_input.get(_camel(f.name))
        meaning = (gql.description if gql is not None else None) or comments.get(f.name) \
            or SETTING_MEANINGS.get(f.name)
        if not meaning:
            raise Undocumented(f"setting {f.name}: describe it in PoolInput, comment it in "
                               "app/domain/settings.py, or add it to SETTING_MEANINGS in docs/generate.py")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        rows.append([code(f.name), code(type_name(f.type)), _setting_default(default),
                     code(f"{_camel(f.name)}: {gql.type}") if gql is not None else "(not settable)", meaning])
    return rows


def input_only_rows() -> list[list[str]]:
    """PoolInput fields with no PoolSettings field of their name."""
    from app.domain.settings import PoolSettings
    settings = {_camel(f.name) for f in dataclasses.fields(PoolSettings)}
    rows = []
    for name, field in graphql_schema().type_map["PoolInput"].fields.items():
        if name in settings:
            continue
        meaning = field.description or INPUT_ONLY_MEANINGS.get(name)
        if not meaning:
            raise Undocumented(f"PoolInput.{name}: describe it in the schema, or add it to "
                               "INPUT_ONLY_MEANINGS in docs/generate.py")
        rows.append([code(f"{name}: {field.type}"), meaning])
    return rows


def pool_settings_page() -> str:
    out = header("Pool settings", "`PoolSettings` in `app/domain/settings.py` and `PoolInput` in "
                                  "`schema/agentrm.graphql`")
    out += ["A pool is one provider/model budget with its scheduling rules. `createPool(input: PoolInput!)` "
            "sets them; a field left out takes the default. Settings marked *not settable* keep their "
            "default through the API. `app/domain/settings.py` says why each default is what it is.", ""]
    out += table(["Setting", "Type", "Default", "GraphQL input field", "Meaning"], setting_rows())
    extra = input_only_rows()
    if extra:
        out += ["`PoolInput` also takes these, which are not settings:", ""]
        out += table(["GraphQL input field", "Meaning"], extra)
    return "\n".join(out).rstrip() + "\n"


# == metrics.md ============================================================================

def _idle_runtime():
    """A runtime whose read model is empty and whose projector takes subscribers: enough
    for AppMetrics to build its registry, and for the scrape-time gauges to describe
    themselves without any pool or agent."""
    model = SimpleNamespace(pools={}, agents={}, position=0)
    return SimpleNamespace(projector=SimpleNamespace(model=model, subscribe=lambda _callback: lambda: None))


def metric_families() -> list[tuple[str, list[tuple[str, str, tuple[str, ...], str]]]]:
    """(registry, [(name as exposed, type, labels, help)]) for both registries /metrics renders:
    one app's (built here as AppMetrics builds it, on an empty read model) and the process's."""
    from app.observability import gc_pauses
    from app.observability.metrics import GATEWAY_REGISTRY, AppMetrics
    with mock.patch.object(gc_pauses, "install"):   # no collector hook in the generating process
        app_metrics = AppMetrics(_idle_runtime())
    app_metrics.model.head = 0   # the /metrics handler sets it before a scrape; the lag gauges need it
    out = []
    for title, registry in (("Per app", app_metrics.registry), ("Per process", GATEWAY_REGISTRY)):
        rows = []
        # prometheus_client keeps a registry's collectors privately; the label names of a
        # metric with no series yet are only on the collector or the family.
        for collector in list(registry._collector_to_names):
            for family in collector.collect():
                labels = getattr(family, "_labelnames", None) or getattr(collector, "_labelnames", ())
                name = family.name + "_total" if family.type == "counter" else family.name
                rows.append((name, family.type, tuple(labels), family.documentation))
        out.append((title, sorted(rows)))
    app_metrics.close()
    return out


def metrics_page() -> str:
    from app.observability import metrics
    out = header("Metrics", "the Prometheus registries of `app/observability/` (read from the "
                            "registry objects)")
    out += ["Served at `/metrics`. *Per app* metrics come from the event log, folded by every worker "
            "(so each worker counts the whole fleet: combine replicas with `max by (...)`), or from the "
            "read model at scrape time. *Per process* metrics count what that process served: sum them "
            f"across replicas. See `{source_path(metrics.__name__)}`.", ""]
    for title, rows in metric_families():
        out += [f"## {title}", ""]
        out += table(["Metric", "Type", "Labels", "Help"],
                     [[code(n), t, ", ".join(code(label) for label in labels), h] for n, t, labels, h in rows])
    return "\n".join(out).rstrip() + "\n"


# == events.md =============================================================================

def event_registry() -> dict[str, type]:
    """Event type name -> its class: the one place that reads the registry."""
    from app.domain import events
    return events.registered()


def stream_of(type_name_: str) -> str:
    """The stream an event type is appended to, as the services append it."""
    from app.domain import events as ev
    from app.domain import resource_events as rev
    from app.domain import streams as st

    def pattern(category: str, ident: str) -> str:
        return st.stream_name(category, f"<{ident}>")

    by_type = {
        ev.POOL_CREATED: pattern(st.POOL, "pool"),
        ev.AGENT_REGISTERED: pattern(st.AGENT, "agent"), ev.AGENT_RELEASED: pattern(st.AGENT, "agent"),
        ev.AGENT_HIBERNATED: pattern(st.AGENT, "agent"), ev.AGENT_WOKEN: pattern(st.AGENT, "agent"),
        ev.AGENT_TOKEN_ROTATED: pattern(st.AGENT, "agent"), ev.AGENT_TOKEN_REVOKED: pattern(st.AGENT, "agent"),
        ev.TURN_REQUESTED: pattern(st.TURN, "turn"), ev.HEARTBEAT_SENT: pattern(st.TURN, "turn"),
        ev.COMPLETION_REPORTED: pattern(st.TURN, "turn"), ev.CANCEL_REQUESTED: pattern(st.TURN, "turn"),
        ev.CONTEXT_APPENDED: pattern(st.CONTEXT, "agent"), ev.CONTEXT_COMPACTED: pattern(st.CONTEXT, "agent"),
        ev.CONTEXT_FACTS_EXTRACTED: pattern(st.CONTEXT, "agent"),
        rev.RESOURCE_DEFINED: pattern(st.RESOURCE, "resource"),
        rev.RESOURCE_ACQUIRE_REQUESTED: pattern(st.LEASE, "lease"),
        rev.RESOURCE_HEARTBEAT_SENT: pattern(st.LEASE, "lease"),
        rev.RESOURCE_RELEASE_REQUESTED: pattern(st.LEASE, "lease"),
        rev.ACCESS_GRANTED: pattern(st.ACCESS, "agent"), rev.ACCESS_REVOKED: pattern(st.ACCESS, "agent"),
        rev.ACCESS_REFUSED: pattern(st.ACCESS, "agent"),
    }
    by_type.update(dict.fromkeys(ev.DECISIONS, pattern(st.POOL, "pool")))
    by_type.update(dict.fromkeys(rev.RESOURCE_DECISIONS, st.RESOURCE_DECISIONS_STREAM))
    if type_name_ not in by_type:
        raise Undocumented(f"event {type_name_}: add its stream to stream_of() in docs/generate.py")
    return by_type[type_name_]


def _without_stream(comment: str) -> str:
    """A type constant's comment less the stream it names (the page gives every stream)."""
    if comment.startswith("stream "):
        return comment.split(" ", 2)[2].lstrip(": ") if comment.count(" ") > 1 else ""
    return comment


def event_section(cls) -> list[str]:
    docstring, comments = "", {}
    for klass in reversed(cls.__mro__):   # a field's comment is where the field is declared
        if dataclasses.is_dataclass(klass):
            own_doc, own_comments = class_notes(klass)
            comments.update(own_comments)
            docstring = own_doc if klass is cls else docstring
    module = sys.modules[cls.__module__]
    out = [f"### {cls.TYPE}", "", f"Stream `{stream_of(cls.TYPE)}`; class `{cls.__name__}` in "
                                  f"`{source_path(cls.__module__)}`.", ""]
    out += prose(docstring or _without_stream(constant_comments(module).get(cls.TYPE, "")))
    rows = [[code(f.name), code(type_name(f.type)), "yes" if f.name in cls._REQUIRED else "",
             comments.get(f.name, "")] for f in dataclasses.fields(cls) if f.name != "extra"]
    return out + table(["Field", "Type", "Required", "Note"], rows)


def events_page() -> str:
    registry = event_registry()
    out = header("Events", "the event registry (`app.domain.events.registered()`: the classes of "
                           "`app/domain/events.py` and `app/domain/resource_events.py`)")
    out += ["Every fact is an event in one PostgreSQL log, in a stream named `category-id`. Optional "
            "fields are written only when set; keys an event does not know are kept as they are. "
            "Decisions carry `at`, the scheduler's time, and `cause`, the position of the input that "
            "caused them.", ""]
    names = sorted(registry)
    out += table(["Event", "Stream", "Class"],
                 [[f"[{n}](#{n.lower()})", code(stream_of(n)), code(registry[n].__name__)] for n in names])
    out += ["## Event types", ""]
    for name in names:
        out += event_section(registry[name])
    return "\n".join(out).rstrip() + "\n"


# == the pages =============================================================================

def configuration_page() -> str:
    """Every environment variable, from the one table in app/config.py that also parses them."""
    from app.config import reference_markdown
    return reference_markdown()


PAGES = {
    "cli.md": cli_page,
    "graphql.md": graphql_page,
    "gateway.md": gateway_page,
    "pool-settings.md": pool_settings_page,
    "metrics.md": metrics_page,
    "events.md": events_page,
    "configuration.md": configuration_page,
}


def stale_pages() -> list[str]:
    """The pages whose committed text differs from what the code generates."""
    return [name for name, render in PAGES.items()
            if not (REFERENCE / name).exists() or (REFERENCE / name).read_text(encoding="utf-8") != render()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python docs/generate.py", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if a page differs")
    args = parser.parse_args(argv)
    try:
        return _check() if args.check else _write()
    except Undocumented as exc:
        print(f"docs/generate.py: {exc}", file=sys.stderr)
        return 2


def _check() -> int:
    stale = stale_pages()
    for name in stale:
        print(f"docs/reference/{name} differs from the code", file=sys.stderr)
    if stale:
        print(f"regenerate with: {REGENERATE}", file=sys.stderr)
    return 1 if stale else 0


def _write() -> int:
    pages = {name: render() for name, render in PAGES.items()}   # all or none: a failure writes nothing
    REFERENCE.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (REFERENCE / name).write_text(text, encoding="utf-8")
        print(f"wrote docs/reference/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

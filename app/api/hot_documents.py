"""A shorter way through the GraphQL layer for the documents agents send on every turn.

Under `bench load` (1,000 agents) strawberry and graphql-core cost a worker more CPU than
the service itself: an extension runner per request, an executor built per request, and
strawberry's argument conversion (re-reading type annotations on every call). The
measurements: docs/architecture/decisions/hot-documents.md.
An agent sends the same few documents over and over (requestTurn, completeTurn,
heartbeat, cancelTurn with a selection of the turn's scalar fields; appendContext with a
selection of its stats, once per message it keeps), so each such document is compiled once
into a plan that does only what the general executor would do for it, and gives the same answer byte for byte.

A document becomes a plan only after the general executor has taken it through parsing
and validation without an error, in this process (`LearnHotDocuments`, the last
extension to run): whatever the limits, rules or introspection setting, a plan exists
only for a document those found valid, and they are deterministic in the document.
Only one shape is compiled: one mutation, one of the five root fields, no directives or
fragments, a selection of scalar fields of its answer (a Turn, or ContextStats). Anything else never gets a plan.

A request on a plan:
1. Before any resolver runs (nothing has happened yet, so going back is free): the body
   is a JSON object of `query`, `variables`, `operationName`; the credential is a valid
   one; the variables coerce (graphql-core's own coercion); the arguments convert. If any
   of this does not hold, the request goes the general way and gets its exact error there.
2. The field's own resolver runs, as the executor would call it.
3. The answer: a Turn (or ContextStats) is serialized by the schema's own leaf serializers. Anything else
   (the resolver raised, a value that would not serialize) is completed by graphql-core
   itself with the resolver's outcome in place of a second call, so errors (their message,
   locations, path, code, whether they are logged) are the executor's.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import MISSING, dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from graphql import (
    DocumentNode,
    FieldNode,
    GraphQLEnumType,
    GraphQLError,
    GraphQLNonNull,
    GraphQLScalarType,
    OperationDefinitionNode,
    OperationType,
    execute,
)
from graphql.execution.middleware import MiddlewareManager
from graphql.execution.values import coerce_variable_values, get_argument_values
from graphql.pyutils import Undefined
from strawberry.execution import optimized_is_awaitable
from strawberry.extensions import SchemaExtension
from strawberry.http import process_result
from strawberry.http.parse_content_type import parse_content_type
from strawberry.relay.types import GlobalID
from strawberry.scalars import is_scalar
from strawberry.types.base import StrawberryList, StrawberryMaybe, StrawberryOptional, has_object_definition
from strawberry.types.enum import StrawberryEnumDefinition, has_enum_definition
from strawberry.types.lazy_type import LazyType
from strawberry.types.unset import UNSET
from strawberry.utils.await_maybe import await_maybe

from .context import GraphQLContext, principal_of
from .document_cache import DOCUMENT_CACHE_SIZE, MAX_CACHED_DOCUMENT_CHARS
from .errors import assign_codes

if TYPE_CHECKING:   # for the annotations only: at run time the context carries the runtime
    from app.bootstrap import Runtime

HOT_FIELDS = ("requestTurn", "completeTurn", "heartbeat", "cancelTurn", "appendContext")
_BODY_KEYS = frozenset({"query", "variables", "operationName"})
MAX_BODY = 64 * 1024   # a turn command is under 1 kB; a larger body is not worth decoding twice


class NotCompiled(Exception):
    """This document (or one of its argument types) is not of the shape a plan takes."""


# -- arguments: strawberry's convert_arguments, resolved once per type ---------------
def _converter(type_, schema):
    """A function doing what strawberry's `convert_argument(value, type_)` does, for the
    types our hot arguments use (optional, leaf, list of leaves, plain input object);
    NotCompiled for any other (a custom `from_input`, Maybe, lazy or global-id types).
    tests/unit/test_hot_documents.py holds it to convert_argument's results."""
    registry = schema.schema_converter.scalar_registry
    if isinstance(type_, (StrawberryMaybe, LazyType)) or type_ is GlobalID:
        raise NotCompiled(f"argument type {type_!r}")
    if isinstance(type_, StrawberryOptional):
        return _converter(type_.of_type, schema)
    if isinstance(type_, StrawberryList):
        item = type_.of_type
        item = item.of_type if isinstance(item, StrawberryOptional) else item
        if not _leaf(item, registry):
            raise NotCompiled("lists of non-leaf types")
        # Copied, as strawberry does: graphql-core shares one default between requests.
        return lambda value: value if value is None or value is UNSET else list(value)
    if _leaf(type_, registry) or has_enum_definition(type_):
        return lambda value: value
    if has_object_definition(type_):
        definition = type_.__strawberry_definition__
        if not definition.is_input or definition.from_input is not None:
            raise NotCompiled(f"input type {type_!r}")
        implicit = {f.python_name: None for f in definition.fields
                    if f.default_value is MISSING and f.default_factory is MISSING}
        fields = [(schema.config.name_converter.from_field(f), f.python_name,
                   _converter(f.resolve_type(type_definition=definition), schema))
                  for f in definition.fields]

        def build(value):
            if value is None or value is UNSET:
                return value
            kwargs = dict(implicit)
            for graphql_name, python_name, convert in fields:
                if graphql_name in value:
                    kwargs[python_name] = convert(value[graphql_name])
            return type_(**kwargs)
        return build
    raise NotCompiled(f"argument type {type_!r}")


def _leaf(type_, registry) -> bool:
    if type_ is GlobalID or isinstance(type_, LazyType):
        raise NotCompiled(f"argument type {type_!r}")
    return is_scalar(type_, registry) or isinstance(type_, StrawberryEnumDefinition)


# -- plans ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Leaf:
    key: str                  # the response key
    resolve: Any              # the schema's resolver of the field (None: __typename)
    serialize: Any
    nullable: bool


@dataclass(frozen=True)
class Plan:
    document: DocumentNode
    operation: OperationDefinitionNode
    field_node: FieldNode
    field_def: Any            # graphql-core's GraphQLField of the root field
    key: str
    resolver: Any             # the strawberry resolver's own function
    arguments: tuple          # (graphql name, python name, converter)
    result_class: type
    type_name: str
    leaves: tuple


def compile_plan(schema, document: DocumentNode) -> Plan:
    """The plan of `document`, or NotCompiled if it is not of the one shape taken."""
    if len(document.definitions) != 1 or not isinstance(document.definitions[0], OperationDefinitionNode):
        raise NotCompiled("one operation, no fragments")
    operation = document.definitions[0]
    if operation.operation != OperationType.MUTATION or operation.directives:
        raise NotCompiled("a mutation without directives")
    if any(v.directives for v in operation.variable_definitions or ()):
        raise NotCompiled("variables without directives")
    selections = operation.selection_set.selections
    field_node = selections[0] if len(selections) == 1 else None
    if not isinstance(field_node, FieldNode) or field_node.name.value not in HOT_FIELDS or field_node.directives:
        raise NotCompiled("one of the hot root fields")
    mutation = schema._schema.mutation_type
    field_def = mutation.fields[field_node.name.value]
    strawberry_field = next(f for f in schema.get_type_by_name(mutation.name).fields
                            if schema.config.name_converter.get_graphql_name(f) == field_node.name.value)
    if strawberry_field.base_resolver is None or strawberry_field.extensions or strawberry_field.permission_classes:
        raise NotCompiled("a plain resolver")
    arguments = tuple((schema.config.name_converter.from_argument(a), a.python_name, _converter(a.type, schema))
                      for a in strawberry_field.arguments)
    if not isinstance(field_def.type, GraphQLNonNull):
        raise NotCompiled("a non-null root field")
    result_type = field_def.type.of_type
    definition = schema.get_type_by_name(result_type.name)
    leaves, keys = [], set()
    for selection in field_node.selection_set.selections if field_node.selection_set else ():
        if not isinstance(selection, FieldNode) or selection.directives or selection.arguments \
                or selection.selection_set:
            raise NotCompiled("plain leaf selections")
        key = selection.alias.value if selection.alias else selection.name.value
        if key in keys:
            raise NotCompiled("each response key once")
        keys.add(key)
        if selection.name.value == "__typename":
            leaves.append(_Leaf(key, None, None, False))
            continue
        leaf_def = result_type.fields[selection.name.value]
        leaf_type = leaf_def.type.of_type if isinstance(leaf_def.type, GraphQLNonNull) else leaf_def.type
        if not isinstance(leaf_type, (GraphQLScalarType, GraphQLEnumType)) \
                or not getattr(leaf_def.resolve, "_is_default", False):
            raise NotCompiled("scalar fields without resolvers")
        leaves.append(_Leaf(key, leaf_def.resolve, leaf_type.serialize,
                            not isinstance(leaf_def.type, GraphQLNonNull)))
    if not leaves:
        raise NotCompiled("a selection")
    return Plan(document, operation, field_node, field_def,
                field_node.alias.value if field_node.alias else field_node.name.value,
                strawberry_field.base_resolver.wrapped_func, arguments, definition.origin,
                result_type.name, tuple(leaves))


class HotDocuments:
    """The plans of one schema, by document text (bounded like the document cache)."""

    def __init__(self, schema, maxsize: int = DOCUMENT_CACHE_SIZE):
        self.schema, self.maxsize = schema, maxsize
        self.plans: OrderedDict[str, Plan | None] = OrderedDict()   # None: not of the shape
        self.served = 0   # requests answered on a plan (the tests check it is taken)
        self._streaming_accept: dict[str, bool] = {}

    def learn(self, query: str, document: DocumentNode) -> None:
        if query in self.plans or len(query) > MAX_CACHED_DOCUMENT_CHARS:
            return
        try:
            plan = compile_plan(self.schema, document)
        except NotCompiled:
            plan = None
        self.plans[query] = plan
        if len(self.plans) > self.maxsize:
            self.plans.popitem(last=False)

    async def answer(self, view, request, body: bytes, runtime: Runtime) -> bytes | None:
        """The response body for this request on its document's plan, or None: take
        the general way (nothing has run)."""
        if len(body) > MAX_BODY:
            return None
        try:
            data = json.loads(body)   # as strawberry decodes it (orjson reads big integers otherwise)
        except Exception:   # not JSON, or nested past the decoder: the general way says how
            return None
        if type(data) is not dict or not data.keys() <= _BODY_KEYS:
            return None
        plan = self.plans.get(data.get("query"))  # type: ignore[arg-type]  # no query: None
        if plan is None:
            return None
        name = data.get("operationName")
        if name is not None and (plan.operation.name is None or name != plan.operation.name.value):
            return None
        variables = data.get("variables")
        if variables is not None and type(variables) is not dict:
            return None
        if not self._plain_json(view, request.headers):
            return None   # strawberry refuses the content type, or streams the answer
        context: GraphQLContext = {"request": request, "response": None, "runtime": runtime}
        try:
            if principal_of(context) is None:
                return None
        except Exception:
            return None
        kwargs = self._arguments(plan, variables or {})
        if kwargs is None:
            return None
        self.plans.move_to_end(data["query"])
        self.served += 1
        try:
            value = await await_maybe(plan.resolver(None, SimpleNamespace(context=context), **kwargs))
        except Exception as exc:
            return await self._complete(plan, context, variables, name, exc, failed=True)
        fast = self._serialize(plan, value)
        if fast is None:
            return await self._complete(plan, context, variables, name, value, failed=False)
        return json.dumps({"data": {plan.key: fast}}, separators=(",", ":")).encode()

    def _plain_json(self, view, headers) -> bool:
        """A JSON body that strawberry answers with one JSON document (no streaming
        transport asked for in Accept). Both are read as strawberry reads them; what it
        makes of each Accept value is remembered (a few, as clients send few)."""
        content_type = headers.get("content-type")
        if content_type != "application/json" \
                and "application/json" not in parse_content_type(content_type or "")[0]:
            return False
        accept = headers.get("accept", "")
        streams = self._streaming_accept.get(accept)
        if streams is None:
            streams = view._get_stream_transport_from_headers(headers) is not None
            if len(self._streaming_accept) < 64:
                self._streaming_accept[accept] = streams
        return not streams

    def _arguments(self, plan: Plan, variables: dict) -> dict | None:
        problems: list[GraphQLError] = []
        coerced = coerce_variable_values(self.schema._schema, plan.operation.variable_definitions or (),
                                         variables, problems.append)
        if problems or isinstance(coerced, list):
            return None
        try:
            values = get_argument_values(plan.field_def, plan.field_node, coerced)
            return {python_name: convert(values[graphql_name]) for graphql_name, python_name, convert
                    in plan.arguments if graphql_name in values}
        except Exception:
            return None

    @staticmethod
    def _serialize(plan: Plan, value) -> dict | None:
        """The selection of a Turn as the executor serializes it; None if the executor
        would do anything but plain serialization (an error, a null in a non-null field)."""
        if not isinstance(value, plan.result_class):
            return None
        out: dict[str, Any] = {}
        try:
            for leaf in plan.leaves:
                if leaf.resolve is None:
                    out[leaf.key] = plan.type_name
                    continue
                raw = leaf.resolve(value, None)
                if raw is None:
                    if not leaf.nullable:
                        return None
                    out[leaf.key] = None
                    continue
                serialized = leaf.serialize(raw)
                if serialized is None or serialized is Undefined:
                    return None
                out[leaf.key] = serialized
        except Exception:
            return None
        return out

    async def _complete(self, plan: Plan, context, variables, name, outcome, *, failed: bool) -> bytes:
        """graphql-core's own answer for the resolver's outcome (an exception, or a value
        that does not serialize plainly), the resolver not being called a second time;
        then what strawberry and our schema do with its errors."""
        def precomputed(next_, root, info, **kwargs):
            if info.path.prev is None:
                if failed:
                    raise outcome
                return outcome
            return next_(root, info, **kwargs)
        result = await await_maybe(execute(self.schema._schema, plan.document, context_value=context,
                                           variable_values=variables, operation_name=name,
                                           middleware=MiddlewareManager(precomputed),
                                           is_awaitable=optimized_is_awaitable))  # type: ignore[arg-type]  # a TypeGuard in spirit
        if result.errors:
            self.schema.process_errors(result.errors, None)
            assign_codes(result.errors)
            assign_codes(result.errors, escaped=True)
        return json.dumps(process_result(result), separators=(",", ":")).encode()


class LearnHotDocuments(SchemaExtension):
    """Hands a document that reached execution (parsed and valid) to the schema's plans."""

    def on_execute(self):
        context = self.execution_context
        hot = getattr(context.schema, "hot_documents", None)
        if hot is not None and context.query is not None and context.graphql_document is not None \
                and not context.pre_execution_errors:
            hot.learn(context.query, context.graphql_document)
        yield

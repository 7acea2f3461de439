"""A document is parsed and validated once: the second execution of the same text finds
both in the caches (the depth and alias rules must be the same classes every request, or
the validation cache, keyed by the rules too, never hits)."""
from __future__ import annotations

import uuid

from strawberry.extensions.parser_cache import _get_parse_cache
from strawberry.extensions.validation_cache import _get_validate_cache

from app.api import security
from app.api.document_cache import DOCUMENT_CACHE_SIZE
from app.api.schema import build_schema


def test_the_same_document_is_validated_once():
    schema = build_schema()
    query = f"{{ t{uuid.uuid4().hex}: __typename }}"   # a document no other test has sent
    validate, parse = _get_validate_cache(DOCUMENT_CACHE_SIZE), _get_parse_cache(DOCUMENT_CACHE_SIZE)
    first = schema.execute_sync(query, context_value={})
    before = validate.cache_info(), parse.cache_info()
    second = schema.execute_sync(query, context_value={})
    after = validate.cache_info(), parse.cache_info()
    assert first.errors is None and first.data == second.data
    assert after[0].hits == before[0].hits + 1 and after[0].misses == before[0].misses
    assert after[1].hits == before[1].hits + 1 and after[1].misses == before[1].misses


def test_a_lowered_cap_applies_to_the_next_request(monkeypatch):
    schema = build_schema()
    query = "{ scheduler { levels { queued { turnId } } } }"   # depth 3
    monkeypatch.setattr(security, "MAX_DEPTH", 2)
    refused = schema.execute_sync(query, context_value={})
    assert refused.data is None and "exceeds maximum operation depth" in refused.errors[0].message
    monkeypatch.setattr(security, "MAX_ALIASES", 1)
    aliased = schema.execute_sync("{ a: __typename b: __typename }", context_value={})
    assert aliased.data is None and "aliases" in aliased.errors[0].message.lower()

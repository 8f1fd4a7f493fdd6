"""The validator's fast path accepts exactly what jsonschema accepts, and never reports errors of its own.

core/_schema.py compiles a plain predicate for schemas in its keyword subset;
an instance it accepts skips jsonschema. Property test: over random schemas of
the subset and random JSON instances, the predicate accepts an instance only
when jsonschema (the dialect's own validator) finds it valid, and for the
simple object schemas tools actually use it accepts every valid instance (so
the fast path is taken, not just harmless).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator, Draft202012Validator

from openfunctions.core._schema import Validator, compile_fast_check

numbers = st.integers(-2, 2) | st.sampled_from([1.0, 2.0, -0.0, 0.5, -1.5])
json_values = st.recursive(
    st.none() | st.booleans() | numbers
    | st.text(max_size=4) | st.sampled_from(["a", "b", "ab", "ba", "sha256"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "c", "x"]), inner, max_size=3),
    max_leaves=8,
)

TYPES = ["object", "array", "string", "number", "integer", "boolean", "null"]


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    keywords = {
        "type": st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True),
        "enum": st.lists(st.sampled_from(["a", "b", "ab", "sha256"]), min_size=1, max_size=3),
        "const": st.sampled_from(["a", "b"]),
        "minLength": st.integers(0, 3), "maxLength": st.integers(0, 3),
        "pattern": st.sampled_from(["^a", "b$", "a|b", "^$"]),
        "minimum": numbers, "maximum": numbers, "exclusiveMinimum": numbers, "exclusiveMaximum": numbers,
        "minItems": st.integers(0, 2), "maxItems": st.integers(0, 2),
        "description": st.just("annotations never matter"), "default": json_values,
    }
    # One or two keywords per node: with more, almost nothing is valid and the accept path goes untested.
    return st.lists(st.sampled_from(sorted(keywords)), min_size=0, max_size=2, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: keywords[k] for k in keys}))


schemas = st.recursive(
    _leaf() | st.just(True),
    lambda inner: (
        st.builds(lambda props, req, extra: {"type": "object", "properties": props, "required": req,
                                              **({} if extra is None else {"additionalProperties": extra})},
                  st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
                  st.lists(st.sampled_from(["a", "b", "c"]), max_size=2, unique=True),
                  st.none() | st.booleans() | inner)
        | st.builds(lambda items: {"type": "array", "items": items}, inner)
        | st.builds(lambda subs: {"anyOf": subs}, st.lists(inner, min_size=1, max_size=3))
    ),
    max_leaves=6,
)


@pytest.mark.parametrize("cls", [Draft202012Validator, Draft7Validator])
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, instances=st.lists(json_values, min_size=1, max_size=6))
def test_fast_path_accepts_only_what_jsonschema_accepts(cls: Any, schema: Any, instances: list[Any]) -> None:
    fast = compile_fast_check(schema)
    assert fast is not None, f"a schema of the fast subset got no fast path: {schema!r}"
    reference = cls(schema)
    for instance in instances:
        if fast(instance):
            assert reference.is_valid(instance), f"fast path accepted an invalid instance {instance!r} for {schema!r}"


@settings(max_examples=300, deadline=None)
@given(instance=json_values)
def test_fast_path_accepts_every_valid_instance_of_a_typical_tool_schema(instance: Any) -> None:
    schema = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1},
            "algorithm": {"anyOf": [{"type": "string", "enum": ["sha256", "a"]}, {"type": "null"}], "default": "sha256"},
            "n": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    fast = compile_fast_check(schema)
    assert fast is not None
    for candidate in (instance, {"text": "x", "tags": instance}, {"text": instance, "n": instance, "algorithm": instance}):
        assert fast(candidate) == Draft202012Validator(schema).is_valid(candidate)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}},
    {"type": "string", "format": "date-time"},
    {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
    {"type": "array", "uniqueItems": True},
    {"enum": [1, 2]},
    {"type": "array", "items": [{"type": "string"}]},
    {"type": "string", "pattern": "("},
    False,
])
def test_keywords_outside_the_subset_get_no_fast_path(schema: Any) -> None:
    assert compile_fast_check(schema) is None


def test_a_rejected_instance_still_gets_jsonschemas_violations() -> None:
    v = Validator({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"],
                   "additionalProperties": False})
    assert v.violations({"n": 3}) == []
    assert v.violations({"n": 0}) == [{"path": "$.n", "message": "0 is less than the minimum of 1"}]
    assert [x["path"] for x in v.violations({"n": True, "x": 1})] == ["$", "$.n"]


@pytest.mark.parametrize("cls", [Draft202012Validator, Draft7Validator])
@settings(max_examples=500, deadline=None)
@given(schema=_leaf(), instances=st.lists(json_values | numbers, min_size=1, max_size=8))
def test_each_keyword_alone_agrees_with_jsonschema_both_ways(cls: Any, schema: Any, instances: list[Any]) -> None:
    # One node, no combinators: here the predicate must be exact (accept iff valid), keyword by keyword.
    fast = compile_fast_check(schema)
    assert fast is not None
    reference = cls(schema)
    for instance in instances:
        assert fast(instance) == reference.is_valid(instance), (schema, instance)

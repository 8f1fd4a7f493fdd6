"""Canonical JSON: the C fast path agrees with the reference encoder and refuses what has no JSON form."""

from __future__ import annotations

import collections
import enum
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from openfunctions.core import canonical_json
from openfunctions.core.errors import NonJsonValue

_REFERENCE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_fast_path_equals_the_reference_encoder(value):
    assert canonical_json(value) == _REFERENCE.encode(value)


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


@pytest.mark.parametrize(
    "value, text",
    [
        ({"b": (1, 2), "a": Color.RED}, '{"a":1,"b":[1,2]}'),
        ({Name("k"): Name("v")}, '{"k":"v"}'),  # str subclasses are strings
        (collections.OrderedDict([("z", 1), ("a", 2)]), '{"a":2,"z":1}'),
        ("é\u2028", '"é\u2028"'),
    ],
)
def test_subclasses_of_json_types_encode_as_their_base(value, text):
    assert canonical_json(value) == text


@pytest.mark.parametrize(
    "value, path",
    [
        ({"a": [{"b": {1: 2}}]}, "$.a[0].b"),
        # dict subclasses, at the root and nested, used to slip through the
        # key check (json.dumps turns 1 into "1" without a word).
        (collections.OrderedDict({1: "x"}), "$"),
        ([collections.OrderedDict({2: "x"})], "$[0]"),
        ({"a": (1, {"x": {None: 3}})}, "$.a[1].x"),
    ],
)
def test_non_string_keys_are_refused_with_their_path(value, path):
    with pytest.raises(NonJsonValue, match="non-string key") as ei:
        canonical_json(value)
    assert ei.value.details["path"] == path


@pytest.mark.parametrize(
    "value, needle",
    [
        ({"a": float("nan")}, "$.a"),
        ({"a": [1, {"b": b"x"}]}, "$.a[1].b"),
        ({"s": {1, 2}}, "$.s"),
    ],
)
def test_values_without_json_form_are_named(value, needle):
    with pytest.raises(NonJsonValue) as ei:
        canonical_json(value)
    assert needle in str(ei.value)


def test_a_cycle_is_refused():
    a: list = []
    a.append(a)
    with pytest.raises(NonJsonValue, match="cycle"):
        canonical_json({"a": a})

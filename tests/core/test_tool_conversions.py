"""The project's tools that moved from hand-written schemas to ``@tool`` still say the same thing.

tests/core/tool_specs_before_decorator.json is each tool's spec as it was
defined with ``define_tool`` (or ``state_tool``) and a hand-written schema. Today's tool must have
the same spec apart from the input schema (name, description, title, tags,
annotations, capability, output schema, examples, meta), the same test cases
and the same null-as-absent set; its input schema must accept and refuse the
same arguments. The arguments are generated from the *old* schema: every
property with a value of each JSON type, its enum values and one outside, its
bounds and one past each, its length limits and one past each, strings for
its pattern; each required property left out; an unknown property.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openfunctions.core import ToolDefinition
from openfunctions.core._schema import Validator

from ._converted_tools import converted_tools, spec_of

pytestmark = pytest.mark.anyio

BEFORE = json.loads((Path(__file__).parent / "tool_specs_before_decorator.json").read_text("utf-8"))

#: Strings to try against each pattern the old schemas use (a generator cannot invent them).
PATTERN_PROBES: dict[str, list[str]] = {
    r"^\d{4}-\d{2}-\d{2}$": ["2025-03-01", "2025-3-1", "2025-03-01x", "", "٢٠٢٥-٠٣-٠١"],
    r"^\+?[\w\-.]{1,64}$": ["apollo", "+apollo", "++apollo", "a b", "a" * 64, "a" * 65, "é-x.y_z", "", "+"],
    "^[A-Z]$": ["A", "Z", "a", "AB", "", "É"],
    # memory's thread ids and fact ids
    r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$": ["t-1", "a", "a:b.c_d-e", "-a", "_a", "", "a b", "a/b", "é",
                                              "a" * 128, "a" * 129, "a\n"],
    "^f_[0-9a-f]{24}$": ["f_" + "0" * 24, "f_" + "a" * 24, "f_" + "A" * 24, "f_" + "0" * 23, "f_" + "0" * 25,
                         "g_" + "0" * 24, "", "f_" + "0" * 24 + "\n"],
}
#: The one intended difference: the demo's count_words had an open schema (an oversight: unknown arguments
#: were dropped silently); @tool closes every schema, so an unknown argument is now refused.
INTENDED = {("count_words", '{"text": "x", "zzz_unknown": 1}'): (True, False)}
_ONE_OF_EACH_TYPE: list[Any] = ["s", 0, 1, -1, 1.5, True, False, None, [], {}, ["s"], {"k": "v"}]


def _valid(prop: dict[str, Any]) -> Any:
    """A value the (old) property schema accepts."""
    if "enum" in prop:
        return next(v for v in prop["enum"] if v is not None)
    if "pattern" in prop:
        return PATTERN_PROBES[prop["pattern"]][0]
    if "anyOf" in prop:
        return _valid(next(b for b in prop["anyOf"] if b != {"type": "null"}))
    types = prop.get("type", "string")
    kind = next(t for t in (types if isinstance(types, list) else [types]) if t != "null")
    if kind == "string":
        return "x" * max(prop.get("minLength", 1), 1)
    if kind == "integer":
        return prop.get("minimum", 1)
    if kind == "number":
        return 0.5
    if kind == "boolean":
        return True
    raise AssertionError(f"no sample for {prop}")


def _values(prop: dict[str, Any]) -> list[Any]:
    """Values to try for one property: of every type, at and past every bound, in and out of the enum."""
    out = list(_ONE_OF_EACH_TYPE)
    nodes = [prop, *[b for b in prop.get("anyOf", []) if isinstance(b, dict)]]
    for node in nodes:
        out += [*node.get("enum", []), "not-in-the-enum"] if "enum" in node else []
        for key in ("minimum", "maximum"):
            if key in node:
                out += [node[key] - 1, node[key], node[key] + 1]
        for key in ("minLength", "maxLength"):
            if key in node:
                out += ["a" * max(node[key] - 1, 0), "a" * node[key], "a" * (node[key] + 1)]
        out += PATTERN_PROBES.get(node.get("pattern", ""), [])
    return out


def probes(schema: dict[str, Any]) -> list[dict[str, Any]]:
    props: dict[str, Any] = schema.get("properties", {})
    required = schema.get("required", [])
    base = {name: _valid(props[name]) for name in required}
    out = [base, {}, {**base, "zzz_unknown": 1}]
    out += [{k: v for k, v in base.items() if k != name} for name in required]
    for name, prop in props.items():
        out += [{**base, name: v} for v in _values(prop)]
    return out


def _verdicts(schema: dict[str, Any], arguments: list[dict[str, Any]]) -> list[bool]:
    v = Validator(schema, what="probe")
    return [not v.violations(a) for a in arguments]


@pytest.fixture
async def now_tools(tmp_path: Path) -> dict[str, tuple[ToolDefinition, dict[str, Any]]]:
    return {t.name: (t, spec_of(t, tmp_path)) for t in await converted_tools(tmp_path)}


async def test_every_captured_tool_still_exists(now_tools):
    assert sorted(now_tools) == sorted(BEFORE)


@pytest.mark.parametrize("name", sorted(BEFORE))
async def test_spec_is_unchanged_but_for_the_input_schema(name, now_tools):
    before, (_, now) = BEFORE[name], now_tools[name]
    old_spec = {k: v for k, v in before["spec"].items() if k != "inputSchema"}
    new_spec = {k: v for k, v in now["spec"].items() if k != "inputSchema"}
    assert new_spec == old_spec
    assert now["tests"] == before["tests"]
    assert now["null_as_absent"] == before["null_as_absent"]


@pytest.mark.parametrize("name", sorted(BEFORE))
async def test_input_schema_accepts_and_refuses_the_same_arguments(name, now_tools):
    old = BEFORE[name]["spec"]["inputSchema"]
    new = now_tools[name][0].input_schema
    arguments = probes(old)
    old_verdicts, new_verdicts = _verdicts(old, arguments), _verdicts(new, arguments)
    # Each schema is tried with arguments it takes and arguments it refuses: the comparison has teeth.
    assert True in old_verdicts and False in old_verdicts
    differ = {(name, json.dumps(a)): (o, n) for a, o, n in zip(arguments, old_verdicts, new_verdicts, strict=True)
              if o != n}
    assert differ == {k: v for k, v in INTENDED.items() if k[0] == name}
    # What the model reads about each parameter survives too.
    for pname, prop in old.get("properties", {}).items():
        assert new["properties"][pname].get("description") == prop.get("description"), pname
        assert new["properties"][pname].get("default") == prop.get("default"), pname

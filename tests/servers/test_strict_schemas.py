"""Every tool schema of every profile passes the providers' strict-mode rules.

Two checks per tool:

* :func:`openfunctions.core.strict_violations`, a checker of the rules the
  providers document in common (closed objects listing ``required``, typed nodes);
* OpenAI's own strict converter (``openai.lib._pydantic._ensure_strict_json_schema``,
  what the ``openai`` package runs on a function tool's parameters with
  ``strict=True``): it must change nothing but ``required`` (it makes every
  property required), and every property it makes required must accept ``null``
  in our schema, so that a strict client can still say "use the default".

A third, where the ``openai-agents`` package (test extra) is installed: its own
strict converter (``agents.strict_schema.ensure_strict_json_schema``, what an
Agents SDK ``FunctionTool`` or MCP tool runs with strict schemas on) must accept
every tool and change nothing but ``required``. It runs in a child process started
outside the checkout, because this repository's own ``agents/`` folder shadows
the package's top-level ``agents`` name here.

The ``conformance`` profile is left out: its fixtures are the MCP conformance
suite's, schema for schema (``json_schema_2020_12_tool`` exists to check that an
open 2020-12 schema passes through unchanged). The anthropic and google-genai
packages offer no public strict converter for a plain JSON Schema; they are
covered by the rules checker only.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from openfunctions.core import ToolRegistry, accepts_null, strict_violations, tool
from openfunctions.servers._profiles import PROFILES, build_profile

from .conftest import REPO

pytestmark = pytest.mark.anyio

CHECKED = [p for p in PROFILES if p != "conformance"]


async def _profile_tools(name: str, tmp_path: Path) -> list:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True, exist_ok=True)
    catalog = project / "catalog.toml"
    catalog.write_text((REPO / "work" / "example_catalog.toml").read_text())
    try:
        prof = build_profile(name, data_dir=tmp_path / name, catalog=catalog, principal="agent", files_root=tmp_path)
    except Exception as exc:  # a profile this configuration cannot serve (gateway without --upstreams)
        if getattr(exc, "code", None) in ("profile_unavailable", "context_provider_unavailable"):
            return []
        raise
    try:
        return prof.registry.list()
    finally:
        await prof.aclose()


def _openai_strict(schema: dict) -> dict:
    from openai.lib._pydantic import _ensure_strict_json_schema

    root = copy.deepcopy(schema)
    return _ensure_strict_json_schema(root, path=(), root=root)


def _without_required(node):
    if isinstance(node, dict):
        return {k: _without_required(v) for k, v in node.items() if k != "required"}
    if isinstance(node, list):
        return [_without_required(v) for v in node]
    return node


def _made_required(ours: dict, strict: dict) -> list[tuple[dict, str]]:
    """(our property schema, name) for every top-level property OpenAI's converter made required."""
    before = set(ours.get("required") or ())
    return [(ours["properties"][n], n) for n in strict.get("required") or () if n not in before]


async def test_every_tool_of_every_profile_is_strict(tmp_path):
    openai = pytest.importorskip("openai", reason="the openai package (test extra) runs OpenAI's strict converter")
    assert openai is not None
    seen = 0
    problems = []
    for name in CHECKED:
        for t in await _profile_tools(name, tmp_path):
            seen += 1
            for v in strict_violations(t.input_schema):
                problems.append(f"{name}/{t.name}: {v}")
            strict = _openai_strict(t.input_schema)
            if _without_required(strict) != _without_required(t.input_schema):
                problems.append(f"{name}/{t.name}: OpenAI's strict converter changed more than 'required'")
            for prop, pname in _made_required(t.input_schema, strict):
                if not accepts_null(prop):
                    problems.append(f"{name}/{t.name}: optional {pname!r} refuses null (strict clients send it)")
    assert seen >= 15, f"only {seen} tools found: the profiles did not build"
    assert problems == []


_AGENTS_CONVERTER = """
import json, sys
from agents.strict_schema import ensure_strict_json_schema
out = {}
for name, schema in json.load(sys.stdin).items():
    try:
        out[name] = {"strict": ensure_strict_json_schema(schema)}
    except Exception as exc:
        out[name] = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out))
"""


def _agents_strict(schemas: dict[str, dict], tmp_path: Path) -> dict[str, dict]:
    """openai-agents' converter over ``schemas``, in a child whose import path has no checkout on it (``-P``)."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-P", "-c", _AGENTS_CONVERTER], input=json.dumps(schemas), cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


async def test_every_tool_of_every_profile_passes_the_agents_sdk_strict_converter(tmp_path):
    if _agents_sdk_missing():
        pytest.skip("the openai-agents package (test extra) runs the Agents SDK's strict converter")
    schemas = {}
    for name in CHECKED:
        for t in await _profile_tools(name, tmp_path):
            schemas[f"{name}/{t.name}"] = t.input_schema
    assert len(schemas) >= 15, f"only {len(schemas)} tools found: the profiles did not build"
    problems = []
    for key, got in _agents_strict(schemas, tmp_path).items():
        if "error" in got:
            problems.append(f"{key}: refused: {got['error'][:300]}")
        elif _without_required(got["strict"]) != _without_required(schemas[key]):
            problems.append(f"{key}: the Agents SDK's strict converter changed more than 'required'")
    assert problems == []


def _agents_sdk_missing() -> bool:
    from importlib import metadata

    try:
        metadata.distribution("openai-agents")
    except metadata.PackageNotFoundError:
        return True
    return False


def test_the_agents_sdk_converter_check_catches_a_free_form_value(tmp_path):
    """The check above can fail: a free-form JSON value (the old ``of_json_query.document``) is changed by it."""
    if _agents_sdk_missing():
        pytest.skip("the openai-agents package (test extra) runs the Agents SDK's strict converter")
    free = {"type": "object", "properties": {"document": {"type": ["object", "array", "string", "null"]}},
            "required": ["document"], "additionalProperties": False}
    got = _agents_strict({"t": free}, tmp_path)["t"]
    assert "error" in got or _without_required(got["strict"]) != _without_required(free)


def test_the_rules_checker_catches_each_rule():
    assert strict_violations({"type": "object", "properties": {"a": {}}}) == [
        "$: additionalProperties is not false", "$: no required list", "$.a: no type"]
    nested = {"type": "object", "properties": {"o": {"type": "object", "properties": {}, "additionalProperties": False}},
              "required": [], "additionalProperties": False}
    assert strict_violations(nested) == ["$.o: no required list"]


@pytest.mark.parametrize("schema, absent", [
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}, {"a"}),
    ({"type": "object", "properties": {"a": {"type": ["integer", "null"]}}, "additionalProperties": False}, set()),
    ({"type": "object", "properties": {"a": {"enum": ["x", "y"]}}, "additionalProperties": False}, {"a"}),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}, set()),
])
def test_closed_schemas_are_completed_and_open_ones_kept(schema, absent):
    from openfunctions.core import define_tool

    t = define_tool(name="t", description="", input_schema=schema, handler=lambda p, c: {})
    assert t.null_as_absent == absent
    assert strict_violations(t.input_schema) == []
    assert all(accepts_null(t.input_schema["properties"][n]) for n in absent)
    open_schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert define_tool(name="o", description="", input_schema=open_schema, handler=lambda p, c: {}).input_schema == open_schema


async def test_null_for_an_optional_parameter_is_absent_and_errors_quote_json():
    seen = {}

    @tool
    def pick(text: str, limit: int = 3, label: str | None = "x") -> dict:
        seen.update(limit=limit, label=label)
        return {"n": min(limit, len(text))}

    reg = ToolRegistry([pick])
    assert await reg.execute("pick", {"text": "hello", "limit": None}) == {"n": 3}
    assert seen == {"limit": 3, "label": "x"}  # null limit: the default, as if left out
    await reg.execute("pick", {"text": "hello", "label": None})
    assert seen["label"] is None  # the author's own nullable parameter keeps its null
    bad = await reg.execute_detailed("pick", {"text": None, "limit": "many"})
    message = bad.error.message
    assert '$.text: null is not of type "string"' in message and '$.limit: "many" is not of type "integer" or "null"' in message
    assert "None" not in message
    missing = await reg.execute_detailed("pick", {"limit": 1, "extra": True})
    assert '"text" is a required property' in missing.error.message and '("extra" was unexpected)' in missing.error.message

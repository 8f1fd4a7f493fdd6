"""A hostile-upstream corpus: what an MCP server we mount may send, and that the gateway stays bounded.

Two parts, a few seconds each:

- schemas (``SCHEMAS``): references to URLs and files, backtracking patterns,
  huge and deeply nested schemas and values, exponential ``$ref`` fan-out,
  lone surrogates. Each is built as an *untrusted* validator and run against
  its hostile value in a child process (a backtracking regex would hold the
  GIL, so a thread could not be waited for). Each must end as its entry says:
  ``refused`` when built (a ``ToolDefinitionError`` naming the problem),
  ``invalid`` (violations, no exception) or ``valid``; none may fetch anything.
- the wire (``test_hostile_upstream_wire``): one real stdio upstream
  (``tests/providers/hostile_server.py``) that lists 20,000 tools and writes
  junk lines, non-JSON-RPC, lone surrogates, deep nesting and one endless
  line. Every call ends (answered, or ``upstream_lost`` with the connection
  reopened), only ``maxTools`` tools are mounted, and a plain call works at the end.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytestmark = pytest.mark.slow

BOUND = 60.0  # seconds before the corpus counts as hung (a bound, not a timing claim)
EVIL = "^(a+)+$"
LONG_A = "a" * 5000 + "!"


def _nested(depth: int, leaf: Any, key: str = "a") -> Any:
    value = leaf
    for _ in range(depth):
        value = {key: value}
    return value


def _fan_out(levels: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
                            for i in range(levels)}
    defs[f"d{levels}"] = {"type": "number"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


def _obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


# name -> (schema, value, expected: "refused" | "invalid" | "valid", text the refusal or a violation must contain)
SCHEMAS: dict[str, tuple[Any, Any, str, str]] = {
    "ref to http": (_obj(x={"$ref": "http://127.0.0.1:9/s.json"}), {"x": 1}, "refused", "never fetched"),
    "ref to https": (_obj(x={"$ref": "https://example.invalid/s.json#/a"}), {}, "refused", "never fetched"),
    "ref to a file": (_obj(x={"$ref": "file:///etc/passwd"}), {}, "refused", "never fetched"),
    "relative ref off an $id": ({"$id": "http://127.0.0.1:9/root.json", **_obj(x={"$ref": "other.json"})}, {},
                                "refused", "never fetched"),
    "ref to nowhere inside": (_obj(x={"$ref": "#/$defs/missing"}), {}, "refused", "does not resolve"),
    "ref to the meta-schema": (_obj(x={"$ref": "https://json-schema.org/draft/2020-12/schema"}), {"x": {"type": "string"}},
                               "valid", ""),
    "self ref loop": ({"$defs": {"a": {"$ref": "#/$defs/a"}}, **_obj(x={"$ref": "#/$defs/a"})}, {"x": 1},
                      "invalid", "nested too deeply"),
    "backtracking pattern": (_obj(s={"type": "string", "pattern": EVIL}), {"s": LONG_A}, "invalid", "does not match"),
    "backtracking alternation": (_obj(s={"type": "string", "pattern": "^(a|a)*$"}), {"s": LONG_A}, "invalid", "does not match"),
    "backtracking words": (_obj(s={"type": "string", "pattern": r"^(\w+\s?)*$"}), {"s": "word " * 2000 + "!"},
                           "invalid", "does not match"),
    "backtracking patternProperties": ({"type": "object", "patternProperties": {EVIL: {"type": "integer"}}},
                                       {LONG_A: "x"}, "valid", ""),
    "backtracking key, closed object": ({"type": "object", "patternProperties": {EVIL: {}}, "additionalProperties": False},
                                        {LONG_A: 1}, "invalid", "do"),
    "lookahead": (_obj(s={"type": "string", "pattern": "(?=a)a"}), {}, "refused", "linear-time"),
    "backreference": (_obj(s={"type": "string", "pattern": r"(a)\1"}), {}, "refused", "linear-time"),
    "unevaluated with patterns": ({"type": "object", "patternProperties": {"^a": {}}, "unevaluatedProperties": False},
                                  {}, "refused", "unevaluatedProperties"),
    "exponential ref fan-out": (_fan_out(40), {"x": "not a number"}, "invalid", "validation stopped"),
    "schema over the size limit": (_obj(**{f"p{i}": {"type": "string", "description": "x" * 100} for i in range(3000)}),
                                   {}, "refused", "over the limit"),
    "schema nested 5,000 deep": (_nested(5000, {"type": "string"}, "not"), {}, "refused", "nest"),
    "value nested 50,000 deep": ({"$defs": {"n": {"type": "object", "additionalProperties": {"$ref": "#/$defs/n"}}},
                                  "$ref": "#/$defs/n"}, _nested(50_000, {}), "invalid", "nested too deeply"),
    "100,000 distinct objects, uniqueItems": (_obj(xs={"type": "array", "uniqueItems": True}),
                                              {"xs": [{"i": i} for i in range(100_000)]}, "valid", ""),
    "duplicates, uniqueItems": (_obj(xs={"type": "array", "uniqueItems": True}), {"xs": [{"a": [1]}, {"a": [1.0]}]},
                                "invalid", "non-unique"),
    "enum of 20,000": (_obj(e={"enum": [f"v{i}" for i in range(20_000)]}), {"e": "nope"}, "invalid", "is not one of"),
    "enum of 40,000": (_obj(e={"enum": [f"v{i}" for i in range(40_000)]}), {"e": "nope"}, "refused", "over the limit"),
    "lone surrogate value": (_obj(s={"type": "string", "pattern": "^a", "format": "email"}), {"s": "\ud800"},
                             "invalid", "does not match"),
    "lone surrogate key": ({"type": "object", "patternProperties": {"^\ud800": {"type": "integer"}},
                            "additionalProperties": False}, {"\udfff": 1}, "invalid", "do"),
    "surrogate pattern matches": (_obj(s={"type": "string", "pattern": "\ud800"}), {"s": "x\ud800"}, "valid", ""),
}


def _verdicts(out: Any) -> None:
    """In the child: build each validator (untrusted), validate, report what happened and any URL opened.

    The child imports this module and reads ``SCHEMAS`` itself (a 50,000-deep value cannot be pickled across)."""
    import urllib.request

    from openfunctions.core import ToolDefinitionError
    from openfunctions.core._schema import Validator

    opened: list[str] = []
    real_open = urllib.request.urlopen

    def spy(url: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(getattr(url, "full_url", url)))
        return real_open(url, *args, **kwargs)

    urllib.request.urlopen = spy  # type: ignore[assignment]  # jsonschema's old remote retrieval goes through this
    verdicts = {}
    for name, (schema, value, _, _) in SCHEMAS.items():
        try:
            v = Validator(schema, what="schema", untrusted=True)
        except ToolDefinitionError as exc:
            verdicts[name] = ("refused", exc.message)
            continue
        found = v.violations(value)
        verdicts[name] = ("invalid", "; ".join(f["message"] for f in found)) if found else ("valid", "")
    out.put((verdicts, opened))


def test_hostile_schemas_are_refused_or_validated_within_bounds():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_verdicts, args=(queue,))
    child.start()
    try:
        verdicts, opened = queue.get(timeout=BOUND)
    except Exception:
        child.kill()
        pytest.fail(f"the corpus did not finish within {BOUND:g} s (a schema held the validator)")
    finally:
        child.join(BOUND)
    assert opened == []
    wrong = {name: verdicts[name] for name, (_, _, want, text) in SCHEMAS.items()
             if verdicts[name][0] != want or text not in verdicts[name][1]}
    assert not wrong, wrong


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


JUNK_LINES: dict[str, bytes] = {
    "invalid UTF-8": b"\xff\xfe{not utf-8}\xc0",
    "a lone surrogate escape": b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "\\ud800"}}',
    "not JSON-RPC": b'{"hello": "world"}',
    "an answer to no request": b'{"jsonrpc": "2.0", "id": 987654, "result": {}}',
    "blank and carriage return": b"   \r",
    "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
    "a 4 MiB notification": b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "'
                            + b"x" * (4 * 1024 * 1024) + b'"}}',
}


async def _wire_body(entry: dict[str, Any]) -> dict[str, str]:
    from openfunctions.core import ToolRegistry
    from openfunctions.providers import McpProvider, connect_provider, parse_upstreams

    registry = ToolRegistry()
    connected = await connect_provider(McpProvider(parse_upstreams({"mcpServers": {"h": entry}})[0]), registry)
    outcomes: dict[str, str] = {}
    try:
        health = await connected.health()
        outcomes["mounted"] = f"{health.tools} left_out={health.details.get('tools_left_out')}"
        for i, kind in enumerate([*JUNK_LINES, "endless"]):
            d = await registry.execute_detailed(f"mcp__h__junk_{i}" if kind != "endless" else "mcp__h__endless", {})
            outcomes[kind] = "ok" if d.ok else d.error.code
        fine = await registry.execute_detailed("mcp__h__fine", {})
        outcomes["after"] = "ok" if fine.ok else fine.error.code
    finally:
        await connected.close()
    return outcomes


def test_hostile_upstream_wire(tmp_path: Path):
    tools = [{"name": f"junk_{i}", "inputSchema": {"type": "object"}} for i in range(len(JUNK_LINES))]
    tools += [{"name": "endless", "inputSchema": {"type": "object"}}, {"name": "fine", "inputSchema": {"type": "object"}}]
    spec = {"tools": tools, "generate": 20_000, "endless": ["endless"],
            "lines": {f"junk_{i}": [_b64(line)] for i, line in enumerate(JUNK_LINES.values())}}
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    hostile = Path(__file__).resolve().parents[1] / "providers" / "hostile_server.py"
    entry = {"command": sys.executable, "args": [str(hostile), str(spec_path)], "timeout": 30,
             "maxLineBytes": 8 * 1024 * 1024, "connectTimeout": 45}

    async def bounded() -> dict[str, str]:
        with anyio.fail_after(BOUND * 2):
            return await _wire_body(entry)

    outcomes = anyio.run(bounded)
    assert outcomes["mounted"] == "1000 left_out=19009", outcomes
    for kind in JUNK_LINES:
        assert outcomes[kind] in ("ok", "upstream_lost"), (kind, outcomes[kind])
    assert outcomes["endless"] == "upstream_lost"
    assert outcomes["after"] == "ok"

"""The example tools of the default profile, through the registry (the path every call takes)."""

from __future__ import annotations

import hashlib
import json

import pytest

from openfunctions.core import ToolRegistry
from openfunctions.servers._example_tools import example_tools


@pytest.fixture
def registry(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("abc")
    return ToolRegistry(example_tools(files_root=tmp_path))


@pytest.mark.anyio
async def test_hash_text(registry):
    out = await registry.execute("of_hash_text", {"text": "héllo"})
    assert out == {"algorithm": "sha256", "hex": hashlib.sha256("héllo".encode()).hexdigest(), "bytes": 6}
    b2 = await registry.execute("of_hash_text", {"text": "x", "algorithm": "blake2b"})
    assert b2["hex"] == hashlib.blake2b(b"x").hexdigest()
    bad = await registry.execute_detailed("of_hash_text", {"text": "x", "algorithm": "crc32"})
    assert bad.result.is_error and "algorithm" in bad.result.content[0]["text"]


@pytest.mark.anyio
async def test_json_query(registry):
    value = {"items": [{"name": "a"}, {"name": "b"}], "n": 2}
    doc = json.dumps(value)
    assert (await registry.execute("of_json_query", {"document": doc, "path": "items[-1].name"}))["value"] == "b"
    assert (await registry.execute("of_json_query", {"document": '{"x": [1, 2]}', "path": "x[1]"}))["value"] == 2
    miss = await registry.execute("of_json_query", {"document": doc, "path": "items[5].name"})
    assert miss == {"found": False, "value": None, "stopped_at": "$.items"}
    whole = await registry.execute("of_json_query", {"document": doc})
    assert whole["value"] == value
    bad = await registry.execute_detailed("of_json_query", {"document": "{nope", "path": "a"})
    assert bad.result.is_error and "not JSON text" in bad.result.content[0]["text"]
    assert bad.receipt.certainty == "known"
    # A JSON value instead of text is refused by the schema, naming the parameter (strict clients send text).
    as_value = await registry.execute_detailed("of_json_query", {"document": value})
    assert as_value.result.is_error and "$.document" in as_value.result.content[0]["text"]
    deep = await registry.execute_detailed("of_json_query", {"document": "[" * 100_000 + "]" * 100_000})
    assert deep.result.is_error and "nested too deeply" in deep.result.content[0]["text"]


@pytest.mark.anyio
async def test_now(registry):
    out = await registry.execute("of_now", {"timezone": "Europe/Paris"})
    assert out["utc"].endswith("Z") and out["timezone"] == "Europe/Paris" and "local" in out
    bad = await registry.execute_detailed("of_now", {"timezone": "Mars/Olympus"})
    assert bad.result.is_error and "Mars/Olympus" in bad.result.content[0]["text"]


@pytest.mark.anyio
async def test_list_dir_stays_inside_its_root(registry):
    out = await registry.execute("of_list_dir", {})
    assert out["entries"] == [{"name": "a.txt", "type": "file", "size": 3}, {"name": "sub", "type": "dir", "size": None}]
    escape = await registry.execute_detailed("of_list_dir", {"path": "../.."})
    assert escape.result.is_error and "outside the allowed root" in escape.result.content[0]["text"]


def test_list_dir_only_with_a_root():
    assert "of_list_dir" not in {t.name for t in example_tools()}


def test_annotations_are_honest():
    for t in example_tools():
        assert t.annotations.read_only_hint is True and t.annotations.destructive_hint is False
        assert t.capability.effect == "read"

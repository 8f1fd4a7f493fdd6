"""``state_tool``: the schema ``@tool`` derives, annotations and capability from one word, clean errors."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import Field

from openfunctions.core import ToolRegistry, tool
from openfunctions.core.errors import ToolDocstringInvalid
from openfunctions.store import InvalidKey, StoreError, obj, state_tool

pytestmark = pytest.mark.anyio

OUT = obj({"got": {"type": "object"}}, ["got"], closed=False)
Name = Annotated[str, Field(min_length=1, max_length=8)]


async def notes_put(name: Name, size: Annotated[int, Field(ge=1, le=10)] = 3,
                    mode: Literal["keep", "replace"] | None = None) -> dict[str, Any]:
    """Store a note under a name.

    Args:
        name: the note's name
        size: how big (1-10)
    """
    return {"got": {"name": name, "size": size, "mode": mode}}


def test_the_schema_and_description_are_the_ones_tool_derives():
    st = state_tool("notes_put", kind="write", title="Put a note", tag="notes", output=OUT)(notes_put)
    plain = tool("notes_put", output_schema=OUT)(notes_put)
    assert st.input_schema == plain.input_schema
    assert st.null_as_absent == plain.null_as_absent == {"size", "mode"}
    assert st.description == plain.description == "Store a note under a name."
    props = st.input_schema["properties"]
    assert props["name"] == {"type": "string", "minLength": 1, "maxLength": 8, "description": "the note's name"}
    assert props["size"]["description"] == "how big (1-10)" and props["size"]["maximum"] == 10
    assert st.input_schema["additionalProperties"] is False and st.input_schema["required"] == ["name"]
    assert st.output_schema == OUT
    given = state_tool("notes_put", kind="write", title="t", tag="notes", output=OUT, description="Other.")(notes_put)
    assert given.description == "Other."


@pytest.mark.parametrize(("kind", "annotations", "capability"), [
    ("read", {"readOnlyHint": True}, {"effect": "read", "parallel_safe": True, "idempotent": True}),
    ("write", {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
     {"effect": "write", "parallel_safe": False, "idempotent": True}),
    ("append", {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
     {"effect": "write", "parallel_safe": False, "idempotent": False}),
    ("destroy", {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
     {"effect": "write", "parallel_safe": False, "idempotent": True}),
])
def test_kind_sets_annotations_and_capability(kind, annotations, capability):
    t = state_tool("notes_put", kind=kind, title="Put a note", tag="notes", output=OUT)(notes_put)
    assert t.annotations is not None and t.capability is not None
    assert t.annotations.to_wire() == {"title": "Put a note", **annotations, "openWorldHint": False}
    cap = t.capability.model_dump(include={"effect", "parallel_safe", "idempotent"})
    assert cap == capability
    assert t.tags == ("notes",) and t.title is None


def test_a_bad_docstring_is_refused_at_definition():
    async def wrong(name: str) -> dict[str, Any]:
        """Do it.

        Args:
            nmae: a typo
        """
        return {}

    with pytest.raises(ToolDocstringInvalid) as info:
        state_tool("notes_wrong", kind="read", title="t", tag="notes", output=OUT)(wrong)
    assert info.value.code == "tool_docstring_invalid" and info.value.details["parameter"] == "nmae"


async def test_calls_get_typed_arguments_and_bad_ones_never_reach_the_handler():
    calls: list[dict[str, Any]] = []

    async def record(name: Name, size: Annotated[int, Field(ge=1, le=10)] = 3) -> dict[str, Any]:
        """Record."""
        calls.append({"name": name, "size": size})
        return {"got": calls[-1]}

    reg = ToolRegistry([state_tool("notes_record", kind="append", title="t", tag="notes", output=OUT)(record)])
    assert (await reg.execute("notes_record", {"name": "a"}))["got"] == {"name": "a", "size": 3}
    assert (await reg.execute("notes_record", {"name": "a", "size": None}))["got"]["size"] == 3  # null = default
    for bad in ({"name": "a" * 9}, {"name": ""}, {"name": "a", "size": 11}, {"name": "a", "x": 1}, {}):
        res = await reg.execute_detailed("notes_record", bad)
        assert res.error is not None and res.receipt.outcome == "rejected", bad
    assert len(calls) == 2
    # The registry names the function that defines the tool (not the error-mapping wrapper around it).
    assert reg.source_of("notes_record").endswith("test_calls_get_typed_arguments_and_bad_ones_never_reach_the_handler"
                                                  ".<locals>.record")


@pytest.mark.parametrize(("error", "certainty"), [
    (InvalidKey("that key is empty"), "known"),
    (StoreError("the disk failed mid-write", certainty="unknown"), "unknown"),
])
async def test_a_store_error_becomes_a_tool_error_with_its_certainty(error, certainty):
    async def fail(name: str) -> dict[str, Any]:
        """Fail."""
        raise error

    reg = ToolRegistry([state_tool("notes_fail", kind="write", title="t", tag="notes", output=OUT)(fail)])
    res = await reg.execute_detailed("notes_fail", {"name": "a"})
    assert res.error is not None and res.error.code == error.code and res.error.message == error.message
    assert res.receipt.outcome == "failed" and res.receipt.certainty == certainty


def test_the_state_md_example_runs_and_prints_what_the_page_shows(tmp_path):
    import re
    import subprocess
    import sys
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "STATE.md").read_text("utf-8")
    example = next(b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "@state_tool(" in b)
    shown = next(b for b in re.findall(r"```text\n(.*?)```", doc, re.S) if b.startswith("{'title': 'Save a note'"))
    p = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout == shown

import subprocess
import sys

import pytest
from pydantic import BaseModel

from openfunctions.core import (
    ToolDefinitionError,
    ToolExecutionContext,
    ToolRegistry,
    canonical_json,
    define_tool,
    digest,
    tool,
)


def _noop(params, ctx):
    return {}


@pytest.mark.parametrize("name", ["a", "x" * 128, "of_work.preview-2", "A.B_c-d9"])
def test_valid_names(name):
    assert define_tool(name=name, description="", handler=_noop).name == name


@pytest.mark.parametrize("name", ["", "x" * 129, "has space", "slash/name", "ünï", "semi;colon", None, 5])
def test_invalid_names_are_refused_naming_the_rule(name):
    with pytest.raises(ToolDefinitionError, match="1-128 characters"):
        define_tool(name=name, description="", handler=_noop)


def test_bad_schema_fails_at_definition_time():
    with pytest.raises(ToolDefinitionError, match="not a valid"):
        define_tool(name="t", description="", input_schema={"type": "object", "properties": {"a": {"type": 5}}}, handler=_noop)
    with pytest.raises(ToolDefinitionError, match="unsupported JSON Schema dialect"):
        define_tool(name="t", description="", input_schema={"$schema": "http://example.com/x", "type": "object"}, handler=_noop)
    with pytest.raises(ToolDefinitionError, match="must describe an object"):
        define_tool(name="t", description="", input_schema={"type": "array"}, handler=_noop)


def test_spec_digest_golden_and_independent_of_handler():
    a = define_tool(name="golden", description="d", input_schema={"type": "object", "properties": {"x": {"type": "integer"}}}, handler=_noop)
    b = define_tool(name="golden", description="d", input_schema={"properties": {"x": {"type": "integer"}}, "type": "object"}, handler=lambda p, c: 1)
    assert a.spec_json == '{"description":"d","examples":[],"inputSchema":{"properties":{"x":{"type":"integer"}},"type":"object"},"meta":{},"name":"golden","tags":[]}'
    assert a.spec_sha256 == "sha256:c7695abd9405d4b70534f3805eb3cff364f2eeb0f19a0c105d4afb7bf3bc7f84"
    assert a.spec_sha256 == b.spec_sha256
    c = define_tool(name="golden", description="d2", input_schema=a.input_schema, handler=_noop)
    assert c.spec_sha256 != a.spec_sha256


def test_canonical_digest_golden_across_processes():
    value = {"b": "é", "a": 1, "c": [1.5, True, None]}
    expected = "sha256:4db83fcf39a888d473c5dc92431ad2a817160f006546e469584f59e4c4f0a6a6"
    assert canonical_json(value) == '{"a":1,"b":"é","c":[1.5,true,null]}'
    assert digest(value) == expected
    out = subprocess.run(
        [sys.executable, "-c", "from openfunctions.core import digest; print(digest({'c': [1.5, True, None], 'a': 1, 'b': 'é'}))"],
        capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert out.stdout.strip() == expected


def test_annotations_and_capability_are_in_spec_in_wire_form():
    t = define_tool(
        name="t", description="", handler=_noop,
        annotations={"read_only_hint": True, "open_world_hint": False, "title": "T"},
        capability={"effect": "read", "parallel_safe": True},
        meta={"vendor/x": 1}, tags=["a"],
    )
    spec = t.spec()
    assert spec["annotations"] == {"readOnlyHint": True, "openWorldHint": False, "title": "T"}
    assert spec["capability"]["effect"] == "read" and spec["capability"]["parallel_safe"] is True
    assert spec["meta"] == {"vendor/x": 1}
    assert t.schedule_class == "shared"
    assert define_tool(name="u", description="", handler=_noop).schedule_class == "exclusive"
    with pytest.raises(Exception):
        define_tool(name="t", description="", handler=_noop, capability={"effect": "delete"})


class Point(BaseModel):
    x: int
    y: int = 0


@pytest.mark.anyio
async def test_decorator_derives_schemas_and_passes_context():
    seen = {}

    @tool(tags=["geo"])
    async def shift(p: Point, dx: int, ctx: ToolExecutionContext) -> Point:
        """Shift a point."""
        seen["principal"] = ctx.principal
        return Point(x=p.x + dx, y=p.y)

    assert shift.description == "Shift a point."
    assert shift.input_schema["required"] == ["p", "dx"]
    assert shift.output_schema["type"] == "object" and "x" in shift.output_schema["properties"]
    reg = ToolRegistry([shift])
    out = await reg.execute("shift", {"p": {"x": 1}, "dx": 2}, ToolExecutionContext(principal="alice"))
    assert out == {"x": 3, "y": 0}
    assert seen["principal"] == "alice"


@pytest.mark.anyio
async def test_decorator_wraps_non_object_returns_and_runs_sync_in_thread():
    import threading

    main = threading.get_ident()
    where = {}

    @tool()
    def add(a: int, b: int = 1) -> int:
        where["thread"] = threading.get_ident()
        return a + b

    assert add.output_schema == {"type": "object", "properties": {"result": {"type": "integer"}}, "required": ["result"]}
    d = await ToolRegistry([add]).execute_detailed("add", {"a": 2})
    assert d.result.structured == {"result": 3}
    assert where["thread"] != main


@pytest.mark.anyio
async def test_sync_define_tool_handler_runs_in_worker_thread():
    import threading

    main = threading.get_ident()

    def h(params, ctx):
        return {"same_thread": threading.get_ident() == main}

    t = define_tool(name="h", description="", handler=h)
    assert (await ToolRegistry([t]).execute("h", {})) == {"same_thread": False}


def test_pydantic_model_as_input_schema():
    t = define_tool(name="p", description="", input_schema=Point, handler=_noop)
    assert t.input_schema["properties"]["x"]["type"] == "integer"


def test_bare_decorator_and_call_form_define_the_same_tool():
    @tool
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    def whisper(text: str) -> str:
        """Lower-case a text."""
        return text.lower()

    called = tool(whisper)
    assert isinstance(shout, type(called)) and shout.name == "shout" and called.name == "whisper"
    assert shout.input_schema["required"] == ["text"] and shout.description == "Upper-case a text."


@pytest.mark.anyio
async def test_bare_decorated_tool_runs_through_the_registry():
    @tool
    async def add(a: int, b: int = 1) -> int:
        return a + b

    assert await ToolRegistry([add]).execute("add", {"a": 2}) == {"result": 3}


def test_registering_a_plain_function_names_it_and_the_fix():
    def word_count(text: str) -> int:
        return len(text.split())

    with pytest.raises(ToolDefinitionError) as info:
        ToolRegistry([word_count])
    message = info.value.message
    assert "got function" in message and "word_count" in message and "@tool" in message
    with pytest.raises(ToolDefinitionError, match=r"got int 5"):
        ToolRegistry().register(5)
    with pytest.raises(ToolDefinitionError, match="name must be a string"):
        tool(5)


def test_a_duplicate_name_names_both_sources():
    from openfunctions.core import DuplicateTool, ToolRegistry, define_tool

    def first(params, ctx):
        return {}

    def second(params, ctx):
        return {}

    reg = ToolRegistry()
    reg.register(define_tool(name="dup", description="", handler=first), source="entry point mine (mytools:registry)")
    with pytest.raises(DuplicateTool) as info:
        reg.register(define_tool(name="dup", description="", handler=second), source="--module mytools:registry")
    message = info.value.message
    assert "entry point mine (mytools:registry)" in message and "--module mytools:registry" in message
    assert "first" in message and "second" in message  # the handlers, by module and name
    assert info.value.details["sources"][0].startswith("entry point mine")

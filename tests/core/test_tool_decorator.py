"""``@tool`` reads parameter descriptions from the docstring's ``Args:`` and constraints from ``Annotated``."""

from __future__ import annotations

import threading
from typing import Annotated, Any, Literal

import pytest
from pydantic import AfterValidator, Field

from openfunctions.core import ToolDefinitionError, ToolExecutionContext, ToolRegistry, define_tool, tool
from openfunctions.core.errors import ToolDocstringInvalid

pytestmark = pytest.mark.anyio


def test_docstring_args_describe_parameters_and_leave_the_description():
    @tool
    def search(query: str, limit: int = 20, mode: Literal["hybrid", "text"] | None = None) -> dict[str, Any]:
        """Find the passages that best match a query,
        best first.

        Args:
            query: What to look for.
            limit (int): At most this many results,
                best first.
            mode: Ranking (default: the server's).

        Returns:
            The matches.
        """
        return {}

    assert search.description == "Find the passages that best match a query, best first.\n\nReturns:\n    The matches."
    props = search.input_schema["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    # Optional parameters accept null (define_tool's strict completion), which the executor reads as "absent".
    assert props["limit"] == {"type": ["integer", "null"], "default": 20,
                              "description": "At most this many results, best first."}
    # ``T | None = None`` reads as an optional T: no ``default: null``, no title.
    assert props["mode"] == {"anyOf": [{"enum": ["hybrid", "text"], "type": "string"}, {"type": "null"}],
                             "description": "Ranking (default: the server's)."}
    assert search.input_schema["required"] == ["query"] and search.input_schema["additionalProperties"] is False
    assert "title" not in props["query"]  # no "Query" title derived from the name


def test_list_items_and_indented_lines_keep_their_breaks():
    @tool
    def f(x: int) -> int:
        """Do it:
        - first
        - second
        Example:
            f(1)
        Done.
        """
        return x

    assert f.description == "Do it:\n- first\n- second\nExample:\n    f(1)\nDone."


async def test_annotated_field_constraints_and_descriptions_are_enforced():
    seen: dict[str, Any] = {}

    @tool
    def pick(
        text: Annotated[str, Field(min_length=1, max_length=5, description="from Field")],
        n: Annotated[int, Field(ge=1, le=3)] = 1,
        code: Annotated[str, Field(pattern=r"^[A-Z]$", title="Code")] | None = None,
    ) -> dict[str, Any]:
        """Pick.

        Args:
            text: from the docstring (Field's description wins)
            n: how many
        """
        seen.update(text=text, n=n, code=code)
        return {"ok": True}

    props = pick.input_schema["properties"]
    assert props["text"] == {"type": "string", "minLength": 1, "maxLength": 5, "description": "from Field"}
    assert props["n"] == {"type": ["integer", "null"], "minimum": 1, "maximum": 3, "default": 1,
                          "description": "how many"}
    assert props["code"]["pattern"] == "^[A-Z]$" and props["code"]["title"] == "Code"
    reg = ToolRegistry([pick])
    for bad in ({"text": ""}, {"text": "toolong"}, {"text": "a", "n": 4}, {"text": "a", "n": 0},
                {"text": "a", "code": "ab"}, {"text": "a", "extra": 1}, {}):
        d = await reg.execute_detailed("pick", bad)
        assert d.error is not None and d.error.code == "invalid_params", bad
    assert await reg.execute("pick", {"text": "a", "n": 3, "code": None}) == {"ok": True}
    assert seen == {"text": "a", "n": 3, "code": None}  # a null optional is "absent": its default


def test_an_args_entry_for_a_missing_parameter_is_refused_by_name():
    with pytest.raises(ToolDocstringInvalid) as err:
        @tool
        def greet(name: str) -> str:
            """Greet someone.

            Args:
                name: who
                nmae: a typo
            """
            return name

    assert isinstance(err.value, ToolDefinitionError) and err.value.code == "tool_docstring_invalid"
    assert "'nmae'" in err.value.message and "greet" in err.value.message and "its parameters: name" in err.value.message
    assert err.value.details["parameter"] == "nmae"


def test_a_malformed_or_repeated_args_entry_is_refused():
    with pytest.raises(ToolDocstringInvalid, match="not 'name: description'"):
        @tool
        def a(x: int) -> int:
            """A.

            Args:
                x is a number
            """
            return x

    with pytest.raises(ToolDocstringInvalid, match="describes 'x' twice"):
        @tool
        def b(x: int) -> int:
            """B.

            Args:
                x: one
                x: two
            """
            return x


def test_the_context_parameter_may_be_documented_and_stays_out_of_the_schema():
    @tool
    async def who(ctx: ToolExecutionContext, loud: bool = False) -> str:
        """Who calls.

        Args:
            ctx: the trusted context
            loud: shout
        """
        return str(ctx.principal)

    assert list(who.input_schema["properties"]) == ["loud"]


async def test_every_define_tool_option_passes_through_unchanged():
    options: dict[str, Any] = {
        "title": "Hash", "tags": ("text",), "examples": [{"text": "a"}],
        "annotations": {"read_only_hint": True, "open_world_hint": False},
        "meta": {"team": "core"},
        "capability": {"effect": "write", "idempotent": True, "conflict_keys": ("/text",), "task_support": "optional"},
        "tests": [{"name": "one", "arguments": {"text": "a"}, "expect": {"n": 1}}],
    }
    thread: dict[str, int] = {}

    @tool("hash_it", description="Hash a text.", output_schema=None, blocking=False, **options)
    def hash_it(text: str) -> dict[str, Any]:
        thread["id"] = threading.get_ident()
        return {"n": len(text)}

    plain = define_tool(name="hash_it", description="Hash a text.", handler=lambda p, c: {"n": len(p["text"])},
                        input_schema={"type": "object", "properties": {"text": {"type": "string"}},
                                      "required": ["text"], "additionalProperties": False}, **options)
    assert hash_it.spec() == plain.spec()
    assert [c.name for c in hash_it.tests] == ["one"] and hash_it.schedule_class == "keyed"
    reg = ToolRegistry([hash_it])
    assert await reg.execute("hash_it", {"text": "ab"}) == {"n": 2}
    assert thread["id"] == threading.get_ident()  # blocking=False: called on the event loop's thread


async def test_string_parameters_skip_pydantic_but_keep_defaults_and_validation():
    seen: list[dict[str, Any]] = []

    @tool
    def greet(name: Annotated[str, Field(max_length=8)], style: Literal["plain", "loud"] = "plain",
              note: str | None = None, upper: Annotated[str, AfterValidator(str.upper)] = "x") -> dict[str, Any]:
        """Greet."""
        seen.append({"name": name, "style": style, "note": note, "upper": upper})
        return {}

    @tool
    def shout(name: str, loud: bool = True) -> dict[str, Any]:
        """Shout."""
        seen.append({"name": name, "loud": loud})
        return {}

    reg = ToolRegistry([greet, shout])
    await reg.execute("greet", {"name": "ada", "note": None, "upper": "yes"})
    await reg.execute("shout", {"name": "ada", "loud": None})
    # A validator the schema cannot carry (AfterValidator) still runs: that tool goes through pydantic.
    assert seen == [{"name": "ada", "style": "plain", "note": None, "upper": "YES"}, {"name": "ada", "loud": True}]
    for bad in ({"name": "far too long"}, {"name": "ada", "style": "soft"}, {"name": 5}):
        d = await reg.execute_detailed("greet", bad)
        assert d.error is not None and d.error.code == "invalid_params", bad


def test_the_extending_page_example_prints_what_the_page_shows():
    import re
    import subprocess
    import sys
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "EXTENDING.md").read_text("utf-8")
    example = next(b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "def search_notes(" in b)
    shown = next(b for b in re.findall(r"```text\n(.*?)```", doc, re.S) if b.startswith("Find notes"))
    p = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout == shown

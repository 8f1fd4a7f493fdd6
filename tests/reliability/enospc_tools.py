"""Tools the ENOSPC test serves (``--module enospc_tools:registry``).

``note`` is effectful (a declared write): it appends one line to the file
named by ``$ENOSPC_EFFECTS`` (which lives off the full filesystem), so the
test counts how often the effect really happened. ``look`` is a declared
read (no start record: only its receipt meets the full disk).
"""

from __future__ import annotations

import os

from openfunctions.core import ToolRegistry, define_tool

_TEXT_IN = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def _note(p, ctx):
    with open(os.environ["ENOSPC_EFFECTS"], "a", encoding="utf-8") as f:
        f.write(p["text"] + "\n")
    return {"noted": p["text"]}


def _look(p, ctx):
    return {"seen": p["text"]}


registry = ToolRegistry([
    define_tool(name="note", description="Appends a line to the effects file (an effect the test counts).",
                input_schema=_TEXT_IN, handler=_note, capability={"effect": "write"}),
    define_tool(name="look", description="Answers without any effect.", input_schema=_TEXT_IN, handler=_look,
                capability={"effect": "read", "parallel_safe": True}),
])

"""Tools the engine tests run through the executor (``--module tests.engine.engine_tools``).

Each effect is a line appended to the file named by ``$ENGINE_EFFECTS``, so a test counts how often a
tool really ran, across engine processes and crashes.
"""

from __future__ import annotations

import os
from pathlib import Path

from openfunctions.core import Capability, ToolRegistry, define_tool


def _effect(note: str) -> int:
    path = Path(os.environ["ENGINE_EFFECTS"])
    with path.open("a") as f:
        f.write(note + "\n")
        f.flush()
        os.fsync(f.fileno())
    return len(path.read_text().splitlines())


async def effect(params: dict, ctx) -> dict:
    return {"count": _effect(params.get("note", "effect"))}


async def hold(params: dict, ctx) -> dict:
    """Writes its effect, then waits for ``$ENGINE_RELEASE`` to exist: a test kills the engine meanwhile."""
    n = _effect(params.get("note", "hold"))
    release = Path(os.environ["ENGINE_RELEASE"])
    import anyio

    while not release.exists():
        await anyio.sleep(0.02)
    return {"count": n}



async def noop(params: dict, ctx) -> dict:
    return {"ok": True}


_OBJ = {"type": "object", "properties": {"note": {"type": "string"}}, "additionalProperties": False}
tools = [
    define_tool(name="effect", description="Record one effect.", input_schema=_OBJ, handler=effect),
    define_tool(name="hold", description="Record one effect, then wait.", input_schema=_OBJ, handler=hold),
    define_tool(name="noop", description="Do nothing (a write as far as the executor knows).", input_schema=_OBJ,
                handler=noop),
    define_tool(name="noop_read", description="Do nothing (a reviewed read).", input_schema=_OBJ, handler=noop,
                capability=Capability(effect="read", parallel_safe=True)),
]
registry = ToolRegistry(tools)

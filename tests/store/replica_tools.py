"""Tools the replica tests serve (``--module replica_tools:registry``): one effectful call, one read."""

from __future__ import annotations

import asyncio

from openfunctions.core import ToolRegistry, define_tool


async def _bump(params, ctx):
    await asyncio.sleep(0.005)  # a little work in flight, so a SIGKILL finds calls mid-handler
    return {"n": params.get("n", 0)}


registry = ToolRegistry([
    define_tool(name="bump", description="an effectful call (no declared effect: its start is journaled)",
                input_schema={"type": "object", "properties": {"n": {"type": "integer"}}}, handler=_bump),
])

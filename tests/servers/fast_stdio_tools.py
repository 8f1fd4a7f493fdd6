"""Tools for the stdio reading tests (``--module fast_stdio_tools:registry``): ``threads`` names the server
process's live threads, so a test can see whether stdin is read by a thread or by the event loop."""

from __future__ import annotations

import threading
from typing import Any

from openfunctions.core import ToolRegistry, define_tool


async def _threads(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"names": sorted(t.name for t in threading.enumerate())}


registry = ToolRegistry([
    define_tool(name="threads", description="The names of the server process's live threads.",
                input_schema={"type": "object", "properties": {}}, handler=_threads,
                capability={"effect": "read", "parallel_safe": True, "idempotent": True}),
])

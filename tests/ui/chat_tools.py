"""Tools the chat page test serves (``--module tests.ui.chat_tools``): ``add`` and ``nap``, a call that
runs until it is cancelled (what the page's Stop button is for)."""

from __future__ import annotations

from typing import Any

import anyio

from openfunctions.core import ToolRegistry, define_tool
from tests.chat.fixture_tools import add


async def _nap(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
    await anyio.sleep(120)
    return {"slept": True}


nap = define_tool(name="nap", description="Wait a long time.", input_schema={"type": "object"}, handler=_nap,
                  capability={"effect": "read", "parallel_safe": True})

registry = ToolRegistry([add, nap])

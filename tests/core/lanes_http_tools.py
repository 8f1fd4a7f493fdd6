"""Tools for the over-HTTP lanes test (served by a real ``serve`` subprocess: ``--module lanes_http_tools:registry``).

``rendezvous`` is keyed on ``/repo``. Two calls meet through marker files:
each creates ``<dir>/<me>.in``, waits for ``<other>.in``, then creates
``<me>.saw`` and waits for ``<other>.saw`` — each wait bounded by
``wait_s``. It answers ``together`` only if both phases succeeded, which
needs both handlers inside at once; a call that ran alone answers ``alone``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from openfunctions.core import ToolRegistry, define_tool


async def _wait_for(path: Path, seconds: float) -> bool:
    with anyio.move_on_after(seconds):
        while not path.exists():
            await anyio.sleep(0.01)
        return True
    return False


async def _rendezvous(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    d, me, other, wait_s = Path(params["dir"]), params["me"], params["other"], params["wait_s"]
    (d / f"{me}.in").touch()
    met = await _wait_for(d / f"{other}.in", wait_s)
    if met:
        (d / f"{me}.saw").touch()
        met = await _wait_for(d / f"{other}.saw", wait_s)
    return {"met": "together" if met else "alone"}


registry = ToolRegistry([
    define_tool(
        name="rendezvous",
        description="Meets another call through marker files (a test fixture).",
        input_schema={
            "type": "object",
            "properties": {"repo": {"type": "string"}, "dir": {"type": "string"}, "me": {"type": "string"},
                           "other": {"type": "string"}, "wait_s": {"type": "number"}},
            "required": ["repo", "dir", "me", "other", "wait_s"],
        },
        handler=_rendezvous,
        capability={"effect": "write", "conflict_keys": ["/repo"]},
    ),
])

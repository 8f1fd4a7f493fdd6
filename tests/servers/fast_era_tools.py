"""Tools for the handshake-era fast-path tests (``--module fast_era_tools:registry``): the fixture tools plus two
that use the request's channel — a log notification and a sampling request (the server-to-client back-channel)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixture_tools import factory

from openfunctions.core import ToolRegistry, define_tool


async def _tell(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
    request = ctx.request
    await request.session.send_log_message("info", {"said": p.get("text", "hi")}, related_request_id=request.request_id)
    return {"told": True}


async def _ask(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
    result = await ctx.host.sample(
        {"messages": [{"role": "user", "content": {"type": "text", "text": p.get("question", "2+2?")}}], "maxTokens": 8})
    return {"answer": result["content"]["text"]}


async def _reconnect(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Closes its own SSE stream mid-call (the SDK's ``close_sse_stream``), then goes on once ``<dir>/release`` exists."""
    import anyio

    request = ctx.request
    await request.session.send_log_message("info", "before", related_request_id=request.request_id)
    await request.close_sse_stream()
    release = Path(p["dir"]) / "release"
    while not release.exists():
        await anyio.sleep(0.01)
    await request.session.send_log_message("info", "after", related_request_id=request.request_id)
    return {"reconnected": True}


registry = ToolRegistry([
    *factory(),
    define_tool(name="tell", description="Sends a log notification on its request, then answers.", handler=_tell),
    define_tool(name="ask", description="Asks the client's model (sampling/createMessage), then answers.", handler=_ask),
    define_tool(name="reconnect", description="Closes its SSE stream mid-call, then answers.", handler=_reconnect),
])

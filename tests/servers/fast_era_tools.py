"""Tools for the handshake-era fast-path tests (``--module fast_era_tools:registry``): the fixture tools plus two
that use the request's channel — a log notification and a sampling request (the server-to-client back-channel)."""

from __future__ import annotations

from typing import Any

from fixture_tools import factory

from openfunctions.core import ToolRegistry, define_tool
from openfunctions.servers import REQUEST_CONTEXT_KEY


async def _tell(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
    request = ctx.metadata[REQUEST_CONTEXT_KEY]
    await request.session.send_log_message("info", {"said": p.get("text", "hi")}, related_request_id=request.request_id)
    return {"told": True}


async def _ask(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
    result = await ctx.metadata["openfunctions.sampler"](
        {"messages": [{"role": "user", "content": {"type": "text", "text": p.get("question", "2+2?")}}], "maxTokens": 8})
    return {"answer": result["content"]["text"]}


registry = ToolRegistry([
    *factory(),
    define_tool(name="tell", description="Sends a log notification on its request, then answers.", handler=_tell),
    define_tool(name="ask", description="Asks the client's model (sampling/createMessage), then answers.", handler=_ask),
])

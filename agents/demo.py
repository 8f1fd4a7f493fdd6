"""The agents part of ``openfunctions-mcp demo``: an agent served over MCP answering with the host's model.

:func:`demo_session` starts ``serve --profile agents --module
openfunctions.agents.demo:agents`` as a stdio subprocess and connects the
MCP SDK client in the handshake era (server-initiated sampling needs its
back-channel). The client's sampling callback *plays the host's model*: a
tiny scripted model that asks for the ``count_words`` tool, then answers
with what the tool said. Everything between is real: the agent loop, the
executor, the receipts and the run journal. This module speaks MCP as a
client (imported lazily), which only the demo and tests do in this package.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from openfunctions.core import tool

from ._agent import define_agent


@tool(capability={"effect": "read", "parallel_safe": True, "idempotent": True},
      annotations={"read_only_hint": True, "open_world_hint": False}, output_schema=None)
def count_words(text: Annotated[str, Field(max_length=100000)]) -> dict[str, int]:
    """Count the words of a text"""
    return {"words": len(text.split())}

counter = define_agent(
    "counter",
    "You count words. Use count_words, then answer in one short sentence.",
    tools=[count_words],
    max_rounds=3,
)

agents = [counter]

TEXT = "the quick brown fox jumps over the lazy dog"


async def _host_model(ctx: Any, params: Any) -> Any:
    import mcp_types as types

    last = params.messages[-1].content
    blocks = last if isinstance(last, list) else [last]
    if blocks and blocks[0].type == "tool_result":
        counted = json.loads(blocks[0].content[0].text)["words"]
        return types.CreateMessageResult(role="assistant", model="demo-host-model", stop_reason="endTurn",
                                         content=types.TextContent(type="text", text=f"The text has {counted} words."))
    return types.CreateMessageResultWithTools(
        role="assistant", model="demo-host-model", stop_reason="toolUse",
        content=[types.ToolUseContent(type="tool_use", id="tu_1", name="count_words", input={"text": TEXT})],
    )


async def demo_session(data_dir: Path, say: Callable[[str], None]) -> None:
    """Serve the demo agent and call it once, the client's sampling callback playing the model."""
    import mcp_types as types
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    args = ["-m", "openfunctions.servers", "serve", "--profile", "agents", "--module",
            "openfunctions.agents.demo:agents", "--data-dir", str(data_dir)]
    say("\nagents: an agent served over MCP, thinking with the host's model (MCP sampling)")
    say(f"$ openfunctions-mcp serve --profile agents --module openfunctions.agents.demo:agents --data-dir {data_dir}")
    rounds: list[str] = []

    async def model(context: Any, params: Any) -> Any:
        reply = await _host_model(context, params)
        rounds.append("tool call count_words" if isinstance(reply, types.CreateMessageResultWithTools) else "text")
        return reply

    caps = types.SamplingCapability(tools=types.SamplingToolsCapability())
    async with Client(StdioServerParameters(command=sys.executable, args=args), mode="legacy",
                      sampling_callback=model, sampling_capabilities=caps, read_timeout_seconds=60) as client:
        progress_notes: list[str] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            progress_notes.append(message or str(progress))

        task = f"How many words are in: {TEXT!r}?"
        say(f"  tools/call agent_counter {json.dumps({'task': task})}")
        result = await client.call_tool("agent_counter", {"task": task}, progress_callback=on_progress)
        for i, r in enumerate(rounds, 1):
            say(f"    the host's model, sampling request {i}: answered with {r}")
        for p in progress_notes:
            say(f"    progress: {p}")
        if result.is_error:
            say(f"  isError: {getattr(result.content[0], 'text', '') if result.content else ''}")
            return
        payload = result.structured_content or {}
        receipt = (result.meta or {}).get("dev.openfunctions/receipt", {})
        say(f"  -> {json.dumps(payload)}")
        say(f"  receipt: tool={receipt.get('tool')} outcome={receipt.get('outcome')}")
        record = await client.call_tool("of_run_read", {"run_id": payload.get("run_id", "")})
        run = record.structured_content or {}
        calls = [c for rd in run.get("rounds", []) for c in rd.get("tool_calls", [])]
        say(f"  of_run_read -> status={run.get('status')}, model={run.get('rounds', [{}])[0].get('model')}, "
            f"tool calls: {', '.join(c['name'] + ' [' + c['receipt_id'][:13] + '…]' for c in calls)}")
    say(f"  run records: {Path(data_dir) / 'journal' / 'runs.journal'} (openfunctions-mcp runs list --data-dir {data_dir})")


__all__ = ["agents", "demo_session"]

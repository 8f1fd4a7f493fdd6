"""What an MCP call lends a handler through ``ToolExecutionContext``'s typed slots, through the SDK client in process."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from openfunctions.adapters import Message as ChatMessage
from openfunctions.adapters import SamplingAdapter
from openfunctions.core import ToolRegistry, define_tool
from openfunctions.servers import create_mcp_server

pytestmark = pytest.mark.anyio
READ = {"effect": "read", "parallel_safe": True, "idempotent": True}
OLD_KEYS = ("mcp.request_context", "openfunctions.sampler", "openfunctions.sampling", "openfunctions.task", "protocol_version")


def _registry(seen: list[Any]) -> ToolRegistry:
    async def ask_host(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        seen.append(ctx)
        reply = await ctx.host.sample({"messages": [{"role": "user", "content": {"type": "text", "text": params["q"]}}],
                                       "maxTokens": 20})
        return {"text": reply["content"]["text"], "model": reply["model"], "sampling": dict(ctx.host.sampling or {})}

    async def through_adapter(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        reply = await SamplingAdapter.from_context(ctx).chat([ChatMessage(role="user", content=params["q"])])
        return {"text": reply.text}

    async def whoami(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        seen.append(ctx)
        return {"protocol": ctx.request.protocol_version, "request_id": ctx.request_id,
                "same_request": ctx.request_id == str(ctx.request.request_id), "task": ctx.task is None}

    q = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    return ToolRegistry([
        define_tool(name="ask_host", description="ask the host's model", input_schema=q, handler=ask_host, capability=READ),
        define_tool(name="through_adapter", description="ask via SamplingAdapter", input_schema=q, handler=through_adapter,
                    capability=READ),
        define_tool(name="whoami", description="the raw request", handler=whoami, capability=READ),
    ])


def _host_model(requests: list[Any]) -> Any:
    async def answer(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        requests.append(params)
        asked = params.messages[0].content.text
        return types.CreateMessageResult(role="assistant", model="host-9",
                                         content=types.TextContent(type="text", text=f"echo {asked}"), stop_reason="endTurn")
    return answer


async def test_a_tool_samples_the_host_through_ctx_host_and_no_string_keys_are_written() -> None:
    seen: list[Any] = []
    requests: list[Any] = []
    server = create_mcp_server(_registry(seen), name="t", version="1")
    caps = types.SamplingCapability(tools=types.SamplingToolsCapability())
    async with Client(server.lowlevel, mode="legacy", sampling_callback=_host_model(requests),
                      sampling_capabilities=caps) as client:
        direct = await client.call_tool("ask_host", {"q": "hi"})
        via = await client.call_tool("through_adapter", {"q": "yo"})
    assert direct.structured_content == {"text": "echo hi", "model": "host-9", "sampling": {"tools": {}}}
    assert not via.is_error and via.structured_content == {"text": "echo yo"}
    assert len(requests) == 2
    # metadata is the user's: none of the old string keys is written any more
    assert not any(k in seen[0].metadata for k in OLD_KEYS)


async def test_a_tool_reads_the_raw_request_from_ctx_request() -> None:
    seen: list[Any] = []
    server = create_mcp_server(_registry(seen), name="t", version="1")
    async with Client(server.lowlevel, mode="legacy") as client:
        result = await client.call_tool("whoami", {})
    payload = result.structured_content
    assert payload["protocol"] == seen[0].request.protocol_version and payload["protocol"]
    assert payload["same_request"] is True and payload["task"] is True  # no task support: ctx.task is None


async def test_a_client_without_sampling_gets_a_host_that_says_so() -> None:
    server = create_mcp_server(_registry([]), name="t", version="1")
    async with Client(server.lowlevel, mode="legacy") as client:
        result = await client.call_tool("through_adapter", {"q": "x"})
    assert result.is_error and "does not offer sampling" in result.content[0].text


async def test_outside_mcp_there_is_no_host() -> None:
    registry = _registry([])
    detailed = await registry.execute_detailed("through_adapter", {"q": "x"})
    assert detailed.error is not None and "SamplingUnavailable: no MCP host to sample from" in detailed.error.message


def test_the_docs_example_of_ctx_host_runs() -> None:
    import subprocess
    import sys
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "SERVERS.md").read_text()
    section = doc.split("### What a handler finds in `ctx`", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "42"

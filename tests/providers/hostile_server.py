"""An MCP server (SDK low-level, stdio) that lists and answers whatever a spec file says: a hostile upstream.

Run as ``python hostile_server.py SPEC.json``. The spec::

    {"tools": [<wire Tool objects>],           # listed as given (schemas with $ref, patterns ...)
     "generate": 5000,                         # then tools gen_0 .. gen_4999 (input {"type": "object"})
     "answers": {"<tool>": <CallToolResult>},  # the wire result a call returns (default: text "ok")
     "endless": ["<tool>"],                    # a call writes one line that never ends onto the wire
     "lines": {"<tool>": ["<base64>"]},        # a call writes these raw lines onto the wire, then answers
     "markers": "DIR",                         # a call writes DIR/<tool>.called (its pid inside)
     "wait_for": {"<tool>": "<file>"},         # a call waits until that file exists, then answers
     "prompts": ["<name>"],                    # prompts listed (no arguments)
     "grow": "<tool>"}                         # a call adds tool grown_<n> (listed after "tools") and sends
                                               # tools/list_changed

Cross-process signals are files, written whole (tmp + rename).
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

SPEC = json.loads(Path(sys.argv[1]).read_text())
MARKERS = Path(SPEC["markers"]) if SPEC.get("markers") else None
WIRE = os.dup(1)  # the protocol pipe, before the SDK diverts fd 1 to stderr
grown: list[str] = []


def _mark(name: str, text: str) -> None:
    if MARKERS is None:
        return
    MARKERS.mkdir(parents=True, exist_ok=True)
    tmp = MARKERS / f".{name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, MARKERS / name)


def _tools() -> list[types.Tool]:
    tools = [types.Tool.model_validate(t) for t in SPEC.get("tools", [])]
    tools += [types.Tool(name=n, description="Added by a call.", input_schema={"type": "object"}) for n in grown]
    tools += [types.Tool(name=f"gen_{i}", description=f"Generated tool {i}.", input_schema={"type": "object"})
              for i in range(SPEC.get("generate", 0))]
    return tools


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=_tools())


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    name = params.name
    _mark(f"{name}.called", str(os.getpid()))
    wait = SPEC.get("wait_for", {}).get(name)
    if wait:
        while not Path(wait).exists():
            await anyio.sleep(0.01)
    if name in SPEC.get("endless", ()):
        chunk = b'{"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "' + b"x" * 65536
        while True:  # never a newline: only a closed pipe (the gateway hanging up) stops this
            await anyio.to_thread.run_sync(os.write, WIRE, chunk)
    for line in SPEC.get("lines", {}).get(name, ()):
        os.write(WIRE, base64.b64decode(line) + b"\n")
    if name == SPEC.get("grow"):
        grown.append(f"grown_{len(grown)}")
        await ctx.session.send_tool_list_changed()
    answer = SPEC.get("answers", {}).get(name)
    if answer is not None:
        return types.CallToolResult.model_validate(answer)
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])


async def list_prompts(ctx, params) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=[types.Prompt(name=n, arguments=[]) for n in SPEC.get("prompts", ())])


async def main() -> None:
    server = Server("hostile-upstream", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool,
                    on_list_prompts=list_prompts if SPEC.get("prompts") else None)
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options(NotificationOptions(tools_changed=True)))


if __name__ == "__main__":
    anyio.run(main)

"""A misbehaving-on-demand MCP server (SDK low-level server, stdio) the gateway tests mount.

Run as ``python upstream_server.py DIR`` (stdio), or ``python upstream_server.py DIR
--http PORT`` (streamable HTTP on 127.0.0.1:PORT, path ``/mcp``). Cross-process signals are files in
DIR: a tool writes ``<DIR>/<tool>.started`` when it runs (its pid inside) and
``<DIR>/hang.cancelled`` when the upstream sees a cancellation.

Tools: ``echo`` (structured output with an output schema), ``get weather!``
(a name our tool names do not allow), ``hang`` (waits until cancelled),
``big`` (a reply of N bytes), ``garbage`` (writes a line that is not JSON-RPC
onto the wire, then waits), ``grow`` (adds tool ``extra_<n>`` and sends
``notifications/tools/list_changed``), ``write_note`` (not read-only),
``grow_prompts`` (adds prompt ``extra_prompt_<n>`` and sends
``notifications/prompts/list_changed``).

Prompts: ``greet`` (a required argument ``name``), ``bad prompt!`` (a name
with characters our tool names do not allow), and the ones ``grow_prompts`` adds.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

DIR = Path(sys.argv[1])
HTTP_PORT = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--http" else None
DIR.mkdir(parents=True, exist_ok=True)


def _mark(name: str, text: str) -> None:
    """Write a marker whole: a test polling for it must never read it half-written (empty)."""
    tmp = DIR / f".{name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, DIR / name)
WIRE = os.dup(1)  # the protocol pipe, before the SDK diverts fd 1 to stderr

RO = types.ToolAnnotations(read_only_hint=True)
ECHO_OUT = {"type": "object", "properties": {"echo": {"type": "string"}, "n": {"type": "integer"}}, "required": ["echo"]}

extra: list[str] = []
extra_prompts: list[str] = []


def _tools() -> list[types.Tool]:
    obj = {"type": "object"}
    tools = [
        types.Tool(name="echo", description="Echo a message back, structured.", annotations=RO, output_schema=ECHO_OUT,
                   input_schema={"type": "object", "properties": {"message": {"type": "string"}, "n": {"type": "integer"}},
                                 "required": ["message"], "additionalProperties": False}),
        types.Tool(name="get weather!", description="A tool whose name has a space and a '!'.", annotations=RO,
                   input_schema=obj),
        types.Tool(name="hang", description="Never answers until cancelled.", input_schema=obj),
        types.Tool(name="big", description="A reply of `bytes` bytes.", annotations=RO,
                   input_schema={"type": "object", "properties": {"bytes": {"type": "integer"}}, "required": ["bytes"]}),
        types.Tool(name="garbage", description="Writes a non-JSON-RPC line onto the wire.", input_schema=obj),
        types.Tool(name="grow", description="Adds a tool and announces tools/list_changed.", input_schema=obj),
        types.Tool(name="grow_prompts", description="Adds a prompt and announces prompts/list_changed.", input_schema=obj),
        types.Tool(name="write_note", description="Writes a note file.",
                   annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
                   input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    ]
    tools += [types.Tool(name=n, description="Added by grow.", annotations=RO, input_schema=obj) for n in extra]
    return tools


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=_tools())


def _text(s: str) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=s)]


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    name, args = params.name, params.arguments or {}
    _mark(f"{name.replace(' ', '_').replace('!', '')}.started", str(os.getpid()))
    if name == "echo":
        payload = {"echo": args["message"], "n": args.get("n", 0)}
        return types.CallToolResult(content=_text(f"echo: {args['message']}"), structured_content=payload)
    if name == "get weather!":
        return types.CallToolResult(content=_text("sunny"))
    if name == "hang":
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            _mark("hang.cancelled", "cancelled")
            raise
    if name == "big":
        return types.CallToolResult(content=_text("x" * int(args["bytes"])))
    if name == "garbage":
        os.write(WIRE, b"this is not JSON-RPC {\n")
        await anyio.sleep_forever()
    if name == "grow":
        extra.append(f"extra_{len(extra) + 1}")
        await ctx.session.send_tool_list_changed()
        return types.CallToolResult(content=_text(f"added {extra[-1]}"))
    if name == "grow_prompts":
        extra_prompts.append(f"extra_prompt_{len(extra_prompts) + 1}")
        await ctx.session.send_prompt_list_changed()
        return types.CallToolResult(content=_text(f"added {extra_prompts[-1]}"))
    if name == "write_note":
        _mark("note.txt", args["text"])
        return types.CallToolResult(content=_text("written"))
    if name in extra:
        return types.CallToolResult(content=_text(f"{name} ran"))
    return types.CallToolResult(content=_text(f"unknown tool {name}"), is_error=True)


def _prompts() -> list[types.Prompt]:
    prompts = [
        types.Prompt(name="greet", title="Greeting", description="Greet someone by name.",
                     arguments=[types.PromptArgument(name="name", description="Who to greet", required=True)]),
        types.Prompt(name="bad prompt!", description="A prompt whose name has a space and a '!'.", arguments=[]),
    ]
    return prompts + [types.Prompt(name=n, description="Added by grow_prompts.", arguments=[]) for n in extra_prompts]


async def list_prompts(ctx, params) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=_prompts())


async def get_prompt(ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    args = params.arguments or {}
    if params.name == "greet":
        if "name" not in args:
            from mcp.shared.exceptions import MCPError

            raise MCPError(types.INVALID_PARAMS, "greet needs the argument 'name'")
        text = f"Say hello to {args['name']}, warmly."
    elif params.name in ("bad prompt!", *extra_prompts):
        text = f"the prompt {params.name}"
    else:
        from mcp.shared.exceptions import MCPError

        raise MCPError(types.INVALID_PARAMS, f"no prompt {params.name!r}")
    return types.GetPromptResult(description=f"upstream prompt {params.name}", messages=[
        types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))])


async def main() -> None:
    server = Server("gateway-test-upstream", version="1.0", instructions="A test upstream for the gateway.",
                    on_list_tools=list_tools, on_call_tool=call_tool, on_list_prompts=list_prompts,
                    on_get_prompt=get_prompt)
    if HTTP_PORT is not None:
        import functools

        import uvicorn

        # The HTTP session manager builds the handshake from the default options: advertise listChanged there too.
        server.create_initialization_options = functools.partial(  # type: ignore[method-assign]
            server.create_initialization_options, NotificationOptions(tools_changed=True, prompts_changed=True))
        app = server.streamable_http_app()
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=HTTP_PORT, log_level="warning")).serve()
        return
    async with stdio_server() as (r, w):
        options = server.create_initialization_options(NotificationOptions(tools_changed=True, prompts_changed=True))
        await server.run(r, w, options)


if __name__ == "__main__":
    anyio.run(main)

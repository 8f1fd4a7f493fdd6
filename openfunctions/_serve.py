"""``serve(*tools)``: run tools as an MCP server from a script, the way ``openfunctions-mcp serve`` runs a module.

It does what the command does for ``--module``, with the tools handed over
as objects: stderr logging at ``$OPENFUNCTIONS_LOG_LEVEL`` (stdout belongs to
the protocol on stdio), the per-user data dir (``$OPENFUNCTIONS_MCP_DATA_DIR``
overrides it) holding the execution journal, so every receipt is on disk
before the client sees it, then stdio until the host disconnects, or
streamable HTTP on loopback.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

from openfunctions.core import ConfigurationError, ToolDefinition, ToolRegistry, configure_logging

TRANSPORTS = ("stdio", "http")


def _registry_of(tools: tuple[Any, ...]) -> ToolRegistry:
    if len(tools) == 1 and isinstance(tools[0], ToolRegistry):
        return tools[0]
    if not tools:
        raise ConfigurationError("serve() needs tools: serve(my_tool, ...) or serve(registry)")
    for t in tools:
        if not isinstance(t, ToolDefinition):
            what = "a registry among other tools" if isinstance(t, ToolRegistry) else f"{type(t).__name__} {t!r:.60}"
            raise ConfigurationError(
                f"serve() takes tools made with @tool or define_tool, or one ToolRegistry; got {what}")
    return ToolRegistry(list(tools))


def serve(
    *tools: ToolDefinition | ToolRegistry,
    name: str = "openfunctions-mcp",
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    data_dir: str | os.PathLike[str] | None = None,
    journal: bool = True,
    instructions: str | None = None,
) -> None:
    """Serve ``tools`` (``@tool`` functions, ``define_tool`` results, or one ``ToolRegistry``) until stopped.

    ``transport="stdio"`` (what an MCP host launches) returns when the host
    disconnects; ``"http"`` serves streamable HTTP at ``http://host:port/mcp``
    until Ctrl-C. ``journal=False`` keeps receipts in memory only (nothing is
    written to ``data_dir``). Bad arguments raise ``ConfigurationError`` before
    anything starts.
    """
    if transport not in TRANSPORTS:
        raise ConfigurationError(f"serve(transport={transport!r}): use one of {', '.join(TRANSPORTS)}")
    registry = _registry_of(tools)
    import anyio

    from openfunctions.servers.cli import LOG_LEVEL_ENV, default_data_dir

    configure_logging(os.environ.get(LOG_LEVEL_ENV, "").strip().lower() or "warning")
    journal_dir: Path | None = None
    if journal:
        from openfunctions.servers._journaling import prepare_data_dir

        journal_dir = prepare_data_dir(Path(data_dir).expanduser() if data_dir is not None else default_data_dir())
    anyio.run(partial(_serve, registry, name=name, transport=transport, host=host, port=port,
                      journal_dir=journal_dir, instructions=instructions))


async def _serve(registry: ToolRegistry, *, name: str, transport: str, host: str, port: int,
                 journal_dir: Path | None, instructions: str | None) -> None:
    from openfunctions.servers import __version__, create_mcp_server, run_stdio, serve_http

    server = create_mcp_server(registry, name=name, version=__version__, instructions=instructions,
                               journal_dir=journal_dir)
    if transport == "stdio":
        if sys.stdin.isatty():
            print(f"{name}: serving {len(registry.list())} tool(s) on stdio, waiting for an MCP client on stdin "
                  "(an MCP host launches this script itself). Ctrl-C to quit.", file=sys.stderr, flush=True)
        await run_stdio(server)
    else:
        print(f"{name}: serving {len(registry.list())} tool(s) over streamable HTTP at http://{host}:{port}/mcp",
              file=sys.stderr, flush=True)
        await serve_http(server, host=host, port=port)


__all__ = ["serve"]

"""Running a server: stdio with signal handling (``start_server``).

SIGTERM/SIGINT: stop admitting new calls, let running ones finish within
the server's ``close_timeout``, flush their responses, then end the
connection; the journal is closed on the way out.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import structlog

from openfunctions.core import ToolRegistry

from .server import OpenFunctionsServer, create_mcp_server
from .stdio import DEFAULT_MAX_MESSAGE_BYTES, stdio_transport

log = structlog.get_logger("openfunctions.servers")

# After running calls returned, their responses still pass through the
# dispatcher and the writer; give them a moment before cutting the wire.
_FLUSH_GRACE_S = 0.2


async def watch_signals(server: OpenFunctionsServer, stop: anyio.CancelScope) -> None:
    """On SIGTERM/SIGINT: drain the server, then cancel ``stop``."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("shutdown_signal", signal=signal.Signals(signum).name, in_flight=server.in_flight)
            finished = await server.drain()
            if not finished:
                log.warning("shutdown_timeout", in_flight=server.in_flight)
            await anyio.sleep(_FLUSH_GRACE_S)
            stop.cancel()
            return


async def run_stdio(
    server: OpenFunctionsServer, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, handle_signals: bool = True
) -> None:
    """Serve ``server`` over this process's stdin/stdout until EOF or a shutdown signal, then close it."""
    async with server:
        async with anyio.create_task_group() as tg:

            async def serve() -> None:
                await server.connect(stdio_transport(max_message_bytes=max_message_bytes))
                tg.cancel_scope.cancel()

            tg.start_soon(serve)
            if handle_signals:
                tg.start_soon(watch_signals, server, tg.cancel_scope)


async def start_server(
    registry: ToolRegistry,
    *,
    name: str = "openfunctions-mcp",
    version: str | None = None,
    instructions: str | None = None,
    principal: str | None = None,
    journal_dir: Path | str | None = None,
    profile: str = "tools",
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    **kwargs: Any,
) -> None:
    """Serve ``registry`` over stdio (what an MCP host launches). Returns when the host disconnects."""
    from . import __version__

    server = create_mcp_server(
        registry,
        name=name,
        version=version or __version__,
        instructions=instructions,
        principal=principal,
        journal_dir=journal_dir,
        profile=profile,
        **kwargs,
    )
    await run_stdio(server, max_message_bytes=max_message_bytes)


__all__ = ["start_server", "run_stdio", "watch_signals"]

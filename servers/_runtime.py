"""Running a server: stdio with signal handling (``start_server``).

SIGTERM/SIGINT: stop admitting new calls, let running ones finish within
the server's ``close_timeout``, flush their responses, then end the
connection; the journal is closed on the way out. A second signal cancels
the running calls and ends at once (:class:`~openfunctions.servers.errors.ShutdownForced`).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import anyio
import structlog
from mcp.server.lowlevel.server import lifespan as default_lifespan

from openfunctions.core import ConfigurationError, ToolRegistry

from ._constants import JOURNAL_SYNC_MODES
from ._fast import FastCalls, fast_path_enabled
from ._journaling import ServedJournal, warn_removed_switches
from ._server import OpenFunctionsServer, create_mcp_server
from ._signals import ShutdownWatch
from ._stdio import DEFAULT_MAX_MESSAGE_BYTES, stdio_transport

log = structlog.get_logger("openfunctions.servers")


async def finish_after_eof(server: OpenFunctionsServer, stdout_gone: anyio.Event) -> None:
    """stdin closed (or a shutdown signal): let running calls finish (bounded), unless nobody reads stdout any more."""
    running = server.in_flight
    if running:
        log.info("stdin_closed", in_flight=running)
    async with anyio.create_task_group() as tg:

        async def on_hangup() -> None:
            await stdout_gone.wait()
            log.info("stdout_closed", in_flight=server.in_flight)
            await server.cancel_in_flight()

        tg.start_soon(on_hangup)
        finished = await server.drain()
        tg.cancel_scope.cancel()
    if not finished:
        log.warning("shutdown_timeout", in_flight=server.in_flight)
        await server.cancel_in_flight()


async def run_stdio(
    server: OpenFunctionsServer, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, handle_signals: bool = True,
    fast_path: bool | None = None, journal_sync: str = "loop",
) -> None:
    """Serve ``server`` over this process's stdin/stdout until EOF or a shutdown signal, then close it.

    ``journal_sync``: how a file execution journal makes each record durable (``serve --journal-sync``):
    ``loop`` (the default), the event loop itself, once per loop iteration for all that iteration appended
    (``JournalLog.sync_on_loop``), or ``thread``, the journal's writer thread. For one client that waits for
    each reply, ``loop`` saves the two thread hand-overs around each fsync; ``thread`` keeps the loop free
    while a slow disk (a network file system) syncs (docs/design/journal.md has the measurements).

    ``fast_path``: answer plain 2026-07-28 ``tools/call`` lines directly (``_stdio``); ``None`` reads
    ``OPENFUNCTIONS_FAST_PATH`` (default on). ``OPENFUNCTIONS_JOURNAL_IN_PLACE`` was removed: if set,
    it is ignored with one warning.
    """
    fast = FastCalls.of(server) if (fast_path_enabled() if fast_path is None else fast_path) else None
    if fast is not None and server.lowlevel.lifespan is not default_lifespan:
        fast = None  # the fast path passes the default lifespan's state ({}); a custom one is the SDK's to run
    watch = ShutdownWatch(server)
    warn_removed_switches()
    if journal_sync not in JOURNAL_SYNC_MODES:
        raise ConfigurationError(f"journal_sync must be one of {', '.join(JOURNAL_SYNC_MODES)}, not {journal_sync!r}")
    async with server:
        if isinstance(server.journal, ServedJournal):
            server.journal.sync_on_loop(journal_sync == "loop")
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:

            def force() -> None:
                server.cancel_running()
                tg.cancel_scope.cancel()

            async def serve() -> None:
                transport = stdio_transport(
                    max_message_bytes=max_message_bytes,
                    on_eof=lambda gone: finish_after_eof(server, gone),
                    stop=stop,
                    fast=fast,
                )
                try:
                    await server.connect(transport)
                finally:
                    if fast is not None:
                        log.info("fast_path", transport="stdio", served=fast.served)
                tg.cancel_scope.cancel()

            tg.start_soon(serve)
            if handle_signals:
                tg.start_soon(partial(watch.run, graceful=stop.set, force=force))
    watch.raise_if_forced()


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


__all__ = ["start_server", "run_stdio"]

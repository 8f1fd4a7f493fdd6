"""Shutdown signals for both transports: the first SIGTERM/SIGINT drains, a second one forces.

A forced shutdown cancels the calls still running (their receipts settle
as ``cancelled``) and ends serving at once; the serving function then
raises :class:`~openfunctions.servers.errors.ShutdownForced`, which the
CLI turns into exit status 128 + the signal's number (130 for SIGINT, 143
for SIGTERM), as a shell reports a process ended by that signal.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import structlog

from .errors import ShutdownForced

if TYPE_CHECKING:
    from ._server import OpenFunctionsServer

log = structlog.get_logger("openfunctions.servers")

SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ShutdownWatch:
    """Watches SIGTERM/SIGINT for one serving run; remembers whether the shutdown was forced."""

    def __init__(self, server: OpenFunctionsServer) -> None:
        self._server = server
        self.forced_by: signal.Signals | None = None
        self.cancelled = 0

    async def run(self, *, graceful: Callable[[], object], force: Callable[[], object]) -> None:
        """First signal: call ``graceful()``. A second one: call ``force()`` and return."""
        with anyio.open_signal_receiver(*SHUTDOWN_SIGNALS) as signals:
            first = True
            async for signum in signals:
                sig = signal.Signals(signum)
                in_flight = self._server.in_flight
                if first:
                    first = False
                    log.info("shutdown_signal", signal=sig.name, in_flight=in_flight)
                    graceful()
                    continue
                log.warning("shutdown_forced", signal=sig.name, in_flight=in_flight)
                self.forced_by, self.cancelled = sig, in_flight
                force()
                return

    def raise_if_forced(self) -> None:
        if self.forced_by is not None:
            raise ShutdownForced(self.forced_by, self.cancelled)

"""Which event loop and which HTTP/1.1 parser ``serve`` runs on: ``--loop`` and ``--http``.

``--http auto`` (the default) picks httptools (llhttp, C; a dependency) over
h11 (pure Python) when it is installed, as uvicorn's own ``auto`` does, and
falls back to h11 where it is missing; both HTTP protocols carry the same
connection guards (``_http_guard``).

``--loop`` is ``asyncio`` by default; ``uvloop`` (libuv) is an opt-in for a
process that has it installed (the ``uvloop`` extra), not a default: under
1,000 concurrent clients it stopped accepting new connections for as long
as the accepted ones kept it busy (a third of them waited ~5 s for their
first reply), for a CPU gain within the noise once httptools is in.
Naming a missing implementation is a configuration error that says so.
docs/SERVERS.md, "Event loop", has the measurements.

Kept light (no uvicorn or core import at module level) so that ``--help``
stays fast and the CLI can resolve the choice before it starts the loop.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

LOOPS = ("asyncio", "uvloop")
HTTP_PARSERS = ("auto", "httptools", "h11")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _uvloop_available() -> bool:
    return sys.platform != "win32" and _installed("uvloop")


def resolve_loop(choice: str) -> str:
    """``choice`` itself, checked: :class:`ConfigurationError` if it is ``uvloop`` and uvloop is missing."""
    from openfunctions.core.errors import ConfigurationError

    if choice not in LOOPS:
        raise ConfigurationError(f"--loop must be one of {', '.join(LOOPS)}, got {choice!r}")
    if choice == "uvloop" and not _uvloop_available():
        raise ConfigurationError(
            "--loop uvloop: the uvloop package is not installed here (it has wheels for Linux and macOS: "
            "`pip install 'openfunctions-mcp[uvloop]'`); use --loop asyncio, the default"
        )
    return choice


def resolve_http_parser(choice: str) -> str:
    """``httptools`` or ``h11`` for ``--http choice``; :class:`ConfigurationError` if ``httptools`` is named but missing."""
    from openfunctions.core.errors import ConfigurationError

    if choice not in HTTP_PARSERS:
        raise ConfigurationError(f"--http must be one of {', '.join(HTTP_PARSERS)}, got {choice!r}")
    if choice == "auto":
        return "httptools" if _installed("httptools") else "h11"
    if choice == "httptools" and not _installed("httptools"):
        raise ConfigurationError(
            "--http httptools: the httptools package is not installed here (`pip install httptools`); "
            "use --http h11 or --http auto"
        )
    return choice


def backend_options(loop: str) -> dict[str, Any]:
    """``anyio.run``'s ``backend_options`` for a resolved ``loop``."""
    return {"use_uvloop": loop == "uvloop"}


__all__ = ["LOOPS", "HTTP_PARSERS", "resolve_loop", "resolve_http_parser", "backend_options"]

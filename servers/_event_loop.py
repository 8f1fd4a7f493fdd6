"""Which event loop and which HTTP/1.1 parser ``serve`` runs on: ``--loop`` and ``--http``.

``auto`` (the default of both) picks the faster implementation when it is
installed, as uvicorn's own ``auto`` does: uvloop (libuv, C) over asyncio's
pure-Python selector loop, httptools (llhttp, C) over h11 (pure Python). Both
are dependencies where they have wheels (uvloop: Linux and macOS, CPython);
where one is missing, ``auto`` falls back to asyncio / h11 and naming it
explicitly is a configuration error that says so. Both HTTP protocols carry
the same connection guards (``_http_guard``). docs/SERVERS.md, "Event loop",
has the measurements behind the defaults.

Kept light (no uvicorn or core import at module level) so that ``--help``
stays fast and the CLI can resolve the choice before it starts the loop.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

LOOPS = ("auto", "asyncio", "uvloop")
HTTP_PARSERS = ("auto", "httptools", "h11")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _uvloop_available() -> bool:
    return sys.platform != "win32" and _installed("uvloop")


def resolve_loop(choice: str) -> str:
    """``asyncio`` or ``uvloop`` for ``--loop choice``; :class:`ConfigurationError` if ``uvloop`` is named but missing."""
    from openfunctions.core.errors import ConfigurationError

    if choice not in LOOPS:
        raise ConfigurationError(f"--loop must be one of {', '.join(LOOPS)}, got {choice!r}")
    if choice == "auto":
        return "uvloop" if _uvloop_available() else "asyncio"
    if choice == "uvloop" and not _uvloop_available():
        raise ConfigurationError(
            "--loop uvloop: the uvloop package is not installed here (it has wheels for Linux and macOS: "
            "`pip install uvloop`); use --loop asyncio or --loop auto"
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

"""Errors of the MCP server layer (rooted in ``OpenFunctionsError``).

These are the project's errors, each with a stable ``code`` string. The
JSON-RPC error *numbers* on the wire are the SDK's own constants
(``from mcp_types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, ...``),
imported where they are sent and never redefined here or elsewhere; the one
number the SDK no longer names, the handshake-era ``-32002`` (resource not
found), stays a named constant in ``server.py``.
"""

from __future__ import annotations

import signal

from openfunctions.core import AuthConfigError  # defined beside the token reader in core, re-exported here
from openfunctions.core.errors import ConfigurationError, OpenFunctionsError


class ServerError(OpenFunctionsError):
    code = "server_error"


class ProfileUnavailable(ServerError):
    """A profile exists in the plan but its package is not installed/built yet."""

    code = "profile_unavailable"


class ToolLoadError(ConfigurationError):
    """``--module`` or an ``openfunctions.tools`` entry point did not yield tools."""

    code = "tool_load_failed"


class DataDirUnusable(ConfigurationError):
    """The data dir is a file, cannot be created, or does not take a written and fsynced file (read-only, full, no permission)."""

    code = "data_dir_unusable"


class DataDirLocked(ServerError):
    """Every journal slot of a profile in a data dir is held by another live server."""

    code = "data_dir_locked"


class ShutdownForced(ServerError):
    """A second SIGTERM/SIGINT arrived during a graceful shutdown: running calls were cancelled, not finished.

    ``signum`` is the signal that forced it; the CLI exits with ``128 + signum``.
    """

    code = "shutdown_forced"

    def __init__(self, signum: int, cancelled: int) -> None:
        name = signal.Signals(signum).name
        super().__init__(
            f"shutdown forced by a second {name}: {cancelled} running call(s) cancelled",
            details={"signal": name, "cancelled": cancelled},
        )
        self.signum = int(signum)


__all__ = ["ServerError", "ProfileUnavailable", "ToolLoadError", "AuthConfigError", "DataDirLocked", "DataDirUnusable", "ShutdownForced"]

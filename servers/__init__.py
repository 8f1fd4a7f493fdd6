"""openfunctions.servers: MCP servers over the openfunctions executor.

``create_mcp_server(registry, name=, version=)`` builds a thin MCP host on
the official SDK's low-level server; ``start_server`` serves it over stdio;
``serve_http`` over streamable HTTP; ``openfunctions-mcp`` is the command.
"""

from importlib.metadata import PackageNotFoundError, version as _dist_version

try:
    __version__ = _dist_version("openfunctions-mcp")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0.0.0"

from .errors import AuthConfigError, DataDirLocked, ProfileUnavailable, ServerError, ToolLoadError
from .http import create_http_app, serve_http
from .runtime import run_stdio, start_server
from .server import RECEIPT_META_KEY, REQUEST_CONTEXT_KEY, OpenFunctionsServer, create_mcp_server
from .stdio import stdio_transport

__all__ = [
    "AuthConfigError", "DataDirLocked", "OpenFunctionsServer", "ProfileUnavailable", "RECEIPT_META_KEY",
    "REQUEST_CONTEXT_KEY", "ServerError", "ToolLoadError", "__version__", "create_http_app", "create_mcp_server",
    "run_stdio", "serve_http", "start_server", "stdio_transport",
]

"""openfunctions.servers: MCP servers over the openfunctions executor.

``create_mcp_server(registry, name=, version=)`` builds a thin MCP host on
the official SDK's low-level server; ``start_server`` serves it over stdio;
``serve_http`` over streamable HTTP; ``openfunctions-mcp`` is the command.

Names are imported lazily (PEP 562) so that ``openfunctions-mcp --help``
does not pay for importing the MCP SDK.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version
from typing import Any

try:
    __version__ = _dist_version("openfunctions-mcp")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0.0.0"

_EXPORTS = {
    "AuthConfigError": ".errors",
    "DataDirLocked": ".errors",
    "ProfileUnavailable": ".errors",
    "ServerError": ".errors",
    "ShutdownForced": ".errors",
    "ToolLoadError": ".errors",
    "MemoryEventStore": "._event_store",
    "create_http_app": "._http",
    "serve_http": "._http",
    "run_stdio": "._runtime",
    "start_server": "._runtime",
    "RECEIPT_META_KEY": "._constants",
    "REQUEST_CONTEXT_KEY": "._server",
    "OpenFunctionsServer": "._server",
    "create_mcp_server": "._server",
    "stdio_transport": "._stdio",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'openfunctions.servers' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

"""Errors of the context providers and the MCP gateway (rooted in ``OpenFunctionsError``)."""

from __future__ import annotations

from typing import Any

from openfunctions.core import ConfigurationError, OpenFunctionsError


class ProviderError(OpenFunctionsError):
    # "context_" keeps these apart from the model providers' errors (openfunctions.adapters: provider_*)
    code = "context_provider_error"


class ProviderUnavailable(ProviderError):
    """A provider (or profile part) cannot be offered: what is missing is named in the message.

    The server's ``all`` profile logs it and leaves the gateway out.
    """

    code = "context_provider_unavailable"


class UpstreamConfigError(ConfigurationError):
    """An ``mcpServers`` file or entry is malformed; the message names the file, server and key."""

    code = "upstream_config_invalid"


class UpstreamUnavailable(ProviderError):
    """An upstream MCP server could not be reached (down at start, or in its reconnect backoff).

    Nothing was sent to it: a call refused with this error had no effect.
    """

    code = "upstream_unavailable"


class UpstreamError(ProviderError):
    """An upstream refused a request or did not answer in time (outside a tool call, where a
    :class:`~openfunctions.core.ToolError` carries the same codes): ``upstream_error``,
    ``upstream_timeout``, ``upstream_unknown_prompt``."""

    code = "upstream_error"

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details=details)
        if code is not None:
            self.code = code


__all__ = ["ProviderError", "ProviderUnavailable", "UpstreamConfigError", "UpstreamError", "UpstreamUnavailable"]

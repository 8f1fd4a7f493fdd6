"""Errors of the context providers and the MCP gateway (rooted in ``OpenFunctionsError``)."""

from __future__ import annotations

from openfunctions.core import ConfigurationError, OpenFunctionsError


class ProviderError(OpenFunctionsError):
    code = "provider_error"


class ProviderUnavailable(ProviderError):
    """A provider (or profile part) cannot be offered: what is missing is named in the message.

    The server's ``all`` profile logs it and leaves the gateway out.
    """

    code = "profile_unavailable"


class UpstreamConfigError(ConfigurationError):
    """An ``mcpServers`` file or entry is malformed; the message names the file, server and key."""

    code = "upstream_config_invalid"


class UpstreamUnavailable(ProviderError):
    """An upstream MCP server could not be reached (down at start, or in its reconnect backoff).

    Nothing was sent to it: a call refused with this error had no effect.
    """

    code = "upstream_unavailable"


__all__ = ["ProviderError", "ProviderUnavailable", "UpstreamConfigError", "UpstreamUnavailable"]

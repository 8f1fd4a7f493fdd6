"""Errors of the MCP server layer (rooted in ``OpenFunctionsError``)."""

from __future__ import annotations

from openfunctions.core.errors import ConfigurationError, OpenFunctionsError


class ServerError(OpenFunctionsError):
    code = "server_error"


class ProfileUnavailable(ServerError):
    """A profile exists in the plan but its package is not installed/built yet."""

    code = "profile_unavailable"


class ToolLoadError(ConfigurationError):
    """``--module`` or an ``openfunctions.tools`` entry point did not yield tools."""

    code = "tool_load_failed"


class AuthConfigError(ConfigurationError):
    """The HTTP bearer token could not be read (missing env var, unreadable/empty file)."""

    code = "auth_config_invalid"


class DataDirLocked(ServerError):
    """Every journal slot of a profile in a data dir is held by another live server."""

    code = "data_dir_locked"


__all__ = ["ServerError", "ProfileUnavailable", "ToolLoadError", "AuthConfigError", "DataDirLocked"]

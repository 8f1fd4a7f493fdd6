"""The engine's errors (codes are stable; a client branches on ``code``)."""

from __future__ import annotations

from openfunctions.core import OpenFunctionsError


class EngineError(OpenFunctionsError):
    code = "engine_error"


class EngineConfigError(EngineError):
    """A command line or configuration the engine cannot start with (a bad model spec, tools module, script)."""

    code = "engine_config_invalid"


class SessionNotFound(EngineError):
    code = "engine_session_not_found"


class SessionInvalid(EngineError):
    """A session id that is not one (it names a file: letters, digits, ``_`` and ``-`` only)."""

    code = "engine_session_invalid"


class SessionCorrupt(EngineError):
    """A session stream whose records do not fold (a record out of place, a field of the wrong type)."""

    code = "engine_session_corrupt"


class BadCommand(EngineError):
    """A line on stdin that is not a command (not JSON, not an object, unknown type, a missing field)."""

    code = "engine_bad_command"


class VerdictInvalid(EngineError):
    """A review's verdict is not JSON, or not valid against the verdict schema."""

    code = "engine_verdict_invalid"


__all__ = ["BadCommand", "EngineConfigError", "EngineError", "SessionCorrupt", "SessionInvalid", "SessionNotFound",
           "VerdictInvalid"]

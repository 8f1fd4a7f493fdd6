"""The error hierarchy of openfunctions.

Every error carries a stable machine-readable ``code`` (never renamed once
released: clients and journals store it) and a message that names what was
wrong. Packages above ``core`` subclass these; they never invent a parallel
root. ``details`` holds JSON-safe extra facts (violations, candidates, pids).
"""

from __future__ import annotations

from typing import Any, Literal


class OpenFunctionsError(Exception):
    """Root of every error this project raises on purpose."""

    code: str = "openfunctions_error"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class ToolDefinitionError(OpenFunctionsError):
    """A tool definition is malformed (bad name, bad schema, duplicate)."""

    code = "tool_definition_invalid"


class DuplicateTool(ToolDefinitionError):
    code = "tool_duplicate"


class ToolDocstringInvalid(ToolDefinitionError):
    """A ``@tool`` function's docstring ``Args:`` section is malformed or describes a parameter the
    function does not have (``details``: ``tool``, and ``parameter`` or ``line``)."""

    code = "tool_docstring_invalid"


class ToolNotFound(OpenFunctionsError):
    code = "tool_not_found"


class InvalidParams(OpenFunctionsError):
    """Parameters failed the tool's JSON Schema; ``details['violations']`` lists each."""

    code = "invalid_params"


class NonJsonValue(OpenFunctionsError):
    """A value that has no JSON form (NaN, a cycle, bytes, an object)."""

    code = "non_json_value"


class InvalidOutput(OpenFunctionsError):
    """A handler's result failed the tool's output schema (the effect may have happened)."""

    code = "invalid_output"


class PolicyDenied(OpenFunctionsError):
    code = "policy_denied"


class AdmissionRefused(OpenFunctionsError):
    """The scheduler refused to admit a call (e.g. a read reservation asked to write)."""

    code = "admission_refused"


class ExecutionCancelled(OpenFunctionsError):
    code = "cancelled"


class ToolFailed(OpenFunctionsError):
    """A handler raised. ``details['exception']`` names the exception type."""

    code = "tool_failed"


class ToolError(OpenFunctionsError):
    """Raised *by a handler* to report a clean, expected failure to the caller.

    The message reaches the model as is. Certainty stays ``unknown`` unless
    the handler passes ``effect_happened=False``: only the handler knows
    whether it changed anything before failing. ``refused=True`` (which
    implies ``effect_happened=False``) says the handler turned the call down
    before doing anything (a precondition, a contradiction in its arguments):
    the receipt is then ``rejected``/``known``, like a refusal by the executor,
    with ``handler_started`` true telling the two apart.
    """

    code = "tool_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        effect_happened: bool | None = None,
        refused: bool = False,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, details=details)
        if code:
            self.code = code
        if refused and effect_happened:
            raise ValueError("ToolError(refused=True) means nothing ran: effect_happened cannot be true")
        self.refused = refused
        self.effect_happened = False if refused else effect_happened


class UnsafePath(OpenFunctionsError):
    """A path we would open or create is a symlink, the wrong kind, someone else's, or
    accessible to group or others (``details``: ``path``, ``reason``). The packages'
    own ``*Unsafe`` errors subclass it, so one ``except UnsafePath`` catches them all."""

    code = "path_unsafe"


class JournalError(OpenFunctionsError):
    code = "journal_error"


class JournalLocked(JournalError):
    code = "journal_locked"


class JournalCorrupt(JournalError):
    code = "journal_corrupt"


class JournalUnsafe(JournalError, UnsafePath):
    """A journal path is a symlink, has the wrong mode or owner."""

    code = "journal_unsafe"


class JournalFailed(JournalError):
    """An earlier write or fsync failed; the journal refuses writes until reopened."""

    code = "journal_failed"


class ReceiptPersistenceFailed(JournalError):
    code = "receipt_persistence_failed"


__all__ = [
    "OpenFunctionsError",
    "ToolDefinitionError",
    "DuplicateTool",
    "ToolDocstringInvalid",
    "ToolNotFound",
    "InvalidParams",
    "NonJsonValue",
    "InvalidOutput",
    "PolicyDenied",
    "AdmissionRefused",
    "ExecutionCancelled",
    "ToolFailed",
    "ToolError",
    "UnsafePath",
    "JournalError",
    "JournalLocked",
    "JournalCorrupt",
    "JournalUnsafe",
    "JournalFailed",
    "ReceiptPersistenceFailed",
]


class ConfigurationError(OpenFunctionsError):
    """The runtime was assembled wrongly (e.g. governed mode without a policy)."""

    code = "configuration_invalid"


__all__.append("ConfigurationError")


class ConflictKeysInvalid(AdmissionRefused):
    """A call's conflict keys could not be computed: the tool's ``conflict_key_fn``
    raised or returned something other than a bounded iterable of strings, or a
    key is too long (``details``: ``tool``, ``reason``). Refused before anything ran."""

    code = "conflict_keys_invalid"


class KeyLocksFailed(AdmissionRefused):
    """The cross-replica key locks (``ToolExecutor.key_locks``) failed to grant a
    call's keys (``details``: ``keys``, ``cause``). Refused before anything ran."""

    code = "key_locks_failed"


class ExecutionStageFailed(OpenFunctionsError):
    """A stage of the executor raised something that is not an error of this project
    (e.g. a validator's ``RecursionError``, a result too large to print). The call is
    still settled with a receipt (``details``: ``stage``, ``exception``)."""

    code = "execution_stage_failed"


__all__ += ["ConflictKeysInvalid", "KeyLocksFailed", "ExecutionStageFailed"]


class PersistenceError(OpenFunctionsError):
    """A store or database failure. ``certainty`` says whether a failed write may have happened: ``"known"``
    (nothing was written) or ``"unknown"`` (the disk or the database failed mid-write: read before retrying).
    The key-value store's errors and the PostgreSQL components' (``core.postgres``) share it."""

    code = "persistence_error"
    certainty: Literal["known", "unknown"] = "known"

    def __init__(self, message: str, *, certainty: Literal["known", "unknown"] | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details=details)
        if certainty is not None:
            self.certainty = certainty

    @property
    def effect_happened(self) -> bool | None:
        """``False`` when nothing was written, ``None`` when nobody can tell."""
        return False if self.certainty == "known" else None


__all__ += ["PersistenceError"]

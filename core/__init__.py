"""openfunctions.core: tool definitions, registry, the validating executor.

The one path: ``ToolDefinition -> ToolRegistry -> ToolExecutor -> host``.

Every public name is re-exported here, once; other packages import from
``openfunctions.core`` (and the public modules ``openfunctions.core.errors``,
``openfunctions.core.files`` and the ``openfunctions.core.journal``
subpackage), never from an implementation module.
"""

from ._asgi_auth import PRINCIPAL_SCOPE_KEY, AuthConfigError, BearerAuth, read_auth_token
from ._background import run_every, stop_task
from ._canonical import canonical_bytes, canonical_json, check_json, digest, to_utf8
from ._context import HostChannel, ProgressReporter, TaskChannel, ToolExecutionContext, WorkGrant, with_child_execution
from ._dsn import DATABASE_URL_ENV, database_url_from_env, redact_dsn
from ._imports import import_spec, search_current_dir
from ._logging import configure_logging
from ._policy import AllowAllPolicy, Policy, PolicyDecision, ScopePolicy
from ._providers import to_anthropic, to_gemini, to_openai
from ._receipts import Receipt, StartRecord
from ._registry import ToolRegistry
from ._result import DetailedResult, ToolResult, pretty_json
from ._scheduler import DEFAULT_MAX_PARALLEL_WRITES, Admission, KeyLocks, Reservation, Scheduler
from ._schema import Validator, accepts_null, complete_strict_schema, strict_violations
from ._sink import ExecutionObserver, FanoutSink, MemoryJournalSink
from ._stamps import new_id, utc_timestamp
from ._tool import TOOL_NAME_RE, Capability, ToolAnnotations, ToolDefinition, define_tool, tool
from ._tool_tests import ToolTest, ToolTestResult, run_tool_tests
from .errors import (
    AdmissionRefused,
    ConfigurationError,
    ConflictKeysInvalid,
    DuplicateTool,
    ExecutionCancelled,
    ExecutionStageFailed,
    InvalidOutput,
    InvalidParams,
    JournalCorrupt,
    JournalError,
    JournalFailed,
    JournalLocked,
    JournalUnsafe,
    KeyLocksFailed,
    NonJsonValue,
    OpenFunctionsError,
    PolicyDenied,
    ReceiptPersistenceFailed,
    ToolDefinitionError,
    ToolError,
    ToolFailed,
    ToolNotFound,
    UnsafePath,
)
from .executor import ToolExecutor

__all__ = [
    "import_spec", "search_current_dir", "redact_dsn", "DATABASE_URL_ENV", "database_url_from_env", "run_every", "stop_task",
    "PRINCIPAL_SCOPE_KEY", "AuthConfigError", "BearerAuth", "read_auth_token",
    "TOOL_NAME_RE", "Admission", "ConflictKeysInvalid", "DEFAULT_MAX_PARALLEL_WRITES", "ExecutionStageFailed",
    "KeyLocks", "KeyLocksFailed", "AdmissionRefused", "AllowAllPolicy", "Capability", "ConfigurationError", "DetailedResult",
    "DuplicateTool", "ExecutionCancelled", "ExecutionObserver", "FanoutSink", "InvalidOutput",
    "InvalidParams", "JournalCorrupt", "JournalError", "JournalFailed", "JournalLocked", "JournalUnsafe",
    "MemoryJournalSink", "NonJsonValue", "OpenFunctionsError", "Policy", "PolicyDecision", "PolicyDenied",
    "ProgressReporter", "Receipt", "ReceiptPersistenceFailed", "Reservation", "Scheduler", "ScopePolicy",
    "StartRecord", "ToolAnnotations", "ToolDefinition", "ToolDefinitionError", "ToolError",
    "ToolExecutionContext", "ToolExecutor", "ToolFailed", "ToolNotFound", "ToolRegistry", "ToolResult",
    "UnsafePath", "Validator", "accepts_null", "canonical_bytes", "canonical_json", "check_json", "complete_strict_schema",
    "configure_logging", "define_tool", "digest", "new_id", "pretty_json", "strict_violations", "to_anthropic", "to_gemini",
    "to_openai", "to_utf8", "tool", "utc_timestamp", "with_child_execution",
    "ToolTest", "ToolTestResult", "run_tool_tests",
    "HostChannel", "TaskChannel", "WorkGrant",
]

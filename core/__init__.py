"""openfunctions.core: tool definitions, registry, the validating executor.

The one path: ``ToolDefinition -> ToolRegistry -> ToolExecutor -> host``.
"""

from ._logging import configure_logging
from .canonical import canonical_bytes, canonical_json, check_json, digest
from .context import ProgressReporter, ToolExecutionContext, with_child_execution
from .errors import (
    AdmissionRefused,
    ConfigurationError,
    DuplicateTool,
    ExecutionCancelled,
    InvalidOutput,
    InvalidParams,
    JournalCorrupt,
    JournalError,
    JournalFailed,
    JournalLocked,
    JournalUnsafe,
    NonJsonValue,
    OpenFunctionsError,
    PolicyDenied,
    ReceiptPersistenceFailed,
    ToolDefinitionError,
    ToolError,
    ToolFailed,
    ToolNotFound,
)
from .executor import ToolExecutor
from .policy import AllowAllPolicy, Policy, PolicyDecision, ScopePolicy
from .receipts import Receipt, StartRecord, new_id, utc_now
from .registry import ToolRegistry
from .result import DetailedResult, ToolResult
from .scheduler import Reservation, Scheduler
from .sink import ExecutionJournalSink, FanoutSink, MemoryJournalSink
from .tool import Capability, ToolAnnotations, ToolDefinition, define_tool, tool

__all__ = [
    "AdmissionRefused", "AllowAllPolicy", "Capability", "ConfigurationError", "DetailedResult",
    "DuplicateTool", "ExecutionCancelled", "ExecutionJournalSink", "FanoutSink", "InvalidOutput",
    "InvalidParams", "JournalCorrupt", "JournalError", "JournalFailed", "JournalLocked", "JournalUnsafe",
    "MemoryJournalSink", "NonJsonValue", "OpenFunctionsError", "Policy", "PolicyDecision", "PolicyDenied",
    "ProgressReporter", "Receipt", "ReceiptPersistenceFailed", "Reservation", "Scheduler", "ScopePolicy",
    "StartRecord", "ToolAnnotations", "ToolDefinition", "ToolDefinitionError", "ToolError",
    "ToolExecutionContext", "ToolExecutor", "ToolFailed", "ToolNotFound", "ToolRegistry", "ToolResult",
    "canonical_bytes", "canonical_json", "check_json", "configure_logging", "define_tool", "digest",
    "new_id", "tool", "utc_now", "with_child_execution",
]

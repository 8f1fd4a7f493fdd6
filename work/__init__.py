"""openfunctions.work: bounded, durable work attempts under an operator's catalog and grants.

- catalog side: :class:`Catalog` (the operator's TOML steps), :func:`create_step_tools`
  (``of_step.*`` / ``of_oracle.*``), :class:`GrantStore` / :class:`Grant`, :class:`Authority`
  (checked at every effect), verification proofs (:func:`create_proof`, :func:`check_completion`);
- controller side: :class:`WorkController` (the seven lifecycle commands over one
  selected attempt), its custody (lease, fenced journal appends, renewal; :class:`CustodyProtocol`),
  the one fold (:mod:`.records` builds every record, :meth:`WorkState.apply` applies it, live
  and at replay), :class:`LeaseStore`, where the durable state lives (:class:`WorkBackend`:
  :class:`LeaseBackend`, :class:`AttemptLog`, :class:`GrantBackend`; :func:`file_backend` by default), the attempt states, one injectable :class:`Clock`, the
  operator's resolutions (:class:`ResolutionInbox`), the ``of_work_*`` tools
  (:func:`create_work_tools`) and the server profile (:func:`build_work_profile`).

Everything public is re-exported here, once (``__all__``); the modules that
implement it are private (``_catalog``, ``_controller``, ...). The public
modules besides this one are the three command-line entry points the
``openfunctions-mcp`` CLI loads by name: ``cli`` (``grant``), ``attempts_cli``
(``work``) and ``catalog_cli`` (``catalog``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openfunctions.core.deprecation import old_names

from . import _records as records
from ._authority import Authority
from ._backend import (
    AttemptLog,
    FileAttemptLog,
    GrantBackend,
    LeaseBackend,
    ResolutionBackend,
    WorkBackend,
    file_backend,
)
from ._catalog import Catalog, ParamSpec, StepSpec
from ._clock import Clock, SystemClock
from ._controller import WorkController
from ._errors import (
    AttemptActive,
    AttemptNotFound,
    BackendUnavailable,
    CatalogInvalid,
    EffectUncertain,
    GrantDenied,
    GrantExpired,
    GrantNotFound,
    GrantRevoked,
    GrantStoreCorrupt,
    InvalidTransition,
    LeaseHeld,
    LeaseLost,
    OperationUncertain,
    PathOutsideGrant,
    PlanInvalid,
    ProofInvalid,
    ReconcileFailed,
    StillRunning,
    UnknownStep,
    WorkError,
)
from ._grants import Grant, GrantStore
from ._lease import Lease, LeaseStore
from ._profile import CATALOG_ENV, WorkProfile, build_work_profile, resolve_catalog_path
from ._protocols import ArtifactSink, AuthorityProtocol, CustodyProtocol
from ._recovery import interrupted, replay, restore_plan, settled_receipts
from ._resolutions import ResolutionInbox, resolve_record, valid_resolve
from ._state import STATES, TRANSITIONS, Attempt, Operation, WorkState, fold
from ._state import TERMINAL as ATTEMPT_TERMINAL
from ._steps import (
    bind_tool,
    create_step_tools,
    prepare_reconciliation,
    prepare_tool_reconciliation,
    reconcile_readback,
    reconcile_tool_effect,
)
from ._tools import WORK_TOOL_NAMES, WorkTools, create_work_tools
from ._verification import Proof, VerifierReceipt, check_completion, create_proof, fingerprint

__all__ = [
    "Attempt", "AttemptActive", "AttemptNotFound", "Authority", "Catalog", "CatalogInvalid", "EffectUncertain",
    "Grant", "GrantDenied", "GrantExpired", "GrantRevoked", "GrantStore", "InvalidTransition", "Lease", "LeaseHeld",
    "LeaseLost", "LeaseStore", "Operation", "ParamSpec", "PathOutsideGrant", "PlanInvalid", "Proof", "ProofInvalid",
    "ReconcileFailed", "STATES", "StepSpec", "ATTEMPT_TERMINAL", "TRANSITIONS", "UnknownStep", "VerifierReceipt",
    "WORK_TOOL_NAMES", "WorkController", "WorkError", "WorkProfile", "WorkTools", "create_proof", "create_step_tools",
    "build_work_profile", "create_work_tools", "check_completion", "fingerprint", "prepare_reconciliation",
    "reconcile_readback", "replay", "restore_plan",
    "OperationUncertain", "StillRunning", "Clock", "SystemClock", "ArtifactSink", "AuthorityProtocol",
    "CustodyProtocol", "WorkState", "fold", "interrupted", "ResolutionInbox", "records",
    "CATALOG_ENV", "resolve_catalog_path", "settled_receipts", "bind_tool", "prepare_tool_reconciliation",
    "reconcile_tool_effect", "AttemptLog", "FileAttemptLog", "GrantBackend", "LeaseBackend", "WorkBackend", "file_backend",
    "GrantNotFound", "GrantStoreCorrupt", "BackendUnavailable", "ResolutionBackend", "resolve_record", "valid_resolve",
]


# Old names of renamed functions, kept for one release outside __all__: each use warns (core/deprecation.py).
_RENAMED = {"build_work_tools": "create_work_tools", "build_step_tools": "create_step_tools",
            "build_proof": "create_proof", "ArtifactStoreProtocol": "ArtifactSink", "TERMINAL": "ATTEMPT_TERMINAL"}

if not TYPE_CHECKING:  # hidden from mypy: a module __getattr__ would make every misspelt import from here read as Any
    __getattr__ = old_names(__name__, _RENAMED)

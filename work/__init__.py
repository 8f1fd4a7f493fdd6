"""openfunctions.work: bounded, durable work attempts under an operator's catalog and grants.

- catalog side: :class:`Catalog` (the operator's TOML steps), :func:`build_step_tools`
  (``of_step.*`` / ``of_oracle.*``), :class:`GrantStore` / :class:`Grant`, :class:`Authority`
  (checked at every effect), verification proofs (:func:`build_proof`, :func:`check_completion`);
- controller side: :class:`WorkController` (one selected attempt, leases, fenced journal,
  recovery, reconcile), :class:`LeaseStore`, the attempt states, the ``of_work_*`` tools
  (:func:`build_work_tools`) and the server profile (:func:`build_work_profile`).
"""

from . import records
from .authority import Authority
from .catalog import Catalog, ParamSpec, StepSpec
from .controller import WorkController
from .errors import (
    AttemptActive,
    AttemptNotFound,
    CatalogInvalid,
    EffectUncertain,
    GrantDenied,
    GrantExpired,
    GrantRevoked,
    InvalidTransition,
    LeaseHeld,
    OperationUncertain,
    StillRunning,
    LeaseLost,
    PathOutsideGrant,
    PlanInvalid,
    ProofInvalid,
    ReconcileFailed,
    UnknownStep,
    WorkError,
)
from .grants import Grant, GrantStore
from .lease import Lease, LeaseStore
from .profile import WorkProfile, build_work_profile
from .recovery import Recovered, interrupted, replay, restore_plan
from .resolutions import ResolutionInbox
from .state import STATES, TERMINAL, TRANSITIONS, Attempt, Operation, WorkState, fold
from .steps import build_step_tools, prepare_reconciliation, reconcile_readback
from .tools import WORK_TOOL_NAMES, WorkTools, build_work_tools
from .verification import Proof, VerifierReceipt, build_proof, check_completion, fingerprint

__all__ = [
    "Attempt", "AttemptActive", "AttemptNotFound", "Authority", "Catalog", "CatalogInvalid", "EffectUncertain",
    "Grant", "GrantDenied", "GrantExpired", "GrantRevoked", "GrantStore", "InvalidTransition", "Lease", "LeaseHeld",
    "LeaseLost", "LeaseStore", "Operation", "ParamSpec", "PathOutsideGrant", "PlanInvalid", "Proof", "ProofInvalid",
    "ReconcileFailed", "Recovered", "STATES", "StepSpec", "TERMINAL", "TRANSITIONS", "UnknownStep", "VerifierReceipt",
    "WORK_TOOL_NAMES", "WorkController", "WorkError", "WorkProfile", "WorkTools", "build_proof", "build_step_tools",
    "build_work_profile", "build_work_tools", "check_completion", "fingerprint", "prepare_reconciliation",
    "reconcile_readback", "replay", "restore_plan",
    "OperationUncertain", "StillRunning", "WorkState", "fold", "interrupted", "ResolutionInbox", "records",
]

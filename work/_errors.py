"""The error hierarchy of ``openfunctions.work``.

Every error subclasses core's :class:`OpenFunctionsError` and carries a stable
machine-readable ``code`` (journals and clients store it: never rename one).
The message names what was refused and why; ``details`` holds JSON-safe facts
(the step, the path, the grant id, candidates, the active attempt id).

Shared by the catalog/authority side (catalog, steps, grants, authority,
verification) and the controller side (controller, state, leases, recovery).
"""

from __future__ import annotations

from openfunctions.core.errors import OpenFunctionsError


class WorkError(OpenFunctionsError):
    """Root of every error the work controller raises on purpose."""

    code = "work_error"


# -- catalog and plans -------------------------------------------------------


class CatalogInvalid(WorkError):
    """The operator's catalog file is malformed; the message names file, step and field."""

    code = "catalog_invalid"


class UnknownStep(WorkError):
    """A plan or call named a step the catalog does not declare (``details['candidates']``)."""

    code = "unknown_step"


class PlanInvalid(WorkError):
    """A plan is malformed: missing or wrongly typed parameters, empty, or too long."""

    code = "plan_invalid"


# -- authority ---------------------------------------------------------------


class GrantDenied(WorkError):
    """No active grant lets this principal run this step (or the catalog digest differs)."""

    code = "grant_denied"


class GrantExpired(GrantDenied):
    """The only grant(s) that would cover the effect have expired."""

    code = "grant_expired"


class GrantRevoked(GrantDenied):
    """The only grant(s) that would cover the effect were revoked."""

    code = "grant_revoked"


class PathOutsideGrant(GrantDenied):
    """A path escapes the workspace (``..``, absolute, symlink) or matches no granted pattern."""

    code = "path_outside_grant"


class GrantNotFound(WorkError):
    """``grant revoke``/``get`` named a grant id the store does not hold."""

    code = "grant_not_found"


class GrantStoreCorrupt(WorkError):
    """The grants journal holds a record that is not a valid grant record (fails closed: every check is refused)."""

    code = "grant_store_corrupt"


# -- leases and attempts -----------------------------------------------------


class LeaseHeld(WorkError):
    """Another live owner holds the lease (``details`` names owner and expiry)."""

    code = "lease_held"


class LeaseLost(WorkError):
    """The lease expired or was taken over; this owner's generation is stale (fenced)."""

    code = "lease_lost"


class BackendUnavailable(WorkError):
    """The backend (a database) could not be reached; ``details['certainty']`` says whether a write may have landed."""

    code = "work_backend_unavailable"


class AttemptActive(WorkError):
    """A start was refused because another attempt is active (``details['attempt_id']``)."""

    code = "attempt_active"


class AttemptNotFound(WorkError):
    code = "attempt_not_found"


class InvalidTransition(WorkError):
    """A lifecycle transition not allowed from the current state (terminal states never change)."""

    code = "invalid_transition"


class EffectUncertain(WorkError):
    """The attempt is blocked: an effect's outcome is unknown and must be reconciled first."""

    code = "effect_uncertain"


# -- verification and reconciliation ------------------------------------------


class OperationUncertain(EffectUncertain):
    """An earlier attempt left an effect of a step uncertain, and this plan would run that step again.

    ``details``: the operation id, its attempt, step and when it was recorded.
    Resolved by a readback verdict (``of_work_reconcile`` on the attempt that
    ran it, when the step has a readback) or by an operator
    (``openfunctions-mcp work resolve OP_ID --as applied|not-applied --reason ...``).
    """

    code = "operation_uncertain"


class StillRunning(EffectUncertain):
    """An uncertain operation's command is still running: nothing can be concluded about it yet."""

    code = "still_running"


class ProofInvalid(WorkError):
    """A verification proof is missing, stale (epoch/fingerprints moved) or bound to other facts."""

    code = "proof_invalid"


class ReconcileFailed(WorkError):
    """Reconciliation could not settle an uncertain effect (missing, mismatched or inconclusive readback)."""

    code = "reconcile_failed"


__all__ = [
    "WorkError",
    "CatalogInvalid",
    "UnknownStep",
    "PlanInvalid",
    "GrantDenied",
    "GrantExpired",
    "GrantRevoked",
    "PathOutsideGrant",
    "GrantNotFound",
    "GrantStoreCorrupt",
    "LeaseHeld",
    "LeaseLost",
    "AttemptActive",
    "BackendUnavailable",
    "AttemptNotFound",
    "InvalidTransition",
    "EffectUncertain",
    "OperationUncertain",
    "StillRunning",
    "ProofInvalid",
    "ReconcileFailed",
]

"""Attempt lifecycle: the states, the allowed transitions, the persisted shape.

The state diagram (also in docs/WORK.md)::

    previewed --start--> started --run_step--> running --verify--> verifying --pass--> verified --complete--> completed
                            |                   ^  |                 |                    |
                            |                   |  +--(step again)   +--fail--> running   +--(write)--> running
                            +-------------------+-----------------------------------------+--> blocked --reconcile--> running
                                 any non-terminal state --cancel--> cancelled;  --fatal--> failed

``completed``, ``failed`` and ``cancelled`` are terminal: nothing leaves them.
``blocked`` is entered when an effect's outcome is unknown, a readback
mismatched, the lease was lost, or the grant was revoked or expired; only a
successful reconciliation (or a cancel) leaves it.

``failed`` is reserved: the transitions allow it, but no rule enters it yet
(a step that fails with a known outcome is recorded as a failed operation
and the attempt stays ``running``; nothing decides that an attempt as a
whole is beyond repair). Until such a rule is decided, an attempt that
cannot go on is cancelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import InvalidTransition

State = Literal["previewed", "started", "running", "verifying", "verified", "completed", "blocked", "failed", "cancelled"]

STATES: tuple[str, ...] = (
    "previewed", "started", "running", "verifying", "verified", "completed", "blocked", "failed", "cancelled",
)
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

# from-state -> the states it may move to. Terminal states map to nothing.
TRANSITIONS: dict[str, frozenset[str]] = {
    "previewed": frozenset({"started", "cancelled"}),
    "started": frozenset({"running", "verifying", "blocked", "failed", "cancelled"}),
    "running": frozenset({"running", "verifying", "blocked", "failed", "cancelled"}),
    "verifying": frozenset({"verified", "running", "blocked", "failed", "cancelled"}),
    "verified": frozenset({"completed", "running", "verifying", "blocked", "failed", "cancelled"}),
    "blocked": frozenset({"running", "blocked", "failed", "cancelled"}),
    "completed": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}

OperationStatus = Literal["pending", "done", "not_done", "failed", "unknown"]


def check_transition(attempt_id: str, current: str, target: str) -> None:
    """Raise :class:`InvalidTransition` unless ``current -> target`` is allowed."""
    if target not in TRANSITIONS.get(current, frozenset()):
        why = "terminal states never change" if current in TERMINAL else f"allowed from {current!r}: {sorted(TRANSITIONS.get(current, ()))}"
        raise InvalidTransition(
            f"attempt {attempt_id} cannot move from {current!r} to {target!r} ({why})",
            details={"attempt_id": attempt_id, "from": current, "to": target},
        )


@dataclass
class Operation:
    """One dispatched effectful (or read) step: its intent, then its outcome."""

    operation_id: str
    step: str
    params: dict[str, Any]
    input_digest: str
    lease_generation: int
    effect: str
    readback: dict[str, Any] | None = None
    plan_index: int | None = None
    # the executor's receipt id for the step call, journaled when it was dispatched
    dispatch_receipt_id: str | None = None
    status: str = "pending"
    receipt: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    reconciliations: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "operationId": self.operation_id,
            "step": self.step,
            "planIndex": self.plan_index,
            "effect": self.effect,
            "status": self.status,
            "inputDigest": self.input_digest,
            "leaseGeneration": self.lease_generation,
        }
        if self.dispatch_receipt_id is not None:
            out["receiptId"] = self.dispatch_receipt_id
        if self.receipt is not None:
            out["receiptId"] = self.receipt.get("receipt_id")
            out["outcome"] = self.receipt.get("outcome")
            out["certainty"] = self.receipt.get("certainty")
        if self.reconciliations:
            out["reconciliations"] = [
                {"receiptId": r.get("receipt_id"), "verdict": r.get("verdict"), "linkedReceiptId": r.get("linked_receipt_id")}
                for r in self.reconciliations
            ]
        return out


@dataclass
class Attempt:
    """The persisted shape of one attempt, rebuilt from the attempt journal."""

    attempt_id: str
    number: int
    principal: str | None
    preview_id: str
    plan: list[dict[str, Any]]
    plan_digest: str
    catalog_digest: str
    state: str = "started"
    created_at: str = ""
    updated_at: str = ""
    blocked_reason: dict[str, Any] | None = None
    operations: dict[str, Operation] = field(default_factory=dict)
    # index into ``plan`` of the next step ``run_step`` without a name runs
    cursor: int = 0
    mutation_epoch: int = 0
    proof: dict[str, Any] | None = None
    verifications: list[dict[str, Any]] = field(default_factory=list)
    artifacts: set[str] = field(default_factory=set)
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def started(cls, data: Mapping[str, Any], *, at: str) -> "Attempt":
        """A new attempt in ``started`` from an ``attempt_started`` record's data.

        The one constructor for both ``start`` (live) and replay (recovery),
        so an attempt reads the same before and after a restart.
        """
        att = cls(
            attempt_id=data["attempt_id"], number=data["number"], principal=data.get("principal"),
            preview_id=data["preview_id"], plan=data["plan"], plan_digest=data["plan_digest"],
            catalog_digest=data["catalog_digest"], state="started", created_at=at, updated_at=at,
        )
        att.history.append({"from": "previewed", "to": "started", "at": at})
        return att

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def transition(self, target: str, *, at: str, reason: dict[str, Any] | None = None) -> None:
        check_transition(self.attempt_id, self.state, target)
        self.history.append({"from": self.state, "to": target, "at": at, **({"reason": reason} if reason else {})})
        self.state = target
        self.updated_at = at
        self.blocked_reason = reason if target == "blocked" else None

    def unknown_operations(self) -> list[Operation]:
        return [op for op in self.operations.values() if op.status in ("unknown", "pending")]

    def summary(self) -> dict[str, Any]:
        return {
            "attemptId": self.attempt_id,
            "number": self.number,
            "state": self.state,
            "principal": self.principal,
            "previewId": self.preview_id,
            "planDigest": self.plan_digest,
            "catalogDigest": self.catalog_digest,
            "cursor": self.cursor,
            "steps": len(self.plan),
            "mutationEpoch": self.mutation_epoch,
            "blockedReason": self.blocked_reason,
            "operations": [op.summary() for op in self.operations.values()],
            "proof": (
                {"proofDigest": self.proof.get("proof_digest"), "mutationEpoch": self.proof.get("mutation_epoch"),
                 "testsPassed": self.proof.get("tests_passed"), "accepted": self.proof.get("accepted")}
                if self.proof else None
            ),
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }


__all__ = [
    "State", "STATES", "TERMINAL", "TRANSITIONS", "OperationStatus", "check_transition", "Operation", "Attempt",
]

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

``failed`` has one rule: an attempt that can never go on fails. That is
an attempt bound to a catalog (by its digest) other than the one the
controller runs: every step, verifier and completion check of it would be
refused forever ("the catalog changed"), so at start-up recovery moves it
to ``failed`` (reason ``catalog_changed``) instead of leaving it live and
stuck. A step that fails with a *known* outcome does not fail the attempt:
its operation is recorded ``failed`` (the handler said it changed nothing)
and the attempt stays ``running``, so the step may run again. Like
``cancelled``, ``failed`` does not discharge an uncertain operation: it
stays open in the data directory until a readback or an operator settles it.

The attempt journal is the core record stream :data:`ATTEMPTS`
(``openfunctions.core.records``): its record types are those of
:mod:`._records`, its one fold is :meth:`WorkState.apply` (the controller
applies each record right after it is durable, recovery folds the journal,
whatever the backend, with the same code). A record of a type this version
does not know is **refused** (``UnknownRecords.REFUSE``): the journal decides
which effects may have happened, so a controller that folded around a newer
writer's record (a new kind of intent, a settlement it cannot read) could
re-run an effect or act past an uncertain one. Reading fails naming the
record (``record_type_unknown``), the controller does not open, and nothing
is appended after it; a record of a known type that cannot be folded (a
missing field) fails the same way (``record_malformed``). (Versions before
the record stream skipped such a record and counted its type.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from openfunctions.core.records import RecordMalformed, RecordStream, StreamRecord, UnknownRecords, UnknownRecordType

from ._errors import InvalidTransition
from ._records import RECORD_TYPES

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
    reconciliations: list[dict[str, Any]] = field(default_factory=list)
    idempotent: bool = False
    # "step" (a plan step) or "verify" (a verifier run as an effect)
    purpose: str = "step"
    # the command's process group, journaled when it was spawned (see records.spawned)
    process: dict[str, Any] | None = None
    # an operator's resolution ({as, reason, by, at}), if any
    resolution: dict[str, Any] | None = None
    # when the intent (or the read's outcome) was recorded
    at: str = ""
    # a ``tool`` step whose tool declares ``capability.idempotent``: an unknown outcome settles as
    # ``failed`` (run it again) instead of blocking the attempt
    rerunnable: bool = False
    # the receipt id of the uncertain call of this plan step that this operation runs again
    rerun_of: str | None = None

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
        if self.purpose != "step":
            out["purpose"] = self.purpose
        if self.process is not None:
            out["process"] = {"pid": self.process.get("pid"), "pgid": self.process.get("pgid")}
        if self.resolution is not None:
            out["resolution"] = dict(self.resolution)
        if self.rerunnable:
            out["rerunnable"] = True
        if self.rerun_of is not None:
            out["rerunOf"] = self.rerun_of
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
    def started(cls, data: Mapping[str, Any], *, at: str) -> Attempt:
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


@dataclass
class WorkState:
    """Everything the attempt journal says, folded by :meth:`apply` (the only code that changes it).

    The controller applies each record right after it is durable; recovery
    folds the whole journal with the same method (:func:`fold`). Record
    formats: :mod:`openfunctions.work._records`.
    """

    previews: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[str, Attempt] = field(default_factory=dict)
    attempt_count: int = 0
    active: str | None = None
    records: int = 0
    # inbox seqs of operator resolutions already copied into the journal
    resolved_inbox: set[int] = field(default_factory=set)

    @property
    def unknown(self) -> list[tuple[str, str]]:
        """Every operation whose outcome is unknown, as ``(attempt_id, operation_id)``."""
        return [(a.attempt_id, o.operation_id) for a in self.attempts.values() for o in a.operations.values() if o.status == "unknown"]

    def operation(self, operation_id: str) -> tuple[Attempt, Operation] | None:
        for a in self.attempts.values():
            op = a.operations.get(operation_id)
            if op is not None:
                return a, op
        return None

    def open_uncertain(self) -> list[tuple[Attempt, Operation]]:
        """Uncertain effects that outlive their attempt: unknown, non-idempotent, not resolved."""
        return [
            (a, o) for a in self.attempts.values() for o in a.operations.values()
            if o.status == "unknown" and o.effect != "read" and not o.idempotent
        ]

    def apply(self, rec: Any, where: Path | str = "") -> None:
        """Fold one record (an object with ``type``, ``data`` and ``time``) into the state: the stream
        :data:`ATTEMPTS`'s fold. Raises ``UnknownRecordType`` / ``RecordMalformed`` naming the record
        (and ``where`` it was read from) for one it refuses."""
        ATTEMPTS.apply(self, rec, where)

    def snapshot(self) -> dict[str, Any]:
        """A plain, comparable view of the whole state (tests compare live and replayed state with it)."""
        import dataclasses

        return {
            "previews": self.previews,
            "attempts": {k: dataclasses.asdict(a) | {"artifacts": sorted(a.artifacts)} for k, a in self.attempts.items()},
            "attempt_count": self.attempt_count,
            "active": self.active,
            "resolved_inbox": sorted(self.resolved_inbox),
        }


def fold(records: Any, where: Path | str = "") -> WorkState:
    """A fresh :class:`WorkState` from journal records, in order (``where``: what they were read from,
    for the error naming a record the stream refuses)."""
    return ATTEMPTS.fold(records, where=where)


def _att(st: WorkState, d: Mapping[str, Any]) -> Attempt | None:
    return st.attempts.get(d.get("attempt_id"))  # type: ignore[arg-type]


def _op(st: WorkState, d: Mapping[str, Any]) -> tuple[Attempt | None, Operation | None]:
    att = _att(st, d)
    return att, (att.operations.get(d.get("operation_id")) if att is not None else None)  # type: ignore[arg-type]


def _apply_preview(st: WorkState, d: dict[str, Any], at: str) -> None:
    st.previews[d["preview_id"]] = {k: v for k, v in d.items() if k != "lease_generation"}


def _apply_started(st: WorkState, d: dict[str, Any], at: str) -> None:
    att = Attempt.started(d, at=at)
    st.attempts[att.attempt_id] = att
    st.attempt_count = max(st.attempt_count, d["number"])
    st.active = att.attempt_id


def _apply_intent(st: WorkState, d: dict[str, Any], at: str) -> None:
    att = _att(st, d)
    if att is None:
        return
    att.operations[d["operation_id"]] = Operation(
        operation_id=d["operation_id"], step=d["step"], params=d.get("params") or {}, input_digest=d["input_digest"],
        lease_generation=d.get("lease_generation", 0), effect=d.get("effect", "external"), readback=d.get("readback"),
        plan_index=d.get("plan_index"), idempotent=bool(d.get("idempotent", False)), purpose=d.get("purpose", "step"), at=at,
        rerunnable=bool(d.get("rerunnable", False)), rerun_of=d.get("rerun_of"),
    )


def _apply_dispatched(st: WorkState, d: dict[str, Any], at: str) -> None:
    _, op = _op(st, d)
    if op is not None:
        op.dispatch_receipt_id = d["receipt_id"]


def _apply_spawned(st: WorkState, d: dict[str, Any], at: str) -> None:
    _, op = _op(st, d)
    if op is not None:
        op.process = {k: d.get(k) for k in ("pid", "pgid", "start_ticks", "boot_id")}


def _advance(att: Attempt, d: Mapping[str, Any]) -> None:
    if isinstance(d.get("mutation_epoch"), int):
        if d["mutation_epoch"] != att.mutation_epoch:
            att.proof = None  # an effect that may have happened invalidates the proof
        att.mutation_epoch = d["mutation_epoch"]
    if isinstance(d.get("cursor"), int):
        att.cursor = d["cursor"]


def _apply_outcome(st: WorkState, d: dict[str, Any], at: str) -> None:
    att, op = _op(st, d)
    if att is None:
        return
    if op is None:  # a read step: no intent was needed
        op = Operation(
            operation_id=d["operation_id"], step=d["step"], params=d.get("params") or {},
            input_digest=d.get("input_digest", ""), lease_generation=d.get("lease_generation", 0),
            effect=d.get("effect", "read"), plan_index=d.get("plan_index"), purpose=d.get("purpose", "step"), at=at,
        )
        att.operations[op.operation_id] = op
    op.status = d["status"]
    op.receipt = d.get("receipt")
    att.artifacts.update(d.get("artifacts") or ())
    _advance(att, d)


def _apply_transition(st: WorkState, d: dict[str, Any], at: str) -> None:
    att = _att(st, d)
    if att is None:
        return
    # The journal's order was checked when it was written: replay trusts it.
    att.history.append({"from": att.state, "to": d["to"], "at": at, **({"reason": d["reason"]} if d.get("reason") else {})})
    att.state = d["to"]
    att.updated_at = at
    att.blocked_reason = d.get("reason") if d["to"] == "blocked" else None
    if d["to"] in ("running", "blocked") and isinstance(d.get("mutation_epoch"), int):
        _advance(att, {"mutation_epoch": d["mutation_epoch"]})


def _apply_verification(st: WorkState, d: dict[str, Any], at: str) -> None:
    att = _att(st, d)
    if att is None:
        return
    att.verifications.append({k: v for k, v in d.items() if k != "lease_generation"})
    att.proof = d.get("proof") if d.get("passed") else None
    att.artifacts.update(d.get("artifacts") or ())


def _apply_reconciliation(st: WorkState, d: dict[str, Any], at: str) -> None:
    att, op = _op(st, d)
    if att is None or op is None:
        return
    op.reconciliations.append({k: v for k, v in d.items() if k != "lease_generation"})
    op.status = d["status"]
    _advance(att, d)


def _apply_resolution(st: WorkState, d: dict[str, Any], at: str) -> None:
    st.resolved_inbox.add(d["inbox_seq"])
    att, op = _op(st, d)
    if att is None or op is None:
        return
    op.resolution = {k: d.get(k) for k in ("as", "reason", "by", "at")}
    op.status = "done" if d["as"] == "applied" else "not_done"
    _advance(att, d)


def _apply_recovered(st: WorkState, d: dict[str, Any], at: str) -> None:
    wanted = {"unknown": set(d.get("unknown_operations") or ()), "not_done": set(d.get("not_started_operations") or ())}
    for att in st.attempts.values():
        for op in att.operations.values():
            if op.status != "pending":
                continue
            for status, ids in wanted.items():
                if op.operation_id in ids:
                    # a re-runnable step's unknown effect does not block: it counts as failed, runs again
                    op.status = "failed" if status == "unknown" and op.rerunnable else status


def _apply_nothing(st: WorkState, d: dict[str, Any], at: str) -> None:
    return None  # the lease file is the authority; the record is history


def _apply_record(st: WorkState, rec: StreamRecord) -> None:
    st.records += 1
    _APPLY[rec.type](st, rec.data, rec.time)


def _refused(where: Path | str, rec: StreamRecord, exc: Exception) -> Exception:
    data = rec.data if isinstance(rec.data, dict) else {}
    generation = data.get("lease_generation")
    at = f"record seq {getattr(rec, 'seq', 0)} ({rec.type!r}" + (f", lease generation {generation})" if generation else ")")
    what = exc.message if isinstance(exc, UnknownRecordType) else f"{type(exc).__name__}: {exc}"
    message = "the attempt journal" + (f" {str(where)!r}" if str(where) else "") + f" cannot be read: {at}: {what}"
    details = {"where": str(where), "seq": getattr(rec, "seq", 0), "type": rec.type, "lease_generation": generation}
    if isinstance(exc, UnknownRecordType):
        return UnknownRecordType(message, details=details)
    return RecordMalformed(message, details=details)


_APPLY = {
    "lease_acquired": _apply_nothing,
    "preview_saved": _apply_preview,
    "attempt_started": _apply_started,
    "intent": _apply_intent,
    "dispatched": _apply_dispatched,
    "spawned": _apply_spawned,
    "outcome": _apply_outcome,
    "transition": _apply_transition,
    "verification": _apply_verification,
    "reconciliation": _apply_reconciliation,
    "resolution": _apply_resolution,
    "recovered": _apply_recovered,
}


#: The attempt journal: the record types of :mod:`._records`, one fold, unknown types refused (see the module
#: docstring). Its journal kind is ``attempt``; a file's header meta is empty (format version 1).
ATTEMPTS: RecordStream[WorkState] = RecordStream(
    "work-attempts", kind="attempt", types=RECORD_TYPES, new_state=WorkState, apply=_apply_record,
    unknown=UnknownRecords.REFUSE, malformed=_refused)
assert ATTEMPTS.types == frozenset(_APPLY), "every record type of _records has its fold, and only those"


__all__ = [
    "ATTEMPTS", "WorkState", "fold",
    "State", "STATES", "TERMINAL", "TRANSITIONS", "OperationStatus", "check_transition", "Operation", "Attempt",
]

"""Recovery: rebuild the controller's state from the attempt journal, dispatching nothing.

The order follows the reference design ("Recovery first accounts saved
outputs, then recovers oracle, step and verification calls. It records
recovered outputs before reconciling backend operations … and finally
restores lifecycle"):

1. **account saved outputs** — every artifact id the journal mentions
   (preview payloads, step output, reply projections) is collected so the
   artifact read tool can keep serving it;
2. **recover oracle, step and verification calls** — intents, outcomes,
   reconciliations and verifications are replayed in journal order;
3. **record recovered outputs** — outcomes are applied to their
   operations (status, receipt, mutation epoch, cursor);
4. **mark backend operations for reconciliation** — an intent with no
   outcome is an *unknown* effect (the process died between dispatch and
   record); it is never re-run, only reconciled by evidence;
5. **restore the lifecycle** — :func:`restore_plan` says which attempts must
   move to ``blocked`` (unknown effects) or back to ``running`` (an
   interrupted verification); the controller applies and journals those
   transitions under its own locks.

This module reads records only. It does not own locks, does not write, and
never calls a tool: recovery reads evidence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .state import Attempt, Operation

@dataclass
class Recovered:
    previews: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[str, Attempt] = field(default_factory=dict)
    attempt_count: int = 0
    active: str | None = None
    saved_artifacts: set[str] = field(default_factory=set)
    records: int = 0
    # unknown effects found in step 4: (attempt_id, operation_id)
    unknown: list[tuple[str, str]] = field(default_factory=list)
    unknown_types: set[str] = field(default_factory=set)


def replay(records: Iterable[Any]) -> Recovered:
    """Fold journal records (objects with ``type`` and ``data``) into :class:`Recovered`."""
    out = Recovered()
    for rec in records:
        out.records += 1
        t, d = rec.type, rec.data
        handler = _HANDLERS.get(t)
        if handler is None:
            out.unknown_types.add(t)  # a newer writer's record: keep going, report it
            continue
        handler(out, d, rec)
    # step 4: an intent without an outcome is an unknown effect
    for att in out.attempts.values():
        for op in att.operations.values():
            if op.status == "pending":
                op.status = "unknown"
                out.unknown.append((att.attempt_id, op.operation_id))
    # the selected attempt is the last one started (terminal or not), as it was before the restart
    out.active = next(reversed(out.attempts)) if out.attempts else None
    return out


def restore_plan(rec: Recovered) -> list[tuple[str, str, dict[str, Any]]]:
    """Step 5: the lifecycle transitions the controller must apply, as ``(attempt_id, to, reason)``."""
    plan: list[tuple[str, str, dict[str, Any]]] = []
    for att in rec.attempts.values():
        if att.terminal:
            continue
        unknown = [op.operation_id for op in att.operations.values() if op.status == "unknown"]
        if unknown:
            reason = {
                "code": "effect_uncertain",
                "message": f"{len(unknown)} operation(s) have no recorded outcome (the controller stopped mid-step); "
                "reconcile them by evidence with of_work_reconcile; they are never re-run blindly",
                "operations": unknown,
            }
            if att.state != "blocked" or (att.blocked_reason or {}).get("operations") != unknown:
                plan.append((att.attempt_id, "blocked", reason))
        elif att.state == "verifying":
            plan.append((att.attempt_id, "running", {"code": "verification_interrupted", "message": "verification was interrupted; verify again"}))
    return plan


# -- per-type folding ----------------------------------------------------------


def _preview(out: Recovered, d: dict[str, Any], rec: Any) -> None:
    out.previews[d["preview_id"]] = d
    if d.get("artifact_id"):
        out.saved_artifacts.add(d["artifact_id"])


def _started(out: Recovered, d: dict[str, Any], rec: Any) -> None:
    att = Attempt.started(d, at=rec.time)
    out.attempts[att.attempt_id] = att
    out.attempt_count = max(out.attempt_count, d["number"])


def _intent(out: Recovered, d: dict[str, Any], rec: Any) -> None:
    att = out.attempts.get(d["attempt_id"])
    if att is None:
        return
    att.operations[d["operation_id"]] = Operation(
        operation_id=d["operation_id"],
        step=d["step"],
        params=d.get("params") or {},
        input_digest=d["input_digest"],
        lease_generation=d.get("lease_generation", 0),
        effect=d.get("effect", "external"),
        readback=d.get("readback"),
        plan_index=d.get("plan_index"),
    )


def _dispatched(out: Recovered, d: dict[str, Any], rec: Any) -> None:
    att = out.attempts.get(d["attempt_id"])
    op = att.operations.get(d["operation_id"]) if att is not None else None
    if op is not None:
        op.dispatch_receipt_id = d["receipt_id"]


def _outcome(out: Recovered, d: dict[str, Any], rec: Any) -> None:
    att = out.attempts.get(d["attempt_id"])
    if att is None:
        return
    op = att.operations.get(d["operation_id"])
    if op is None:  # a read step: no intent was needed
        op = Operation(
            operation_id=d["operation_id"],
            step=d["step"],
            params=d.get("params") or {},
            input_digest=d.get("input_digest", ""),
            lease_generation=d.get("lease_generation", 0),
            effect=d.get("effect", "read"),
            plan_index=d.get("plan_index"),
        )
        att.operations[op.operation_id] = op
    op.status = d["status"]
    op.receipt = d.get("receipt")
    op.result = d.get("result")
    for a in d.get("artifacts") or ():
        att.artifacts.add(a)
        out.saved_artifacts.add(a)
    if isinstance(d.get("mutation_epoch"), int):
        att.mutation_epoch = d["mutation_epoch"]
    if isinstance(d.get("cursor"), int):
        att.cursor = d["cursor"]


def _transition(out: Recovered, d: dict[str, Any], rec: Any) -> None:
    att = out.attempts.get(d["attempt_id"])
    if att is None:
        return
    # Replay trusts the journal's own order: it was checked when written.
    att.history.append({"from": att.state, "to": d["to"], "at": rec.time, **({"reason": d["reason"]} if d.get("reason") else {})})
    att.state = d["to"]
    att.updated_at = rec.time
    att.blocked_reason = d.get("reason") if d["to"] == "blocked" else None
    if d["to"] in ("running", "blocked") and isinstance(d.get("mutation_epoch"), int):
        att.mutation_epoch = d["mutation_epoch"]


def _verification(out: Recovered, d: dict[str, Any], rec: Any) -> None:
    att = out.attempts.get(d["attempt_id"])
    if att is None:
        return
    att.verifications.append(d)
    att.proof = d.get("proof") if d.get("passed") else None
    for a in d.get("artifacts") or ():
        att.artifacts.add(a)
        out.saved_artifacts.add(a)


def _reconciliation(out: Recovered, d: dict[str, Any], rec: Any) -> None:
    att = out.attempts.get(d["attempt_id"])
    if att is None:
        return
    op = att.operations.get(d["operation_id"])
    if op is None:
        return
    op.reconciliations.append(d)
    op.status = d["status"]
    if isinstance(d.get("mutation_epoch"), int):
        att.mutation_epoch = d["mutation_epoch"]
    if isinstance(d.get("cursor"), int):
        att.cursor = d["cursor"]


def _noop(out: Recovered, d: dict[str, Any], rec: Any) -> None:
    return None


_HANDLERS = {
    "lease_acquired": _noop,  # the lease file is the authority; the record is history
    "preview_saved": _preview,
    "attempt_started": _started,
    "intent": _intent,
    "dispatched": _dispatched,
    "outcome": _outcome,
    "transition": _transition,
    "verification": _verification,
    "reconciliation": _reconciliation,
    "recovered": _noop,
}

#: record types of the attempt journal, format version 1 (docs/formats/work-attempts.md)
RECORD_TYPES = tuple(_HANDLERS)

__all__ = ["Recovered", "replay", "restore_plan", "RECORD_TYPES"]

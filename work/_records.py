"""The attempt journal's records: one constructor per record type, and the one format table.

Attempt journal format, version 1. One core journal (kind ``attempt``, see
docs/formats/journal.md) segment per lease generation,
``<data-dir>/work/attempts/g<generation:010d>.jsonl``, written only by the
holder of that generation, every record appended under the lease fence.
Every record's ``data`` carries ``lease_generation`` (the controller adds
it when appending). :meth:`openfunctions.work._state.WorkState.apply` is the
only code that turns these records into attempt state: the controller
applies each record right after it is durable, and recovery folds the
journal with the same method, so the state before and after a restart is
the same by construction.

================  ==========================================================================  =====================================
type              data fields                                                                 written when
================  ==========================================================================  =====================================
lease_acquired    owner, generation, pid, catalog_digest                                       a controller opened its segment
preview_saved     preview_id, principal, plan ([{step, params}] with defaults filled),         ``of_work_preview``
                  plan_digest, catalog_digest, artifact_id (the full preview, or null),
                  created_at
attempt_started   attempt_id, number (1, 2, ...), preview_id, principal, plan, plan_digest,    ``of_work_start``
                  catalog_digest
intent            attempt_id, operation_id, plan_index (null for a verifier), step, params,    **before** an effectful step or
                  effect (write/external), idempotent, input_digest, readback (the             verifier is dispatched
                  ``prepare_reconciliation`` metadata), purpose (``step`` | ``verify``);
                  rerunnable (only when true: a ``tool`` step whose tool declares
                  ``capability.idempotent``), rerun_of (only when set: the receipt id of
                  the uncertain call of the same plan step this one runs again)
dispatched        attempt_id, operation_id, receipt_id (the executor's receipt of the call)    after the executor persisted the
                                                                                               call's start, before the handler
spawned           attempt_id, operation_id, pid, pgid, start_ticks (field 22 of                a ``command`` step's process started
                  /proc/<pid>/stat, or null), boot_id (or null)                                (its process group, for liveness)
outcome           attempt_id, operation_id, plan_index, step, effect, params, input_digest,    the call settled (a read step writes
                  status (done | failed | not_done | unknown), receipt (full receipt or       only this record)
                  null), result_digest, artifacts (ids the step's output was stored under),
                  mutation_epoch, cursor, cancelled, purpose, source (absent, or
                  ``execution_journal``: written at recovery from the settled
                  receipt the server's execution journal held; artifacts then [])
transition        attempt_id, from, to, reason ({code, message, ...} or absent),               every state change
                  mutation_epoch (optional)
verification      attempt_id, verificationId, passed, accepted, checks, fingerprintsStable,    ``of_work_verify`` finished
                  mutation_epoch, proof (see work/_verification.py), proofSummary, artifacts
reconciliation    attempt_id, operation_id, step, verdict (applied | not_applied | partial |   ``of_work_reconcile`` (a readback)
                  mismatch | inconclusive | still_running; their meanings:
                  docs/formats/work-attempts.md), status (done | not_done |
                  unknown), evidence, receipt (the oracle call's receipt or null),
                  receipt_id, linked_receipt_id, linked_operation_id, mutation_epoch, cursor
resolution        attempt_id, operation_id, as (applied | not_applied), reason, by, at,        an operator resolved an uncertain
                  inbox_seq (the record's seq in ``resolutions.journal``)                      operation (``work resolve``)
recovered         restored ([{attempt_id, to}]), unknown_operations, not_started_operations    start-up found interrupted work
================  ==========================================================================  =====================================

Rules the fold implements:

- an ``intent`` makes a ``pending`` operation; ``outcome``, ``reconciliation``
  and ``resolution`` settle it. ``recovered`` marks the pending operations of
  a dead process: those with a ``dispatched`` record ``unknown`` (the handler
  may have run), those without ``not_done`` (the executor never entered the
  handler: nothing ran);
- an effect that may have happened (``outcome`` done/unknown of a non-read
  step, a ``reconciliation`` or ``resolution`` saying applied) invalidates the
  attempt's proof;
- the journal is the core record stream ``ATTEMPTS`` (``work/_state.py``): a
  record type this version does not know (a newer writer's) is refused by
  name (``record_type_unknown``), never skipped: it may be an effect the fold
  cannot see. The controller then does not open; nothing is appended.

The operator's inbox ``<data-dir>/work/resolutions.journal`` (kind
``work-resolutions``; records ``resolve`` {operation_id, as, reason, by, at})
is written by ``openfunctions-mcp work resolve`` while a server may be
running; the controller copies each inbox record into its own journal as a
``resolution`` record before it counts, so the attempt journal alone still
rebuilds the state.

Ids: ``prv_``, ``att_``, ``op_``, ``ver_`` + 32 lowercase hex; never reused.
``mutation_epoch`` counts effects that may have happened; a proof is valid
only at the epoch it was made in.
"""

from __future__ import annotations

from typing import Any

Rec = tuple[str, dict[str, Any]]

FORMAT_VERSION = 1
RESOLUTIONS_FILE = "resolutions.journal"
RESOLUTIONS_KIND = "work-resolutions"

RECORD_TYPES = (
    "lease_acquired", "preview_saved", "attempt_started", "intent", "dispatched", "spawned", "outcome",
    "transition", "verification", "reconciliation", "resolution", "recovered",
)


def lease_acquired(*, owner: str, generation: int, pid: int, catalog_digest: str) -> Rec:
    return "lease_acquired", {"owner": owner, "generation": generation, "pid": pid, "catalog_digest": catalog_digest}


def preview_saved(
    *, preview_id: str, principal: str | None, plan: list[dict[str, Any]], plan_digest: str, catalog_digest: str,
    artifact_id: str | None, created_at: str,
) -> Rec:
    return "preview_saved", {
        "preview_id": preview_id, "principal": principal, "plan": plan, "plan_digest": plan_digest,
        "catalog_digest": catalog_digest, "artifact_id": artifact_id, "created_at": created_at,
    }


def attempt_started(
    *, attempt_id: str, number: int, preview_id: str, principal: str | None, plan: list[dict[str, Any]],
    plan_digest: str, catalog_digest: str,
) -> Rec:
    return "attempt_started", {
        "attempt_id": attempt_id, "number": number, "preview_id": preview_id, "principal": principal,
        "plan": plan, "plan_digest": plan_digest, "catalog_digest": catalog_digest,
    }


def intent(
    *, attempt_id: str, operation_id: str, plan_index: int | None, step: str, params: dict[str, Any], effect: str,
    idempotent: bool, input_digest: str, readback: dict[str, Any] | None, purpose: str = "step",
    rerunnable: bool = False, rerun_of: str | None = None,
) -> Rec:
    data = {
        "attempt_id": attempt_id, "operation_id": operation_id, "plan_index": plan_index, "step": step,
        "params": params, "effect": effect, "idempotent": idempotent, "input_digest": input_digest,
        "readback": readback, "purpose": purpose,
    }
    if rerunnable:  # only when set: older records stay byte-identical
        data["rerunnable"] = True
    if rerun_of is not None:
        data["rerun_of"] = rerun_of
    return "intent", data


def dispatched(*, attempt_id: str, operation_id: str, receipt_id: str) -> Rec:
    return "dispatched", {"attempt_id": attempt_id, "operation_id": operation_id, "receipt_id": receipt_id}


def spawned(*, attempt_id: str, operation_id: str, pid: int, pgid: int, start_ticks: int | None, boot_id: str | None) -> Rec:
    return "spawned", {
        "attempt_id": attempt_id, "operation_id": operation_id, "pid": pid, "pgid": pgid,
        "start_ticks": start_ticks, "boot_id": boot_id,
    }


def outcome(
    *, attempt_id: str, operation_id: str, plan_index: int | None, step: str, effect: str, params: dict[str, Any],
    input_digest: str, status: str, receipt: dict[str, Any] | None, artifacts: list[str], mutation_epoch: int,
    cursor: int, cancelled: bool, purpose: str = "step", source: str | None = None,
) -> Rec:
    d = {
        "attempt_id": attempt_id, "operation_id": operation_id, "plan_index": plan_index, "step": step,
        "effect": effect, "params": params, "input_digest": input_digest, "status": status, "receipt": receipt,
        "result_digest": (receipt or {}).get("result_sha256"), "artifacts": artifacts,
        "mutation_epoch": mutation_epoch, "cursor": cursor, "cancelled": cancelled, "purpose": purpose,
    }
    if source is not None:
        d["source"] = source
    return "outcome", d


def transition(*, attempt_id: str, from_: str, to: str, reason: dict[str, Any] | None = None, mutation_epoch: int | None = None) -> Rec:
    d: dict[str, Any] = {"attempt_id": attempt_id, "from": from_, "to": to}
    if reason:
        d["reason"] = reason
    if mutation_epoch is not None:
        d["mutation_epoch"] = mutation_epoch
    return "transition", d


def verification(*, attempt_id: str, outcome: dict[str, Any]) -> Rec:
    return "verification", {"attempt_id": attempt_id, **outcome}


def reconciliation(
    *, attempt_id: str, operation_id: str, step: str, verdict: str, status: str, evidence: Any,
    receipt: dict[str, Any] | None, linked_receipt_id: str | None, mutation_epoch: int, cursor: int,
) -> Rec:
    return "reconciliation", {
        "attempt_id": attempt_id, "operation_id": operation_id, "step": step, "verdict": verdict, "status": status,
        "evidence": evidence, "receipt": receipt, "receipt_id": (receipt or {}).get("receipt_id"),
        "linked_receipt_id": linked_receipt_id, "linked_operation_id": operation_id,
        "mutation_epoch": mutation_epoch, "cursor": cursor,
    }


def resolution(
    *, attempt_id: str, operation_id: str, as_: str, reason: str, by: str, at: str, inbox_seq: int,
    mutation_epoch: int, cursor: int,
) -> Rec:
    return "resolution", {
        "attempt_id": attempt_id, "operation_id": operation_id, "as": as_, "reason": reason, "by": by, "at": at,
        "inbox_seq": inbox_seq, "mutation_epoch": mutation_epoch, "cursor": cursor,
    }


def recovered(*, restored: list[dict[str, Any]], unknown_operations: list[str], not_started_operations: list[str]) -> Rec:
    return "recovered", {
        "restored": restored, "unknown_operations": unknown_operations, "not_started_operations": not_started_operations,
    }


__all__ = [
    "FORMAT_VERSION", "RECORD_TYPES", "RESOLUTIONS_FILE", "RESOLUTIONS_KIND", "Rec", "attempt_started", "dispatched",
    "intent", "lease_acquired", "outcome", "preview_saved", "reconciliation", "recovered", "resolution", "spawned",
    "transition", "verification",
]

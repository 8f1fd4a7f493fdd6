"""Recovery: what a restart concludes from the attempt journal, dispatching nothing.

The state itself is rebuilt by folding the journal with
:meth:`WorkState.apply` (:func:`openfunctions.work._state.fold`), the same
method the live controller applies each record with. This module only
decides what the journal cannot say by itself, in the reference design's
order ("Recovery first accounts saved outputs, then recovers oracle, step
and verification calls. It records recovered outputs before reconciling
backend operations … and finally restores lifecycle"):

0. **settled receipts count** (:func:`settled_receipts`) — an interrupted
   operation whose call the executor had already settled (its receipt is
   in the server's execution journal, ``<data-dir>/journal``) gets the
   ``outcome`` that receipt proves, journaled with ``source:
   "execution_journal"``; only a ``known`` receipt counts;
1. **interrupted operations** (:func:`interrupted`) — an operation with an
   intent and no outcome belonged to a process that died. With a
   ``dispatched`` record the executor had entered its handler: the effect
   is *unknown*, never re-run, only reconciled by evidence or resolved by an
   operator. Without one the handler never started: nothing ran, the
   operation is *not done*. The controller journals this as one
   ``recovered`` record, which the fold applies;
2. **restore the lifecycle** (:func:`restore_plan`) — which attempts must
   move to ``failed`` (bound to a catalog this controller no longer runs:
   no step, verifier or completion of theirs can ever be checked again),
   ``blocked`` (unknown effects) or back to ``running`` (an interrupted
   read-only verification); the controller journals those transitions
   under its own locks.

It reads records only: no locks, no writes, no tool calls.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import _records as R
from ._state import WorkState, fold


def settled_status(op: Any, outcome: str | None, certainty: str | None, handler_started: bool) -> str:
    """An operation's status from its call's receipt (live, and from the execution journal at recovery)."""
    if certainty == "known":
        status = "done" if outcome == "succeeded" else ("failed" if handler_started else "not_done")
    else:
        status = "unknown"
    if op.effect == "read" and status == "unknown":
        status = "failed"  # a read changed nothing, whatever happened to it
    if op.purpose == "verify" and status == "unknown" and op.idempotent:
        status = "failed"  # running an idempotent verifier again is harmless: it is not left open
    if status == "unknown" and getattr(op, "rerunnable", False):
        status = "failed"  # its tool declares idempotent: the step runs again instead of blocking
    return status


def settled_receipts(journal_dir: str | os.PathLike[str], receipt_ids: set[str]) -> dict[str, dict[str, Any]]:
    """The receipts for ``receipt_ids`` in the execution journals under ``journal_dir`` (read-only).

    Reads every ``*.journal`` there (and its finished segments) with the
    core journal's lock-free reader, so a server holding the journal is not
    disturbed. A journal that is not an execution journal, or cannot be
    read, is skipped. Returns ``{receipt_id: receipt dict}``.
    """
    from openfunctions.core.errors import OpenFunctionsError
    from openfunctions.core.journal import read_records, segment_paths

    found: dict[str, dict[str, Any]] = {}
    d = Path(journal_dir)
    if not receipt_ids or not d.is_dir():
        return found
    for path in sorted(d.glob("*.journal")):
        try:
            for seg in [*segment_paths(path), path]:
                for rec in read_records(seg):
                    if rec.type == "receipt" and rec.data.get("receipt_id") in receipt_ids:
                        found[rec.data["receipt_id"]] = dict(rec.data)
        except (OpenFunctionsError, OSError):
            continue
    return found


def interrupted(state: WorkState) -> tuple[list[str], list[str]]:
    """``(unknown, not_started)`` operation ids among the pending operations of ``state``."""
    unknown: list[str] = []
    not_started: list[str] = []
    for att in state.attempts.values():
        for op in att.operations.values():
            if op.status == "pending":
                (unknown if op.dispatch_receipt_id is not None else not_started).append(op.operation_id)
    return unknown, not_started


class _Synthetic:
    def __init__(self, rec: R.Rec) -> None:
        self.type, self.data = rec
        self.time = ""


def replay(records: Iterable[Any], where: Path | str = "") -> WorkState:
    """What a restart would see: the fold of ``records`` (read from ``where``) plus the ``recovered``
    conclusion (not journaled)."""
    state = fold(records, where)
    unknown, not_started = interrupted(state)
    if unknown or not_started:
        state.apply(_Synthetic(R.recovered(restored=[], unknown_operations=unknown, not_started_operations=not_started)))
        state.records -= 1
    return state


def restore_plan(state: WorkState, catalog_digest: str | None = None) -> list[tuple[str, str, dict[str, Any]]]:
    """The lifecycle transitions the controller must apply, as ``(attempt_id, to, reason)``.

    ``catalog_digest`` is the catalog the controller runs now: a live attempt
    bound to another one has *failed* (the rule for ``failed``, see
    :mod:`openfunctions.work._state`).
    """
    plan: list[tuple[str, str, dict[str, Any]]] = []
    for att in state.attempts.values():
        if att.terminal:
            continue
        if catalog_digest is not None and att.catalog_digest != catalog_digest:
            plan.append((att.attempt_id, "failed", {
                "code": "catalog_changed",
                "message": f"the attempt is bound to catalog {att.catalog_digest}; the controller now runs {catalog_digest}, "
                "so none of its steps, verifiers or its completion can be checked again: preview and start a new attempt",
                "catalog_digest": catalog_digest,
            }))
            continue
        unknown = [op.operation_id for op in att.operations.values() if op.status == "unknown"]
        if unknown:
            no_readback = [o for o in unknown if not (att.operations[o].readback or {}).get("reconcilable")]
            reason = {
                "code": "effect_uncertain",
                "message": f"{len(unknown)} operation(s) have no recorded outcome (the controller stopped mid-step); "
                "reconcile them by evidence with of_work_reconcile; they are never re-run blindly"
                + (f"; {len(no_readback)} have no readback and need an operator "
                   "(openfunctions-mcp work resolve OP_ID --as applied|not-applied --reason ...)" if no_readback else ""),
                "operations": unknown,
            }
            if att.state != "blocked" or (att.blocked_reason or {}).get("operations") != unknown:
                plan.append((att.attempt_id, "blocked", reason))
        elif att.state == "verifying":
            plan.append((att.attempt_id, "running", {"code": "verification_interrupted", "message": "verification was interrupted; verify again"}))
    return plan


RECORD_TYPES = R.RECORD_TYPES

__all__ = ["interrupted", "replay", "restore_plan", "settled_receipts", "settled_status", "RECORD_TYPES"]

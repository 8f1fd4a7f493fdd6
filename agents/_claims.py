"""Claim -> verification -> fulfilment: the records that follow an agent run's outcome claim.

A completed run writes an ``outcome_claim`` (the run *says* it did the
task). Nothing trusts that on its own: :func:`verify_claim` links evidence
to the claim (a verifier tool's successful receipt, or the work
controller's proof of an attempt) as a ``claim_verified`` record, and
:func:`fulfil_task` marks the run's task fulfilled (``task_fulfilled``) only
when every claim is verified, or when an operator gives a ``reason``. The
record formats are in :mod:`._records`; all three are folded by the same
:func:`._records.apply` live and from disk.

A tool declaring ``capability.requires_verification`` makes each of its
calls in the run a receipt the claim lists in ``requires_verification``:
the claim stays unverified (and the task unfulfilled) until a verification
``covers`` each of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import _records as R
from ._errors import ClaimNotFound, ClaimUnverified, RunNotFound, VerificationInvalid

MAX_REASON = 2000


async def _run_state(runs: Any, run_id: str) -> R.RunState:
    """The run as the log says: its folded state in memory, else its files or rows (an older, trimmed run)."""
    state: R.RunState | None = runs.get(run_id) if hasattr(runs, "get") else None
    if state is None and hasattr(runs, "load"):
        state = await runs.load(run_id)
    if state is None and getattr(runs, "path", None) is not None:
        from ._runlog import read_runs

        state = read_runs(Path(runs.path).parent.parent).get(run_id)
    if state is None or state.started.get("agent") is None:
        raise RunNotFound(f"no agent run {run_id!r}", details={"run_id": run_id})
    return state


def receipt_evidence(receipt: Any) -> dict[str, Any]:
    """A verifier call's receipt (a :class:`~openfunctions.core.Receipt` or its dict) as evidence.

    Only a call that *succeeded* verifies anything: a failed, rejected,
    cancelled or unknown one is refused (``verification_invalid``).
    """
    d = receipt.to_dict() if hasattr(receipt, "to_dict") else receipt
    if not isinstance(d, dict) or not isinstance(d.get("receipt_id"), str):
        raise VerificationInvalid("the evidence must be a receipt (with a receipt_id)", details={"got": type(receipt).__name__})
    if d.get("outcome") != "succeeded":
        raise VerificationInvalid(
            f"receipt {d['receipt_id']} ({d.get('tool')}) ended {d.get('outcome')!r}: only a verifier call that "
            "succeeded verifies a claim", details={"receipt_id": d["receipt_id"], "outcome": d.get("outcome")})
    return {"kind": "receipt", "receipt_id": d["receipt_id"], "tool": d.get("tool"), "outcome": d["outcome"]}


def work_proof_evidence(proof: Any) -> dict[str, Any]:
    """The work controller's proof of an attempt (``work._verification.Proof`` or its JSON, as
    ``of_work_verify`` returns it under ``proof``) as evidence. Only a proof whose verifiers passed
    (``tests_passed``) verifies a claim."""
    d = proof.model_dump(mode="json") if hasattr(proof, "model_dump") else proof
    if not isinstance(d, dict) or not isinstance(d.get("attempt_id"), str) or not isinstance(d.get("proof_digest"), str):
        raise VerificationInvalid("a work proof must be an object with an attempt_id and a proof_digest",
                                  details={"got": type(proof).__name__})
    if d.get("tests_passed") is not True:
        raise VerificationInvalid(f"the proof of attempt {d['attempt_id']} did not pass its verifiers",
                                  details={"attempt_id": d["attempt_id"], "proof_digest": d["proof_digest"]})
    return {"kind": "work_proof", "attempt_id": d["attempt_id"], "proof_digest": d["proof_digest"]}


async def verify_claim(runs: Any, run_id: str, claim_id: str, *, receipt: Any = None, work_proof: Any = None,
                       covers: list[str] | None = None, by: str | None = None) -> dict[str, Any]:
    """Link evidence to ``claim_id`` of ``run_id``: write and return its ``claim_verified`` record.

    ``runs`` is the run log the run lives in (:class:`~._runlog.RunJournal`,
    :class:`~._runlog.MemoryRunLog`, :class:`~._runlog.DatabaseRunLog`).
    Exactly one of ``receipt`` (see :func:`receipt_evidence`) and
    ``work_proof`` (see :func:`work_proof_evidence`). ``covers``: the run's
    receipts this evidence verifies (default: every one the claim still
    awaits); a receipt that is not one of the run's calls, or the evidence's
    own receipt, is refused.
    """
    if (receipt is None) == (work_proof is None):
        raise VerificationInvalid("give exactly one piece of evidence: a verifier's receipt or a work proof")
    evidence = receipt_evidence(receipt) if receipt is not None else work_proof_evidence(work_proof)
    state = await _run_state(runs, run_id)
    pending = state.pending(claim_id)
    if pending is None:
        raise ClaimNotFound(f"run {run_id} has no claim {claim_id!r} (claims: "
                            f"{[c.get('claim_id') for c in state.claims] or 'none'})",
                            details={"run_id": run_id, "claim_id": claim_id})
    own = set((state.finished or {}).get("receipts") or []) | {
        c["receipt_id"] for rd in state.rounds for c in rd.get("tool_calls", []) if c.get("receipt_id")}
    chosen = list(pending) if covers is None else list(covers)
    strangers = [r for r in chosen if r not in own]
    if strangers:
        raise VerificationInvalid(f"covers names receipts that are not calls of run {run_id}: {strangers}",
                                  details={"run_id": run_id, "receipts": strangers})
    if evidence.get("receipt_id") in own and evidence["receipt_id"] in chosen:
        raise VerificationInvalid("a call cannot verify itself: the evidence's receipt is one it would cover",
                                  details={"receipt_id": evidence["receipt_id"]})
    data = R.verified(run_id=run_id, claim_id=claim_id, evidence=evidence, covers=chosen, by=by)
    await runs.append(R.VERIFIED, data)
    return data


async def fulfil_task(runs: Any, run_id: str, *, reason: str | None = None, by: str | None = None) -> dict[str, Any]:
    """Mark ``run_id``'s task fulfilled: write and return its ``task_fulfilled`` record.

    Without ``reason`` only when the run has a claim and every claim is
    verified (else :class:`ClaimUnverified`, ``claim_unverified``, naming what
    is missing). With ``reason`` (an operator's words, at most 2,000
    characters) whatever the claims say; the record keeps the reason. A run
    already fulfilled returns its existing record (the first one counts).
    """
    if reason is not None and (not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON):
        raise VerificationInvalid(f"reason must be 1-{MAX_REASON} characters of text")
    state = await _run_state(runs, run_id)
    if state.fulfilment is not None:
        return state.fulfilment
    ids = [c["claim_id"] for c in state.claims if isinstance(c.get("claim_id"), str)]
    if reason is None:
        unverified = {cid: state.pending(cid) for cid in ids if not state.claim_verified(cid)}
        if not ids or unverified:
            why = "it has no outcome claim" if not ids else "claims not verified: " + ", ".join(
                f"{cid} (awaiting {p})" if p else f"{cid} (no verification)" for cid, p in unverified.items())
            raise ClaimUnverified(f"run {run_id}'s task cannot be fulfilled: {why}; verify them "
                                  "(`runs verify`) or fulfil with a reason",
                                  details={"run_id": run_id, "unverified": unverified})
    data = R.fulfilled(run_id=run_id, claim_ids=ids, reason=reason, by=by)
    await runs.append(R.FULFILLED, data)
    return data


__all__ = ["fulfil_task", "receipt_evidence", "verify_claim", "work_proof_evidence"]
